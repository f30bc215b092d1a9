"""One window, classified once, and every consumer of windows: what ``record`` and ``stats``
count (``Tally``), what ``top`` rolls (``Rolling``), what a serve session keeps for /metrics and
hands its sinks (``Session``, ``WindowBatch``) all read the same ``Window`` and agree on it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sidecar.analyze.top import Rolling
from sidecar.classify.process import ProcessInfo
from sidecar.classify.window import Consumer, window_of
from sidecar.sample.messages import WindowBatch
from sidecar.sample.record import Tally
from sidecar.serve.sessions import Session

if TYPE_CHECKING:
    from sidecar import _native

LOOP = "main (app.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:600)"
HANDLER = f"{LOOP};Handle._run (asyncio/events.py:80);handler (app.py:20)"
POLL = f"{LOOP};BaseEventLoop._run_once (asyncio/base_events.py:1900);select (selectors.py:468)"
REQUEST = "RequestHandler._handle_request (aiohttp/web_protocol.py:477);handler (app.py:20)"


def native_window() -> _native.Window:
    """One second of a loop thread: 30 samples busy in its handler, 60 idle in its poll, 10
    blocked in the handler, one stall of 0.3 s, and two task scans of a request's task."""
    from sidecar._native import Row

    rows = [
        Row(thread_id=1, thread_name="MainThread", on_cpu=True, stack=HANDLER, count=30),
        Row(thread_id=1, thread_name="MainThread", on_cpu=False, stack=POLL, count=60),
        Row(thread_id=1, thread_name="MainThread", on_cpu=False, stack=HANDLER, count=10),
    ]
    stall: _native.Stall = {
        "thread_id": 1,
        "start": 1000.2,
        "end": 1000.5,
        "ongoing": False,
        "samples": 30,
        "gc": 0,
        "callback": "handler (app.py:20)",
        "stacks": [("busy", HANDLER, 20), ("blocked", HANDLER, 10)],
        "other": 0,
        "holders": [],
        "task": ("Task-7", REQUEST),
    }
    return {
        "start": 1000.0,
        "end": 1001.0,
        "samples": 100,
        "stacks": rows,
        "gil_holders": [],
        "tasks": [(f"{REQUEST};[running]", 1), (f"{REQUEST};[waiting]", 3)],
        "task_scans": 2,
        "task_unread": 2,
        "stalls": [stall],
        "stalls_dropped": 1,
    }


def test_every_consumer_reads_the_one_window_alike() -> None:
    window = window_of(native_window())
    assert window.states == {"busy": 30, "idle": 60, "blocked": 10, "gil": 0, "cpu_wait": 0}
    assert window.in_flight == (1 + 3 + 2) / 2
    assert [(s.state, round(s.duration_s, 3), s.task, s.request) for s in window.stalls] == [
        ("busy", 0.3, "Task-7", True)
    ]

    tally = Tally()
    rolling = Rolling(rate_hz=100.0)
    session = Session((7, 1), "python app.py", None, "aiohttp", "asyncio", 0.0)  # type: ignore[arg-type]
    consumers: list[Consumer] = [
        tally,
        rolling.feed(7, ProcessInfo(7, 1, "", "3.12", "", "")),
        session,
    ]
    for consumer in consumers:
        consumer.add(window)

    assert tally.state_counts() == window.states
    assert tally.stalls() == window.stalls and tally.stalls_dropped == 1
    assert (tally.task_scans, tally.task_unread, tally.task_peak) == (2, 2, 3.0)

    view = rolling.view(10)
    assert view.analysis.states == window.states
    assert view.stalls == window.stalls
    assert view.tasks is not None and (view.tasks.mean, view.tasks.unread) == (3.0, 1.0)

    assert session.recent[-1].states == window.states
    assert session.tasks[("running", "request")] == 0.5
    assert session.tasks[("waiting", "request")] == 1.5
    assert session.tasks_unread == 1.0
    # the one dropped is counted at the shortest length kept
    assert (session.stalls.count, round(session.stalls.sum, 6)) == (2, 0.6)

    batch = WindowBatch((7, 1), 10, window)
    assert (batch.start, batch.window.rows, batch.window.tasks) == (
        1000,
        window.rows,
        [(REQUEST, "running", 1), (REQUEST, "waiting", 3)],
    )
