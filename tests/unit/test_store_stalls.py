"""Stalls in the store (schema 9) on real SQLite files: a database of schema 8 migrated with its
windows intact; stalls written once each, read back by range (those that overlap it), length,
target and count, with the stalls a window did not keep summed; moved by downsampling into the
coarser window and taken by retention with the window they ended in."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sidecar.classify.stalls import Stall
from sidecar.store import ProcessRecord, WindowBatch
from sidecar.store.query import QueryError, Range, Reader, UnknownTarget
from sidecar.store.schema import MIGRATIONS
from sidecar.store.stallquery import StallReader
from tests.support.batches import window_batch
from tests.unit.test_store import at_schema, open_store, query_all, query_one

HANDLER = "main (app.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:600);h (app.py:9)"


def stall(start: float, length: float, state: str = "blocked") -> Stall:
    states = dict.fromkeys(("busy", "blocked", "gil", "gc"), 0.0)
    states[state] = length
    return Stall(
        start=start,
        duration_s=length,
        ongoing=False,
        thread_id=11,
        thread="MainThread",
        samples=round(length * 100),
        states=states,
        state=state,
        site="h (app.py:9)",
        holder="pool_*" if state == "gil" else None,
        callback="h (app.py:9)",
    )


def batch(record: ProcessRecord, window: int, stalls: list[Stall], dropped: int = 0) -> WindowBatch:
    rows = [(HANDLER, 11, "blocked", 5)]
    return window_batch(record.key, window, 10, 5, rows, stalls=stalls, stalls_dropped=dropped)


def test_a_version_8_database_gains_the_stalls(tmp_path: Path) -> None:
    db = tmp_path / "v8.db"
    at_schema(db, 8).close()
    store, record = open_store(db)
    assert query_one(db, "PRAGMA user_version") == len(MIGRATIONS)
    assert "stalls" in {name for (name,) in query_all(db, "SELECT name FROM sqlite_master")}
    now = int(time.time()) // 10 * 10
    store.write([batch(record, now, [stall(now + 1, 0.4)])])
    store.close()
    found, total = StallReader(Reader(db)).stalls(1, Range(now, now + 10))
    assert total == 1 and found[0]["duration_s"] == 0.4


def test_stalls_come_back_by_range_length_and_target(tmp_path: Path) -> None:
    db = tmp_path / "stalls.db"
    store, record = open_store(db)
    base = (int(time.time()) // 3600 - 3) * 3600
    first = [stall(base + 2, 0.3), stall(base + 9.9, 0.5, "gil")]  # the second runs on
    store.write([batch(record, base, first), batch(record, base + 10, [stall(base + 12, 2.5)], 4)])
    store.write([batch(record, base, first)])  # handed over twice: each kept once
    reader = StallReader(Reader(db))
    found, total = reader.stalls(1, Range(base, base + 20))
    assert total == 3
    assert [(s["start"], s["duration_s"], s["state"]) for s in found] == [
        (base + 2, 0.3, "blocked"),
        (base + 9.9, 0.5, "gil"),
        (base + 12, 2.5, "blocked"),
    ]
    assert found[1]["holder"] == "pool_*" and found[1]["states"]["gil"] == 0.5
    assert (found[0]["pid"], found[0]["target"]) == (record.pid, 1)
    # the gil stall began in the first window and ran into the second: in both
    assert [s["state"] for s in reader.stalls(1, Range(base + 10, base + 20))[0]] == [
        "gil",
        "blocked",
    ]
    assert reader.stalls(1, Range(base, base + 20), min_ms=400)[1] == 2
    longest, total = reader.stalls(None, Range(base, base + 20), limit=1, longest=True)
    assert (total, [s["duration_s"] for s in longest]) == (3, [2.5])
    assert reader.dropped(1, Range(base, base + 20)) == 4
    with pytest.raises(UnknownTarget):
        reader.stalls(7, Range(base, base + 20))
    with pytest.raises(QueryError, match="'limit'"):
        reader.stalls(1, Range(base, base + 20), limit=0)

    # downsampling moves them into the coarser window; retention takes them with it
    while store.downsample(time.time()):
        pass
    assert {w for (w,) in query_all(db, "SELECT window FROM stalls")} == {base}
    assert reader.stalls(1, Range(base, base + 20))[1] == 3
    while store.prune(base + 3600):
        pass
    assert query_one(db, "SELECT COUNT(*) FROM stalls") == 0
    assert query_one(db, "PRAGMA integrity_check") == "ok"
    store.close()
