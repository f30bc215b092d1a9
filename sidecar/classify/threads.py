"""Busy, idle, blocked, gil or cpu_wait: what one sample of one thread says about the event loop.

- busy: the thread is on a CPU.
- idle: off CPU in an idle wait. An event-loop thread waiting in its poll (asyncio's selector
  ``select``; with uvloop or another C loop, no Python frame above the frame that entered the
  loop), or any thread that runs no event loop (thread pools, condition waits, queue gets).
- blocked: an event-loop thread off CPU anywhere else: ``time.sleep``, a synchronous socket
  read, a lock, file I/O. The loop serves nobody meanwhile.
- gil: ready to run Python but waiting for the GIL that another thread holds; the sampler says
  so, and which thread held it (``GilHolder``).
- cpu_wait: runnable, but the kernel runs something else: a container at its CPU limit, or more
  runnable threads than cores. The sampler tells it from the thread's ``schedstat``.

A sample taken while its thread collected garbage gets a ``[gc]`` frame on top (it is busy).
Classification runs once per unique stack, never per sample; ``classify.window`` applies it
to a sampler's window.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, NamedTuple, ParamSpec, TypeVar

from sidecar.rules.frames import STATES, Frame, code_frames, state_of
from sidecar.rules.layers import layer_of_file
from sidecar.rules.loops import is_selector_wait, loop_entry_index

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


def _classify(stack: str, on_cpu: bool, gil: bool = False, cpu_wait: bool = False) -> str:
    """The state of one sample: ``busy``, ``idle``, ``blocked``, ``gil`` (the sampler found
    the thread waiting for the GIL) or ``cpu_wait`` (found runnable, waiting for a CPU)."""
    if gil:
        return "gil"
    if on_cpu:
        return "cpu_wait" if cpu_wait else "busy"
    return off_cpu_state(code_frames(stack))


def _holder_site(stack: str) -> str:
    """Where a thread that held the GIL was: its innermost application frame (the innermost
    frame outside the standard library, the framework and the event loop), else its innermost
    frame; empty for a thread without Python frames."""
    frames = code_frames(stack)
    for frame in reversed(frames):
        if layer_of_file(frame.file) == "application":
            return f"{frame.name} ({frame.file}:{frame.line})"
    if not frames:
        return ""
    return f"{frames[-1].name} ({frames[-1].file}:{frames[-1].line})"


def _stall_site(stack: str) -> str:
    """Where a loop thread's sample in a stall was: of the frames above the one that entered
    the loop (the callback and what it called), the innermost application frame, else the
    innermost framework frame, else the innermost; ``holder_site`` where no frame is above the
    loop's entry. Never the program's entry (``<module>`` at ``asyncio.run(main())``) for a
    sample in a callback that runs no application code."""
    frames = code_frames(stack)
    entry = loop_entry_index(frames)
    above = frames[entry + 1 :] if entry is not None else []
    if not above:
        return holder_site(stack)
    for layer in ("application", "framework"):
        for frame in reversed(above):
            if layer_of_file(frame.file) == layer:
                return f"{frame.name} ({frame.file}:{frame.line})"
    return f"{above[-1].name} ({above[-1].file}:{above[-1].line})"


def holder_name(tid: int, names: Mapping[int, str]) -> str:
    """How a GIL holder is named: its thread's name, else its id; a GIL being handed over
    from one thread to another (held by none) says so."""
    if not tid:
        return "(none: being handed over)"
    return names.get(tid) or f"thread {tid}"


#: A pool's thread: ``concurrent.futures`` names them PREFIX_N (asyncio's default executor's
#: ``asyncio_0``, uvloop's ``uvloop_0``, ``ThreadPoolExecutor-0_3``).
POOL_THREAD = re.compile(r"^(.+)_\d+$")


def holder_group(name: str) -> str:
    """The threads of one pool as one holder, ``PREFIX_*``: which of its threads held the GIL
    says little, the pool does."""
    return POOL_THREAD.sub(r"\1_*", name)


is_loop_stack = TextCache(_is_loop_stack)
classify = TextCache(_classify)
holder_site = TextCache(_holder_site)
stall_site = TextCache(_stall_site)


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
    """Samples per state of the event-loop threads in marked folded stacks.

    Stacks of threads without an event loop count only when no thread runs one (a plain script).
    """
    loop = {stack: count for stack, count in stacks.items() if is_loop_stack(stack)}
    out = dict.fromkeys(STATES, 0)
    for stack, count in (loop or stacks).items():
        out[state_of(stack)] += count
    return out


class GilHolder(NamedTuple):
    """Samples of an event-loop thread waiting for the GIL, by the thread that held it."""

    #: the waiting thread's id and the holder's (0: none held it at that instant, the GIL
    #: was being handed over)
    waiter: int
    holder: int
    #: where the holder was (``holder_site``)
    site: str
    samples: int
