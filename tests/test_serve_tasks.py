"""``sidecar serve`` with its task scans, as a real process against real targets: task windows
stored beside the thread windows, the task profile, timeline and stats of the API, the stats
CLI and the Prometheus gauges agreeing with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import Spawner, wait_until
from test_serve import serve  # noqa: F401  (the fixture)

from sidecar.query import Range, Reader
from sidecar.taskquery import NoTaskScans, TaskReader

PARKED = 12
#: The parked tasks, the ticker and main's task.
LIVE_TASKS = PARKED + 2


def scanned(db: Path, target: int, scans: int) -> bool:
    """The store holds at least ``scans`` task scans of the target."""
    try:
        return TaskReader(Reader(db)).require_scans(target, Range(0, 2**33)) >= scans
    except (NoTaskScans, Exception):
        return False


def test_task_windows_are_stored_beside_thread_windows(
    spawn: Spawner, serve: Any, tmp_path: Path
) -> None:
    """A target with 12 tasks parked on one await, a ticker and its main task: the stored
    windows count 14 tasks in flight, 12 of them in the parked stack, none of them requests."""
    target = spawn.target("tasks_parked", "--tasks", str(PARKED))
    server = serve("--task-rate", "20", pids=(target.pid,))
    assert wait_until(lambda: bool(server.targets()), timeout=20)
    (row,) = server.targets()
    assert wait_until(lambda: scanned(server.db, row["id"], 40), timeout=30)
    tasks = TaskReader(Reader(server.db))
    span = Range(0, 2**33)
    flight = tasks.in_flight(row["id"], span)
    assert abs(flight.mean - LIVE_TASKS) < 0.2, flight
    assert flight.requests == 0
    assert flight.states["waiting"] > LIVE_TASKS - 0.2, flight
    profile = tasks.profile(row["id"], span)
    parked = {s: n for s, n in profile.stacks.items() if "(targets/tasks_parked.py:15)" in s}
    assert sum(parked.values()) / flight.scans > PARKED - 0.2, profile.stacks
    assert all(s.endswith(";[waiting]") for s in parked), parked
    # the threads are stored as before
    assert Reader(server.db).profile(row["id"], span).total > 0


def test_task_rate_zero_scans_no_task(spawn: Spawner, serve: Any) -> None:
    target = spawn.target("tasks_parked", "--tasks", "3")
    server = serve("--task-rate", "0", pids=(target.pid,))
    assert wait_until(
        lambda: bool(server.targets()) and server.targets()[0]["samples"] > 200, timeout=30
    )
    (row,) = server.targets()
    assert not scanned(server.db, row["id"], 1)
