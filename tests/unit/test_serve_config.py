"""``sidecar serve`` without a target: the token beyond loopback, the health rule on the
service's own clock, a database of a newer sidecar, the push options' environment variables,
a starved loop's windows in /metrics and through the API in-process, a throttled target's CPU
limit and throttling in /metrics from a real cgroup (the real process against real targets:
tests/serve/test_serve.py)."""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.batches import window_batch
from tests.support.cgroups import kernel_stat
from tests.support.helpers import (
    Spawner,
    free_port,
    sidecar,
    wait_until,
)

if TYPE_CHECKING:
    from sidecar import _native


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

    db = tmp_path / "health.db"
    clock = Clock()
    service = Service(ServeConfig(db=db), clock=clock)  # its writer only: nothing sampled
    assert service.health()["status"] == "ok"
    service.writer.start()
    try:
        if problem == "dropped window":  # a window of a process the store never saw
            service.writer.submit(window_batch((1, 1), int(clock.now), 1, 1, [("a", 1, "busy", 1)]))
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
    from sidecar.store import ProcessRecord, Store
    from sidecar.store.schema import MIGRATIONS

    db = tmp_path / "newer.db"
    store = Store(db)
    store.attach(ProcessRecord(7, 7, "python app.py", time.time()))
    store.write(
        [window_batch((7, 7), int(time.time()), 10, 5, [("main (app.py:1)", 7, "busy", 5)])]
    )
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


#: A loop starved by a crunching thread, as the sampler hands a window over.
LOOP = "main (app.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:600)"
HANDLER = f"{LOOP};handler (app.py:20)"
CRUNCH = "Thread.run (threading.py:1010);crunch (app.py:7)"


def starved_window() -> _native.Window:
    """A window of native rows: the loop thread (11) waits for the GIL in 6 samples (5 while
    'cruncher' (12) held it in crunch, 1 while nobody did), is busy in 2 (one of them while it
    collected garbage) and idle in 1; the cruncher is busy in all 9."""
    from sidecar._native import Row

    def row(tid: int, name: str, stack: str, count: int, **state: bool) -> Row:
        on_cpu = state.pop("on_cpu", False)
        return Row(
            thread_id=tid, thread_name=name, on_cpu=on_cpu, stack=stack, count=count, **state
        )

    return {
        "start": 1000.0,
        "end": 1010.0,
        "samples": 9,
        "stacks": [
            row(11, "MainThread", HANDLER, 6, gil=True),
            row(11, "MainThread", HANDLER, 1, on_cpu=True),
            row(11, "MainThread", HANDLER, 1, on_cpu=True, gc=True),
            row(11, "MainThread", f"{LOOP};select (selectors.py:468)", 1),
            row(12, "cruncher", CRUNCH, 9, on_cpu=True),
        ],
        "gil_holders": [(11, HANDLER, 12, CRUNCH, 5), (11, HANDLER, 0, "", 1)],
        "tasks": [],
        "task_scans": 0,
        "task_unread": 0,
        "stalls": [],
        "stalls_dropped": 0,
    }


