"""``sidecar top``'s figures and screen from windows as the native sampler hands them over:
the span rolls forward, the shares and functions follow the rules of ``stats``, the table
sorts on each of its four columns, a pre-fork master is left out of the group's view, and the
screen fits 80x24."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar._native import Row
from sidecar.analyze.top import SPANS, Rolling, sort_rows
from sidecar.classify.process import ProcessInfo
from sidecar.classify.window import window_of
from sidecar.commands.top import Feed
from sidecar.commands.top_view import Frame, cut_function, screen, sparkline

LOOP = "main (app.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:600)"
HANDLER = f"{LOOP};handler (app.py:20)"
CRUNCH = f"{HANDLER};crunch (app.py:7)"
POLL = f"{LOOP};BaseSelector.select (selectors.py:468)"
RATE = 100.0


def window(start: float, busy: int, idle: int, blocked: int = 0, **extra: Any) -> Any:
    """One second of the loop thread: ``busy`` samples in crunch (half of them, rounded
    down) or handler, ``idle`` in the poll, ``blocked`` in handler off CPU."""
    rows = [
        *extra.get("rows", []),
        Row(thread_id=1, thread_name="MainThread", on_cpu=True, stack=CRUNCH, count=busy // 2),
        Row(
            thread_id=1,
            thread_name="MainThread",
            on_cpu=True,
            stack=HANDLER,
            count=busy - busy // 2,
        ),
        Row(thread_id=1, thread_name="MainThread", on_cpu=False, stack=POLL, count=idle),
        Row(thread_id=1, thread_name="MainThread", on_cpu=False, stack=HANDLER, count=blocked),
    ]
    return {
        "start": start,
        "end": start + 1.0,
        "samples": busy + idle + blocked,
        "stacks": [row for row in rows if row.count],
        "gil_holders": [],
        "tasks": extra.get("tasks", []),
        "task_scans": extra.get("task_scans", 0),
        "task_unread": 0,
        "stalls": extra.get("stalls", []),
        "stalls_dropped": 0,
    }


def add(rolling: Rolling, native: Any, pid: int, info: ProcessInfo) -> None:
    """A sampler's window of ``pid``, classified, into the view."""
    rolling.feed(pid, info).add(window_of(native))


def stall(start: float, seconds: float) -> dict[str, Any]:
    return {
        "thread_id": 1,
        "start": start,
        "end": start + seconds,
        "ongoing": False,
        "samples": int(seconds * RATE),
        "gc": 0,
        "callback": "handler (app.py:20)",
        "stacks": [("blocked", HANDLER, int(seconds * RATE))],
        "other": 0,
        "holders": [],
        "task": None,
    }


def info(pid: int, role: str | None = None) -> ProcessInfo:
    return ProcessInfo(pid, 1, "python app.py", "3.11", "aiohttp", "asyncio", "maps", role)


def test_the_span_rolls_forward_and_the_times_add_up_since_the_start() -> None:
    rolling = Rolling(RATE)
    for second in range(20):  # busy 10 samples a second, then 50 in the last 5 seconds
        busy = 50 if second >= 15 else 10
        add(rolling, window(1000.0 + second, busy, 100 - busy), 7, info(7))
    view = rolling.view(5)
    assert view.analysis.states == {"busy": 250, "idle": 250, "blocked": 0, "gil": 0, "cpu_wait": 0}
    assert view.analysis.share("busy") == 0.5
    assert view.covered_s == 5.0
    assert view.history["busy"][-6:] == [0.1, 0.5, 0.5, 0.5, 0.5, 0.5]
    rows = {row.name: row for row in view.functions}
    crunch = rows["crunch (app.py)"]
    assert crunch.own == 0.5 and crunch.total == 0.5  # of the busy samples of the span
    assert rows["handler (app.py)"].total == 1.0
    # seconds since the start: 15 s of 5 samples and 5 s of 25, at 100 Hz
    assert crunch.own_s == pytest.approx((15 * 5 + 5 * 25) / RATE)
    assert rolling.view(10).analysis.states["busy"] == 5 * 10 + 5 * 50
    # nothing older than the longest span is kept
    add(rolling, window(1000.0 + 200, 1, 1), 7, info(7))
    assert len(rolling.slices) == 1


