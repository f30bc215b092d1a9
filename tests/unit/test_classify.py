"""Classification of single stacks into busy / idle / blocked, as
docs/how-it-works.md#states-of-a-thread-sample defines them."""

from __future__ import annotations

import pytest

from sidecar import _native
from sidecar.classify.threads import (
    GilHolder,
    classify,
    estimate_state,
    holder_group,
    holder_site,
    is_loop_stack,
    stall_site,
    state_counts,
)
from sidecar.classify.window import window_of
from sidecar.rules.frames import parse_frame

MAIN = "<module> (app.py:10);main (app.py:5)"
ASYNCIO = (
    MAIN
    + ";run_app (aiohttp/web.py:502);BaseEventLoop.run_until_complete (asyncio/base_events.py:640)"
    ";BaseEventLoop.run_forever (asyncio/base_events.py:607)"
    ";BaseEventLoop._run_once (asyncio/base_events.py:1884)"
)
UVLOOP = MAIN + ";run_app (aiohttp/web.py:502)"
TORNADO_UV = MAIN + ";BaseAsyncIOLoop.start (tornado/platform/asyncio.py:203)"
HANDLER = ";Handle._run (asyncio/events.py:80);handler (app.py:20)"
WORKER = "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982)"


@pytest.mark.parametrize(
    ("stack", "on_cpu", "state"),
    [
        # asyncio waiting in its selector: idle
        (ASYNCIO + ";_PollLikeSelector.select (selectors.py:468)", False, "idle"),
        (ASYNCIO + ";EpollSelector.select (selectors.py:468)", False, "idle"),
        # uvloop (C loop): no Python frame above the frame that entered the loop
        (UVLOOP, False, "idle"),
        (TORNADO_UV, False, "idle"),
        (MAIN + ";run (asyncio/runners.py:118)", False, "idle"),
        # off CPU inside a handler: the loop is blocked
        (ASYNCIO + HANDLER, False, "blocked"),
        (UVLOOP + ";handler (app.py:20)", False, "blocked"),
        (TORNADO_UV + ";get (app.py:30);SocketIO.readinto (socket.py:706)", False, "blocked"),
        # on CPU is busy, wherever it is
        (ASYNCIO + HANDLER, True, "busy"),
        (UVLOOP, True, "busy"),
        # threads without a loop are idle when off CPU
        (WORKER + ";_worker (concurrent/futures/thread.py:81)", False, "idle"),
        (WORKER + ";slow (app.py:3)", False, "idle"),
        (WORKER + ";slow (app.py:3)", True, "busy"),
    ],
)
def test_states(stack: str, on_cpu: bool, state: str) -> None:
    assert classify(stack, on_cpu) == state


def test_loop_threads_are_told_from_workers() -> None:
    assert is_loop_stack(ASYNCIO + HANDLER)
    assert is_loop_stack(UVLOOP)
    assert is_loop_stack("thread (MainThread 12);" + UVLOOP + ";[idle]")
    assert not is_loop_stack(WORKER + ";_worker (concurrent/futures/thread.py:81)")
    # a function merely named like an entry point elsewhere does not count
    assert not is_loop_stack(MAIN + ";start (myapp/jobs.py:4)")


def test_state_counts_use_loop_threads_only() -> None:
    stacks = {
        UVLOOP + ";[idle]": 90,
        UVLOOP + ";handler (app.py:20)": 6,
        UVLOOP + ";handler (app.py:20);[blocked]": 4,
        WORKER + ";[idle]": 1000,
    }
    assert state_counts(stacks) == {"busy": 6, "idle": 90, "blocked": 4, "gil": 0, "cpu_wait": 0}


def test_state_counts_without_a_loop_use_every_thread() -> None:
    stacks = {MAIN + ";spin (app.py:2)": 9, MAIN + ";[idle]": 1}
    assert state_counts(stacks) == {"busy": 9, "idle": 1, "blocked": 0, "gil": 0, "cpu_wait": 0}


def test_estimate_without_leaves() -> None:
    assert estimate_state(ASYNCIO + ";EpollSelector.select (selectors.py:468)") == "idle"
    assert estimate_state(ASYNCIO + HANDLER) == "busy"


