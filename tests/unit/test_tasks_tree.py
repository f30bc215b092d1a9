"""The asyncio task tree built from given task rows, and ``sidecar tasks`` for a missing
process (the scan of real targets: tests/live/test_tasks.py)."""

from __future__ import annotations

from sidecar import _native
from sidecar.sample.tasks import tree_lines
from tests.support.helpers import sidecar


def row(id: int, name: str, awaited_by: int | None, awaits: int | None = None) -> _native.TaskRow:
    return {
        "id": id,
        "name": name,
        "state": "waiting",
        "frames": [f"{name} (m.py:{id})"],
        "future": "Future" if awaits is None else "Task",
        "awaits": awaits,
        "awaited_by": awaited_by,
    }


def test_the_tree_keeps_loops_and_tasks_awaited_from_outside_the_scan() -> None:
    """A task whose awaiting task the scan left out is a root; tasks awaiting each other in a
    loop (a torn scan) are printed once each, from the first by name; a task awaiting another
    has it under its chain, beside the tasks of its gather."""
    scan: _native.TaskScan = {
        "python_version": "3.12.0",
        "tasks": [
            row(1, "main", None, awaits=2),
            row(2, "awaited", 1),
            row(3, "gathered", 1),
            row(4, "orphan", 99),
            row(5, "loop_b", 6),
            row(6, "loop_a", 5),
        ],
        "folded": [],
        "torn": 0,
        "unread": 0,
    }
    assert tree_lines(scan) == [
        "'main' [waiting] awaits task 'awaited'",
        "    main (m.py:1)",
        "    ├─ 'awaited' [waiting] awaits a Future",
        "    │      awaited (m.py:2)",
        "    └─ 'gathered' [waiting] awaits a Future",
        "           gathered (m.py:3)",
        "'orphan' [waiting] awaits a Future",
        "    orphan (m.py:4)",
        "'loop_a' [waiting] awaits a Future",
        "    loop_a (m.py:6)",
        "    └─ 'loop_b' [waiting] awaits a Future",
        "           loop_b (m.py:5)",
    ]


def test_a_missing_process_is_one_line() -> None:
    result = sidecar("tasks", "--pid", "4194305")
    assert result.returncode == 1
    assert result.stderr == "sidecar: error: no process with PID 4194305 (or it exited)\n"
