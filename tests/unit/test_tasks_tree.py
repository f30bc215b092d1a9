"""The asyncio task tree built from given task rows, and ``sidecar tasks`` for a missing
process (the scan of real targets: tests/live/test_tasks.py)."""

from __future__ import annotations

from sidecar import _native
from sidecar.sample.tasks import summary_line, tree_lines
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
        "request": None,
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
        "requests_torn": 0,
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


def test_a_requests_task_says_its_request_above_its_chain() -> None:
    """A request's task prints what it serves under its header, and the summary counts the
    requests in flight and those left out; a start aiohttp did not keep is said so."""
    served = row(2, "handler", 1)
    served["request"] = {
        "framework": "aiohttp", "method": "POST", "path": "/users/7", "route": "/users/{id}",
        "handler": None, "started": None, "started_clock": None, "age_s": None,
        "trace": "4bf92f3577b34da6a3ce929d0e0e4736", "trace_header": "traceparent",
    }  # fmt: skip
    tornado = row(3, "tornado", None)
    tornado["request"] = {
        "framework": "tornado", "method": "GET", "path": "/items/9", "route": None,
        "handler": "ItemHandler", "started": 1.0, "started_clock": "wall", "age_s": 0.25,
        "trace": None, "trace_header": None,
    }  # fmt: skip
    scan: _native.TaskScan = {
        "python_version": "3.12.0",
        "tasks": [row(1, "conn", None, awaits=2), served, tornado],
        "folded": [], "torn": 0, "unread": 0, "requests_torn": 2,
    }  # fmt: skip
    lines = tree_lines(scan)
    assert lines[2:5] == [
        "    └─ 'handler' [waiting] awaits a Future",
        "           request: POST /users/7 · route /users/{id} · trace "
        "4bf92f3577b34da6a3ce929d0e0e4736 (traceparent) · start not kept (aiohttp keeps it "
        "for its access log only)",
        "           handler (m.py:2)",
    ]
    assert "    request: GET /items/9 · no route yet (ItemHandler) · 0.250 s in flight" in lines
    assert summary_line(5, scan) == (
        "PID 5 · Python 3.12.0 · 3 tasks: running 0 · ready 0 · waiting 3 · 2 requests in "
        "flight · 2 requests changed as they were read, not shown"
    )


def test_a_missing_process_is_one_line() -> None:
    result = sidecar("tasks", "--pid", "4194305")
    assert result.returncode == 1
    assert result.stderr == "sidecar: error: no process with PID 4194305 (or it exited)\n"
