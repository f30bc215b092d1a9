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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, ParamSpec, TypeVar

from sidecar.rules.frames import STATES, Frame, code_frames, state_of
from sidecar.rules.loops import is_selector_wait, loop_entry_index

if TYPE_CHECKING:
    from sidecar._native import Window

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
    if is_selector_wait(frames[-1]):
        return "idle"
    return "blocked"


def estimate_state(stack: str) -> str:
    """Best guess for a profile without leaves (plain py-spy): the selector wait reads as idle.

    Without the OS on-CPU flag nothing else can be told apart, so the rest counts as busy.
    """
    frames = code_frames(stack)
    if frames and is_selector_wait(frames[-1]):
        return "idle"
    return "busy"


def state_counts(stacks: Mapping[str, int]) -> dict[str, int]:
    """busy / idle / blocked samples of the event-loop threads in marked folded stacks.

    Stacks of threads without an event loop count only when no thread runs one (a plain script).
    """
    loop = {stack: count for stack, count in stacks.items() if is_loop_stack(stack)}
    out = dict.fromkeys(STATES, 0)
    for stack, count in (loop or stacks).items():
        out[state_of(stack)] += count
    return out


@dataclass(frozen=True)
class ClassifiedWindow:
    """A sampler's window decoded once, for ``record`` and ``serve`` alike: its rows with
    their state, summed per (folded stack, thread id, state)."""

    start: float
    end: float
    ticks: int
    #: (folded stack, thread id, state, samples): the store's rows
    rows: list[tuple[str, int, str, int]]
    thread_names: dict[int, str]
    #: busy / idle / blocked samples of every thread
    states: dict[str, int]


def classify_window(window: Window) -> ClassifiedWindow:
    """Each row of ``window`` classified busy, idle or blocked (once per unique stack)."""
    counts: dict[tuple[str, int, str], int] = {}
    states = dict.fromkeys(STATES, 0)
    names: dict[int, str] = {}
    for row in window["stacks"]:
        state = classify(row.stack, row.on_cpu)
        at = (row.stack, row.thread_id, state)
        counts[at] = counts.get(at, 0) + row.count
        states[state] += row.count
        if row.thread_name:
            names[row.thread_id] = row.thread_name
    return ClassifiedWindow(
        start=float(window["start"]),
        end=float(window["end"]),
        ticks=int(window["samples"]),
        rows=[(stack, tid, state, count) for (stack, tid, state), count in counts.items()],
        thread_names=names,
        states=states,
    )