@pytest.mark.parametrize(
    ("text", "name", "file", "line"),
    [
        ("run (asyncio/runners.py:118)", "run", "asyncio/runners.py", 118),
        ("<lambda> (a b/c.py:1)", "<lambda>", "a b/c.py", 1),
        ("fn (weird (name) (x.py:3)", "fn (weird (name)", "x.py", 3),
        ("rückwärts (ü.py:7)", "rückwärts", "ü.py", 7),
        ("[idle]", "[idle]", "", 0),
    ],
)
def test_parse_frame(text: str, name: str, file: str, line: int) -> None:
    frame = parse_frame(text)
    assert (frame.name, frame.file, frame.line) == (name, file, line)


def test_the_threads_of_a_pool_hold_the_gil_as_one() -> None:
    assert holder_group("asyncio_3") == "asyncio_*"
    assert holder_group("ThreadPoolExecutor-0_12") == "ThreadPoolExecutor-0_*"
    assert holder_group("cruncher") == "cruncher"
    assert holder_group("MainThread") == "MainThread"


def test_a_window_gives_gil_samples_gc_frames_and_the_loops_holders() -> None:
    """The sampler's flags decide gil, whatever the stack says; a collecting thread's stack
    gains [gc] on top; holders are kept for loop threads' waits only, at the holder's
    innermost application frame."""
    poll = ASYNCIO + ";EpollSelector.select (selectors.py:468)"
    crunch = WORKER + ";crunch (/srv/app/jobs.py:12);dumps (json/__init__.py:231)"
    row = _native.Row
    window: _native.Window = {
        "start": 10.0,
        "end": 11.0,
        "samples": 5,
        "stacks": [
            row(thread_id=1, thread_name="MainThread", on_cpu=False, gil=True, stack=poll, count=3),
            row(thread_id=1, thread_name="MainThread", on_cpu=False, stack=poll, count=1),
            row(thread_id=2, thread_name="pool_0", on_cpu=True, gc=True, stack=crunch, count=4),
            row(thread_id=3, thread_name="other", on_cpu=False, gil=True, stack=WORKER, count=2),
        ],
        "gil_holders": [(1, poll, 2, crunch, 3), (3, WORKER, 2, crunch, 2)],
        "tasks": [],
        "task_scans": 0,
        "task_unread": 0,
        "stalls": [],
        "stalls_dropped": 0,
    }
    classified = window_of(window)
    assert sorted(classified.rows) == sorted(
        [
            (poll, 1, "gil", 3),
            (poll, 1, "idle", 1),
            (crunch + ";[gc]", 2, "busy", 4),
            (WORKER, 3, "gil", 2),
        ]
    )
    assert classified.states == {"busy": 4, "idle": 1, "blocked": 0, "gil": 5, "cpu_wait": 0}
    # the waiter that runs no loop is left out; the site skips json, a standard library frame
    assert classified.gil_holders == [GilHolder(1, 2, "crunch (/srv/app/jobs.py:12)", 3)]


def test_a_stalls_site_is_in_the_callback_never_the_programs_entry() -> None:
    entry = (
        "<module> (tornado_pool.py:30);run (asyncio/runners.py:190);"
        "BaseEventLoop.run_until_complete (asyncio/base_events.py:641);"
        "BaseEventLoop.run_forever (asyncio/base_events.py:608);"
        "BaseEventLoop._run_once (asyncio/base_events.py:1922);Handle._run (asyncio/events.py:80)"
    )
    # a callback running only the framework's code: the framework's innermost frame
    framework = f"{entry};IOStream._handle_write (tornado/iostream.py:977);" + (
        "IOStream.write_to_fd (tornado/iostream.py:1140);socket.send (socket.py:12)"
    )
    assert stall_site(framework) == "IOStream.write_to_fd (tornado/iostream.py:1140)"
    assert holder_site(framework) == "<module> (tornado_pool.py:30)"  # what it read before
    # the application's code in it wins, however deep the framework and stdlib above it
    app = f"{entry};handle (tornado_pool.py:12);json.dumps (json/__init__.py:231)"
    assert stall_site(app) == "handle (tornado_pool.py:12)"
    # nothing above the loop's entry (an unknown loop): the innermost application frame
    assert stall_site("<module> (app.py:3);main (app.py:9)") == "main (app.py:9)"