def test_a_starved_loop_reads_gil_in_its_metrics_and_names_who_held_the_gil(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window as serve hands it over: the store is given who held the GIL (named as the
    window names its threads), and /metrics the event-loop thread's shares (not the
    cruncher's) with gil among them, and the share of them spent collecting garbage."""
    from sidecar.classify.window import window_of
    from sidecar.sample.messages import WindowBatch
    from sidecar.serve.metrics import registry_for
    from sidecar.serve.service import ServeConfig, Service
    from sidecar.serve.sessions import COUNTERS, Session

    window = window_of(starved_window())
    assert WindowBatch((4242, 1), 10, window).gil_holdings() == [
        (11, 12, "cruncher", "crunch (app.py:7)", 5),
        (11, 0, "", "", 1),
    ]

    service = Service(ServeConfig(db=tmp_path / "m.db"))  # nothing sampled: one session given
    session = Session((4242, 1), "python app.py", None, "aiohttp", "asyncio", 0.0)  # type: ignore[arg-type]
    session.add(window)
    session.add(dataclasses.replace(window, start=1010.0, end=1020.0))
    loop = session.recent[0]
    assert loop.states == {"busy": 2, "idle": 1, "blocked": 0, "gil": 6, "cpu_wait": 0}
    assert loop.gc_samples == 1
    # the fields of a sampler's stats() the metrics read (no stall in progress)
    stats = {"lag_mean": 0.0, "stalled_since": None, **dict.fromkeys(COUNTERS, 0)}
    monkeypatch.setattr(service.sessions, "live_stats", lambda: [(session, stats)])
    try:
        values = {
            (s.name, s.labels.get("state")): s.value
            for family in registry_for(service).collect()
            for s in family.samples
            if s.labels.get("pid") == "4242"
        }
    finally:
        service.writer.store.close()
    assert values[("sidecar_loop_share", "gil")] == 6 / 9
    assert values[("sidecar_loop_share", "busy")] == 2 / 9
    assert values[("sidecar_loop_share", "idle")] == 1 / 9
    assert values[("sidecar_loop_share", "blocked")] == 0
    assert values[("sidecar_loop_gc_share", None)] == 1 / 9
    assert values[("sidecar_loop_stalled_seconds", None)] == 0


# the app served in-process by Starlette's test client (through httpx, which it deprecates)
@pytest.mark.filterwarnings("ignore:Using .httpx. with .starlette.testclient.")
def test_the_api_serves_gil_and_gc_from_the_store(tmp_path: Path) -> None:
    """Windows of a starved loop written to a real database, read through the real app
    (in-process): the timeline counts gil, profiles keep their [gil] leaves and [gc] frames
    and filter by gil, and /api/stats gives the loop's gil and gc shares and who held the GIL
    (from the stored holders) per target and framework."""
    from fastapi.testclient import TestClient

    from sidecar.classify.window import window_of
    from sidecar.serve.api import create_app
    from sidecar.serve.service import ServeConfig, Service
    from sidecar.store import ProcessRecord, Store, WindowBatch

    db = tmp_path / "api.db"
    now = int(time.time()) // 10 * 10
    window = window_of(starved_window())
    store = Store(db)
    record = ProcessRecord(4242, 1, "python app.py", now, "aiohttp", "asyncio")
    store.attach(record)
    for start in (now - 20, now - 10):
        moved = dataclasses.replace(window, start=float(start), end=float(start + 10))
        store.write([WindowBatch(record.key, 10, moved)])
    store.close()
    service = Service(ServeConfig(db=db, window=10))  # its reader; nothing sampled
    try:
        client = TestClient(create_app(service))
        span = f"from={now - 20}&to={now}"
        line = client.get(f"/api/timeline?target=1&{span}&step=10").json()
        assert line["buckets"] == [
            {"t": t, "busy": 2, "idle": 1, "blocked": 0, "gil": 6, "cpu_wait": 0}
            for t in (now - 20, now - 10)
        ]
        folded = client.get(f"/api/profile?target=1&{span}").text.splitlines()
        assert f"{HANDLER};[gil] 12" in folded and f"{HANDLER};[gc] 2" in folded
        assert client.get(f"/api/profile?target=1&{span}&state=gil").text == (
            f"{HANDLER};[gil] 12\n"
        )
        refused = client.get(f"/api/profile?target=1&{span}&state=sleepy")
        assert refused.status_code == 400
        assert "busy, idle, blocked, gil" in refused.json()["error"]["message"]
        stats = client.get(f"/api/stats?{span}").json()
        (target,) = stats["targets"]
        merged = stats["frameworks"]["aiohttp"]
        for shares in (target, merged):
            assert shares["samples"] == 18
            assert shares["gil_share"] == round(12 / 18, 4)
            assert shares["gc_share"] == round(2 / 18, 4)
            assert shares["gil_holders"] == [
                {"thread": "cruncher", "site": "crunch (app.py:7)", "share": 1.0}
            ]
        assert sum(target[f"{s}_share"] for s in ("busy", "idle", "blocked", "gil")) == (
            pytest.approx(1.0, abs=0.001)
        )
    finally:
        service.writer.store.close()


def test_metrics_carry_each_target_s_cpu_limit_and_throttling(
    limited: Path,
    spawn: Spawner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Sessions given windows as serve gives them: a real spinner in a cgroup v1 of its own at
    0.2 CPU shows its limit, 0.2 cores, and its cgroup's counters as the kernel's cpu.stat
    reads them straight at the same instant, growing from one window to the next; this test's
    own process, unlimited, shows the counters and no limit; a process whose cgroup cannot be
    read shows none of these series, is said once in the log, and the scrape goes on."""
    from sidecar.classify.window import window_of
    from sidecar.sample import cgroup
    from sidecar.serve import sessions
    from sidecar.serve.metrics import registry_for
    from sidecar.serve.service import ServeConfig, Service
    from sidecar.serve.sessions import COUNTERS, Session

    spinner = spawn.command(sys.executable, "-c", "while True: pass")
    (limited / "cgroup.procs").write_text(f"{spinner.pid}\n")
    time.sleep(0.3)  # a few periods under the quota first
    unreadable = 4243  # read from a /proc whose cgroup file the kernel never wrote
    fake = tmp_path / "proc" / str(unreadable)
    fake.mkdir(parents=True)
    (fake / "cgroup").write_text("not a cgroup line\n")
    real = cgroup.probe_cpu

    def probe(pid: int) -> cgroup.CgroupCpu | cgroup.CpuUnknown:
        return real(pid, proc=tmp_path / "proc") if pid == unreadable else real(pid)

    monkeypatch.setattr(sessions, "probe_cpu", probe)
    service = Service(ServeConfig(db=tmp_path / "cpu.db"))  # nothing sampled: sessions given
    given = [
        Session((pid, 1), "python spin.py", None, "aiohttp", "asyncio", 0.0)  # type: ignore[arg-type]
        for pid in (spinner.pid, os.getpid(), unreadable)
    ]
    stats = {"lag_mean": 0.0, "stalled_since": None, **dict.fromkeys(COUNTERS, 0)}
    monkeypatch.setattr(service.sessions, "live_stats", lambda: [(s, stats) for s in given])
    window = window_of(starved_window())

    def scrape() -> dict[tuple[str, str], float]:
        """(sample, pid) -> value of the sidecar_cpu_* series, their labels checked."""
        out = {}
        for family in registry_for(service).collect():
            for sample in family.samples:
                if sample.name.startswith("sidecar_cpu_"):
                    assert set(sample.labels) == {"pid", "framework", "loop", "role"}, sample
                    out[(sample.name, sample.labels["pid"])] = sample.value
        return out

    def windows_at_one_instant() -> tuple[int, int, int]:
        """Each session given a window while the spinner's cgroup counted no period (one ends
        every 100 ms): the kernel's counters of it, read straight on either side."""
        for _ in range(50):
            kernel = kernel_stat(limited)
            for session in given:
                session.add(window)
            if kernel_stat(limited) == kernel:
                return kernel
        raise AssertionError("the kernel's cpu.stat moved during every one of 50 windows")

    caplog.set_level(logging.INFO, logger="sidecar.sessions")
    try:
        first = windows_at_one_instant()
        before = scrape()
        time.sleep(1.0)
        second = windows_at_one_instant()
        after = scrape()
    finally:
        service.writer.store.close()
    spin = str(spinner.pid)
    for values, kernel in ((before, first), (after, second)):
        assert values[("sidecar_cpu_limit_cores", spin)] == pytest.approx(0.2)
        assert values[("sidecar_cpu_cfs_periods_total", spin)] == kernel[0]
        assert values[("sidecar_cpu_cfs_throttled_periods_total", spin)] == kernel[1]
        assert values[("sidecar_cpu_cfs_throttled_seconds_total", spin)] == pytest.approx(
            kernel[2] / 1e9, abs=1e-9
        )
    periods = second[0] - first[0]
    throttled = second[1] - first[1]
    assert periods >= 5 and throttled > periods / 2, (first, second)
    # this test's own process: unlimited, counters of its own cgroup, and no limit
    own = str(os.getpid())
    assert ("sidecar_cpu_limit_cores", own) not in after
    for name in ("periods", "throttled_periods", "throttled_seconds"):
        assert (
            after[(f"sidecar_cpu_cfs_{name}_total", own)]
            >= before[(f"sidecar_cpu_cfs_{name}_total", own)]
        )
    assert not {key for key in after if key[1] == str(unreadable)}, after
    said = [r.getMessage() for r in caplog.records if f"PID {unreadable}:" in r.getMessage()]
    assert said == [
        f"PID {unreadable}: no cpu limit nor throttling in /metrics: /proc/{unreadable}/cgroup "
        "has a malformed line: 'not a cgroup line'"
    ], said
