"""Busy, idle or blocked: what one sample of one thread says about the event loop.

- busy: the OS says the thread is on CPU.
- idle: off CPU in an idle wait. An event-loop thread waiting in its poll (asyncio's selector
  ``select``; with uvloop or another C loop, no Python frame above the frame that entered the
  loop), or any thread that runs no event loop (thread pools, condition waits, queue gets).
- blocked: an event-loop thread off CPU anywhere else: ``time.sleep``, a synchronous socket
  read, a lock, file I/O. The loop serves nobody meanwhile.

Classification runs once per unique stack, never per sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, ParamSpec, TypeVar

from sidecar.profile import BLOCKED_LEAF, IDLE_LEAF, Frame, parse_frame, state_of

P = ParamSpec("P")
R = TypeVar("R")
#: Characters of stack text each cache below may hold (about as many bytes).
CACHE_CHARS = 8 * 2**20


class TextCache(Generic[P, R]):
    """Results of a function of stack texts, all dropped at once when their keys add up to
    ``limit`` characters: a bound on memory however deep the stacks (a bound on the count is
    none: 65,536 stacks 2,000 frames deep are gigabytes)."""

    def __init__(self, func: Callable[P, R], limit: int = CACHE_CHARS) -> None:
        self.func = func
        self.limit = limit
        self.chars = 0
        self.results: dict[object, R] = {}
        self.__doc__ = func.__doc__
        self.__name__ = func.__name__

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        key = (args, tuple(kwargs.items())) if kwargs else args
        try:
            return self.results[key]
        except KeyError:
            pass
        result = self.func(*args, **kwargs)
        size = sum(len(a) for a in args if isinstance(a, str)) + 64
        if self.chars + size > self.limit:
            self.cache_clear()
        self.results[key] = result
        self.chars += size
        return result

    def cache_clear(self) -> None:
        self.results = {}
        self.chars = 0


#: Frames that enter an event loop: (function, file suffix). A suffix of "" matches any file.
LOOP_ENTRIES: tuple[tuple[str, str], ...] = (
    ("run_forever", "asyncio/base_events.py"),
    ("run_until_complete", "asyncio/base_events.py"),
    ("run", "asyncio/runners.py"),
    ("run", "uvloop/__init__.py"),
    ("run_app", "aiohttp/web.py"),
    # gunicorn's aiohttp workers; under uvloop no Python frame of the loop's own shows
    ("run", "aiohttp/worker.py"),
    ("start", "tornado/platform/asyncio.py"),
    ("start", "tornado/ioloop.py"),
    ("run_sync", "tornado/ioloop.py"),
    ("run_forever", ""),
    ("run_until_complete", ""),
)

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


def code_frames(stack: str) -> list[Frame]:
    """The frames of a folded stack, without synthetic leaves and thread/process roots."""
    frames = [parse_frame(part) for part in stack.split(";")] if stack else []
    while frames and frames[-1].name in (IDLE_LEAF, BLOCKED_LEAF) and not frames[-1].file:
        frames.pop()
    while frames and not frames[0].is_code and frames[0].name.startswith(("thread (", "process (")):
        frames.pop(0)
    return frames


def _is_loop_stack(stack: str) -> bool:
    """True when the stack belongs to a thread that runs an event loop."""
    return loop_entry_index(code_frames(stack)) is not None


def _classify(stack: str, on_cpu: bool) -> str:
    """The state of one sample: ``busy``, ``idle`` or ``blocked``."""
    if on_cpu:
        return "busy"
    return off_cpu_state(code_frames(stack))


is_loop_stack = TextCache(_is_loop_stack)
classify = TextCache(_classify)


def off_cpu_state(frames: Sequence[Frame]) -> str:
    entry = loop_entry_index(frames)
    if entry is None:
        return "idle"
    if entry == len(frames) - 1:
        return "idle"
    if _matches(frames[-1], SELECTOR_WAITS):
        return "idle"
    return "blocked"


def leaf_for(state: str) -> str | None:
    """The synthetic leaf frame that marks an off-CPU state in folded output."""
    return {"idle": IDLE_LEAF, "blocked": BLOCKED_LEAF}.get(state)


def estimate_state(stack: str) -> str:
    """Best guess for a profile without leaves (plain py-spy): the selector wait reads as idle.

    Without the OS on-CPU flag nothing else can be told apart, so the rest counts as busy.
    """
    frames = code_frames(stack)
    if frames and _matches(frames[-1], SELECTOR_WAITS):
        return "idle"
    return "busy"


def state_counts(stacks: Mapping[str, int]) -> dict[str, int]:
    """busy / idle / blocked samples of the event-loop threads in marked folded stacks.

    Stacks of threads without an event loop count only when no thread runs one (a plain script).
    """
    loop = {stack: count for stack, count in stacks.items() if is_loop_stack(stack)}
    out = {"busy": 0, "idle": 0, "blocked": 0}
    for stack, count in (loop or stacks).items():
        out[state_of(stack)] += count
    return out
