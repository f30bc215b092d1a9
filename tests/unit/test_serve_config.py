"""``sidecar serve`` without a target: the token beyond loopback, the health rule on the
service's own clock, a database of a newer sidecar, the push options' environment variables
(the real process against real targets: tests/serve/test_serve.py)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tests.support.helpers import (
    free_port,
    sidecar,
    wait_until,
)


def test_listening_beyond_loopback_needs_a_token() -> None:
    result = sidecar("serve", "--host", "0.0.0.0", "--port", str(free_port()), timeout=30)
    assert result.returncode == 2
    assert "--token-file" in result.stderr


class Clock:
    """A wall clock the test moves forward by hand."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("problem", ["dropped window", "database deleted"])
def test_health_is_degraded_for_a_recent_problem_only(tmp_path: Path, problem: str) -> None:
    """A window dropped or a database started anew degrades /healthz for RECENT seconds after
    it (by the service's clock), not forever; /metrics keeps counting it."""
    from sidecar.serve.metrics import registry_for
    from sidecar.serve.service import ServeConfig, Service
    from sidecar.serve.sinks import RECENT
    from sidecar.store import WindowBatch

    db = tmp_path / "health.db"
    clock = Clock()
    service = Service(ServeConfig(db=db), clock=clock)  # its writer only: nothing sampled
    assert service.health()["status"] == "ok"
    service.writer.start()
    try:
        if problem == "dropped window":  # a window of a process the store never saw
            service.writer.submit(WindowBatch((1, 1), int(clock.now), 1, 1, [("a", 1, "busy", 1)]))
            counter, key = "sidecar_store_dropped_windows_total", "dropped_windows"
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            counter, key = "sidecar_store_recreated_total", "recreated"
        assert wait_until(lambda: service.health()["store"][key] == 1, timeout=15)
        assert wait_until(lambda: service.writer.health.backlog == 0, timeout=10)
        assert service.health()["status"] == "degraded"
        clock.now += RECENT - 1
        assert service.health()["status"] == "degraded"
        clock.now += 2
        health = service.health()
        assert health["status"] == "ok", health
        assert health["store"][key] == 1
        families = registry_for(service).collect()
        values = {s.name: s.value for family in families for s in family.samples}
        assert values[counter] == 1
    finally:
        service.writer.stop()


def test_a_database_of_a_newer_sidecar_is_refused_in_one_line(tmp_path: Path) -> None:
    """serve on a database whose schema is newer than it knows: one line, exit 1, and the file
    as it was (it used to end in a traceback)."""
    from sidecar.store import ProcessRecord, Store, WindowBatch
    from sidecar.store.schema import MIGRATIONS

    db = tmp_path / "newer.db"
    store = Store(db)
    store.attach(ProcessRecord(7, 7, "python app.py", time.time()))
    store.write([WindowBatch((7, 7), int(time.time()), 10, 5, [("main (app.py:1)", 7, "busy", 5)])])
    store.close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    conn.close()
    before = db.read_bytes()
    result = sidecar("serve", "--db", str(db), "--port", str(free_port()), timeout=30)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"sidecar: error: cannot open database {db}: it has schema version "
        f"{len(MIGRATIONS) + 1}, newer than this sidecar's ({len(MIGRATIONS)}): "
        "upgrade sidecar or use another --db"
    ]
    assert db.read_bytes() == before


def test_push_options_default_to_their_environment_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each of serve's push options takes its default from the variable its help names; unset
    or empty means none."""
    import argparse

    from sidecar.commands import serve

    variables = {
        "push": "SIDECAR_PUSH_URL",
        "push_token_file": "SIDECAR_PUSH_TOKEN_FILE",
        "push_tenant": "SIDECAR_PUSH_TENANT",
        "service_name": "SIDECAR_SERVICE_NAME",
    }

    def parsed() -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        serve.add_parser(parser.add_subparsers())
        return parser.parse_args(["serve"])

    for variable in variables.values():
        monkeypatch.delenv(variable, raising=False)
    assert all(getattr(parsed(), dest) is None for dest in variables)
    for variable in variables.values():
        monkeypatch.setenv(variable, f"from {variable}")
    args = parsed()
    assert all(getattr(args, dest) == f"from {variable}" for dest, variable in variables.items())
    for variable in variables.values():
        monkeypatch.setenv(variable, "")
    assert all(getattr(parsed(), dest) is None for dest in variables)
