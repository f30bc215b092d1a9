"""Limits of the machine under a running ``sidecar serve``: a database at its --max-db-size
cap, with its WAL, in normal running.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from tests.support.faultkit import Entry, integrity, record
from tests.support.helpers import Servers, Spawner, wait_until

pytestmark = pytest.mark.faults

#: The cap of the capped database: small, so that stacks that never repeat reach it in seconds.
CAP = 1 << 20
#: /healthz polls at the cap.
POLLS = 30


def on_disk(db: Path) -> int:
    """The database file and its WAL, as the disk holds them now."""
    total = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(FileNotFoundError):
            total += os.path.getsize(f"{db}{suffix}")
    return total


def test_a_database_at_its_cap_with_its_wal_stays_under_it_and_healthy(
    spawn: Spawner, sidecars: Servers, tmp_path: Path
) -> None:
    """--max-db-size bounds the database file and its WAL together; evicting the oldest
    windows at the cap is what the cap is for, not a write error, and /healthz says "ok"
    all along in normal running at the cap. Stacks that never repeat fill 1 MiB in seconds."""
    fresh = spawn.target("generated", "--threads", "2")
    db = tmp_path / "capped.db"
    server = sidecars(db, "--window", "1", "--rate", "200", "--max-db-size", "1M", "--pid",
                      str(fresh.pid))  # fmt: skip
    assert wait_until(lambda: server.health()["store"]["evicted_windows"] >= 3, timeout=90), (
        server.health()
    )
    statuses: list[str] = []
    sizes: list[int] = []
    errors: list[int] = []
    for _ in range(POLLS):
        health = server.health()
        statuses.append(health["status"])
        sizes.append(health["store"]["size_bytes"])
        errors.append(health["store"]["write_errors"])
        time.sleep(0.5)
    store = server.health()["store"]
    written = server.metric("sidecar_store_windows_written_total")
    assert statuses == ["ok"] * POLLS, (statuses, server.health())
    assert max(errors) == 0, store
    assert max(sizes) <= CAP, sizes
    assert store["evicted_windows"] > 3 and store["dropped_windows"] == 0, store
    assert server.stop() == 0
    assert on_disk(db) <= CAP, on_disk(db)
    assert integrity(db) == "ok"
    entry = Entry("a database at its size cap, with its WAL", "storage faults", rounds=POLLS)
    entry.fault("database at --max-db-size 1M", store["evicted_windows"])
    entry.note(
        f"{store['evicted_windows']:.0f} windows evicted at the cap and {written:.0f} written, "
        f"no write error, {POLLS} of {POLLS} polls ok; the file and its WAL at most "
        f"{max(sizes) / CAP:.0%} of the cap"
    )
    record(entry)
