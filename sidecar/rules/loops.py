"""The frames that enter an event loop, run its callbacks, and of its idle wait.

A frame matches a table row when its function's last name part is the row's function and its
file ends with the row's suffix (function names may come qualified by their class,
``BaseEventLoop.run_forever``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar import _native
from sidecar.rules.frames import Frame


def _table(rows: Sequence[Sequence[str]]) -> tuple[tuple[str, str], ...]:
    return tuple((function, suffix) for function, suffix in rows)


# The sampler finds stalls with the three tables below, the classifier loop threads with the
# first: each is defined once, in native/src/rules.rs, and read here.
#: Frames that enter an event loop: (function, file suffix). A suffix of "" matches any file.
LOOP_ENTRIES = _table(_native.LOOP_ENTRIES)
#: The frame of asyncio's loop that runs one callback (a task's step or a plain callback): the
#: frame above it is the callback's. uvloop runs its callbacks from C: there the frame above
#: the loop's entry is.
CALLBACK_RUNNERS = _table(_native.CALLBACK_RUNNERS)
#: asyncio's pass of its loop: with no callback above it, the loop is between callbacks.
LOOP_PASSES = _table(_native.LOOP_PASSES)


#: The poll of asyncio's selector loop: an idle leaf for a loop thread.
SELECTOR_WAITS: tuple[tuple[str, str], ...] = (
    ("select", "selectors.py"),
    ("poll", "selectors.py"),
    ("_poll", "asyncio/windows_events.py"),
)


def _matches(frame: Frame, table: tuple[tuple[str, str], ...]) -> bool:
    """Function names may come qualified by their class (``BaseEventLoop.run_forever``)."""
    file = frame.file.replace("\\", "/")
    name = frame.name.rsplit(".", 1)[-1]
    return any(name == fn and file.endswith(suffix) for fn, suffix in table)


def is_loop_entry(frame: Frame) -> bool:
    return frame.is_code and _matches(frame, LOOP_ENTRIES)


def loop_entry_index(frames: Sequence[Frame]) -> int | None:
    """Index (root first) of the innermost frame that entered an event loop, if any."""
    for index in range(len(frames) - 1, -1, -1):
        if is_loop_entry(frames[index]):
            return index
    return None


def is_selector_wait(frame: Frame) -> bool:
    """The frame is the selector loop's poll: an idle wait for a loop thread."""
    return _matches(frame, SELECTOR_WAITS)