def test_the_table_sorts_on_each_column_and_reverses() -> None:
    rolling = Rolling(RATE)
    add(rolling, window(1000.0, 60, 40), 7, info(7))
    rows = rolling.view(10).functions
    assert [r.name for r in sort_rows(rows, "own")][:2] == ["crunch (app.py)", "handler (app.py)"]
    assert sort_rows(rows, "total")[0].name == "handler (app.py)"
    assert sort_rows(rows, "total_time")[0].name == "handler (app.py)"
    assert [r.name for r in sort_rows(rows, "total", ascending=True)] == [
        "crunch (app.py)",
        "handler (app.py)",
    ]
    with pytest.raises(ValueError, match="no sort column"):
        sort_rows(rows, "name")
    feed = Feed([], RATE, 100.0)
    feed.sort_by(2)
    assert (feed.sort, feed.ascending) == ("total", False)
    feed.sort_by(2)
    assert (feed.sort, feed.ascending) == ("total", True)
    feed.sort_by(3)
    assert (feed.sort, feed.ascending) == ("own_time", False)
    spans = [feed.span]
    for _ in SPANS:
        feed.next_span()
        spans.append(feed.span)
    assert sorted(set(spans)) == list(SPANS) and spans[0] == spans[-1]


def test_a_prefork_master_is_left_out_of_the_group_and_shown_alone() -> None:
    """The master waits on its workers in gunicorn's arbiter, as a master does (its frames
    settle the role /proc suggests); a process pool's owner, which does not, is no master."""
    arbiter = "main (app.py:1);Arbiter.sleep (gunicorn/arbiter.py:357)"
    waits = [Row(thread_id=9, thread_name="", on_cpu=False, stack=arbiter, count=1)]
    rolling = Rolling(RATE)
    for second in range(3):
        add(rolling, window(1000.0 + second, 0, 100, rows=waits), 1, info(1, "master"))
        add(rolling, window(1000.0 + second, 80, 20), 2, info(2, "worker"))
        add(rolling, window(1000.0 + second, 40, 60), 3, info(3, "worker"))
    group = rolling.view(10)
    assert group.pids == [2, 3]
    assert group.analysis.share("busy") == pytest.approx(0.6)
    assert group.history["busy"] == pytest.approx([0.6, 0.6, 0.6])
    alone = rolling.view(10, pid=1)
    assert alone.pids == [1] and alone.analysis.role == "master"
    assert alone.analysis.share("idle") == 1.0
    owner = Rolling(RATE)
    add(owner, window(1000.0, 10, 90), 1, info(1, "master"))
    assert owner.view(10).analysis.role is None


def test_tasks_in_flight_and_the_stalls_of_the_span() -> None:
    rolling = Rolling(RATE)
    tasks = [("handler (app.py:20);[running]", 10), ("poll (app.py:30);[waiting]", 30)]
    add(rolling, window(1000.0, 10, 90, tasks=tasks, task_scans=10), 7, info(7))
    add(rolling, window(1001.0, 10, 60, 30, stalls=[stall(1001.2, 0.3)]), 7, info(7))
    add(rolling, window(1002.0, 10, 70, 20, stalls=[stall(1002.5, 0.2)]), 7, info(7))
    view = rolling.view(5)
    assert view.tasks is not None
    assert view.tasks.mean == 4.0 and view.tasks.states["waiting"] == 3.0
    assert [round(s.start, 1) for s in view.stalls] == [1002.5, 1001.2]
    assert view.stalls[0].state == "blocked" and view.stalls[0].site == "handler (app.py:20)"
    assert rolling.view(5).analysis.states["blocked"] == 50
    assert Rolling(RATE).view(5).tasks is None
    lines = screen(view, Frame(title="PID 7", rate_hz=RATE, slow_ms=400), 80, 24)
    assert "slow requests ≥ 400 ms: none" in lines, lines


def test_the_screen_fits_80_by_24_and_names_what_it_shows() -> None:
    rolling = Rolling(RATE)
    for second in range(12):
        add(
            rolling,
            window(1000.0 + second, 30, 50, 20, stalls=[stall(1000.0 + second, 0.2)]),
            7,
            info(7),
        )
    view = rolling.view(10, history=80 - 17)
    lines = screen(view, Frame(title="PID 7", rate_hz=RATE, sort="total"), 80, 24)
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    text = "\n".join(lines)
    assert "aiohttp on asyncio" in text and "crunch (app.py)" in text
    assert "busy      30.0%" in text and "blocked   20.0%" in text
    assert "%Total▼" in text and "stalls ≥ 100 ms: 10" in text
    helped = screen(view, Frame(title="PID 7", rate_hz=RATE, help=True), 80, 24)
    assert any("1  sort by %Own" in line for line in helped)


def test_long_names_and_histories_are_cut_to_fit() -> None:
    name = "Handler.a_rather_long_method (/srv/app/lib/python3.11/site-packages/pkg/module.py)"
    cut = cut_function(name, 45)
    assert len(cut) == 45 and cut.startswith("Handler.a_rather_long_method (…")
    assert cut.endswith("module.py)")
    assert sparkline([0.0, 0.5, 1.0], 5) == "  ▁▅█"
    assert sparkline([1.0] * 10, 4) == "████"
