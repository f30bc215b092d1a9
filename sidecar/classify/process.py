"""What the frames of a process say of it: which server framework its event loop runs, which
loop that is, and its role in a pre-fork server, by the tables of ``rules.processes``; and
``ProcessInfo``, a process as sidecar describes it (``discover`` reads the rest from /proc).
No I/O happens here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from operator import attrgetter

from sidecar.classify.stacks import Facts, Frames, entry_index
from sidecar.rules.frames import code_frames
from sidecar.rules.processes import MASTER_WAITS, POOL_CHILD, SERVER_FILES


@dataclass(frozen=True)
class ProcessInfo:
    """One process as sidecar describes it. ``(pid, start_time)`` identifies it."""

    pid: int
    start_time: int
    cmdline: str
    #: ``major.minor`` from the interpreter's mapped files; empty when it is not Python.
    python_version: str
    framework: str
    loop: str
    #: Where the framework was told from: ``frames``, ``maps``, or empty when unknown.
    framework_source: str = ""
    #: ``master`` or ``worker`` in a pre-fork server (see ``prefork_role``), None alone.
    role: str | None = None


_FRAMEWORKS = attrgetter("frameworks")


class LoopThreads:
    """What the stacks of the event-loop threads say of their process, added one by one (their
    frames as ``Frames.of`` gives them): its server framework, weighted by samples, and its loop
    (``framework_from_frames``, ``loop_from_frames``)."""

    def __init__(self) -> None:
        self.stacks = 0
        self.samples = 0
        self.score = dict.fromkeys(SERVER_FILES, 0)
        self.seen_loop: str | None = None

    def add(self, frames: Sequence[Facts], count: int) -> None:
        self.stacks += 1
        self.samples += count
        for name in set(chain.from_iterable(map(_FRAMEWORKS, frames))):
            self.score[name] += count
        if self.seen_loop is None:
            self.seen_loop = next((one.loop for one in frames if one.loop is not None), None)

    @property
    def framework(self) -> str:
        best = max(self.score, key=lambda name: self.score[name])
        return best if self.score[best] else "unknown"

    @property
    def loop(self) -> str:
        """asyncio when the loop thread runs asyncio's Python loop, uvloop when it runs a C
        loop (callbacks right above the frame that entered the loop), unknown without a loop
        thread: what the first loop stack that shows either says."""
        if self.seen_loop is not None:
            return self.seen_loop
        return "uvloop" if self.samples else "unknown"


def loop_threads(stacks: Mapping[str, int]) -> LoopThreads:
    """``LoopThreads`` of the stacks of event-loop threads among ``stacks``."""
    table = Frames()
    out = LoopThreads()
    for stack, count in stacks.items():
        frames = table.of(stack)
        if entry_index(frames) is not None:
            out.add(frames, count)
    return out


def framework_from_frames(stacks: Mapping[str, int]) -> str:
    """The server framework whose files the event-loop threads run, weighted by samples."""
    return loop_threads(stacks).framework


def loop_from_frames(stacks: Mapping[str, int]) -> str:
    """asyncio when the loop thread runs asyncio's Python loop, uvloop when it runs a C loop
    (callbacks right above the frame that entered the loop), unknown without a loop thread."""
    return loop_threads(stacks).loop


def _has_frame(stack: str, table: tuple[tuple[str, str], ...]) -> bool:
    for frame in code_frames(stack):
        name, file = frame.name.rsplit(".", 1)[-1], frame.file.replace("\\", "/")
        if any(name == fn and file.endswith(suffix) for fn, suffix in table):
            return True
    return False


def role_marks(stack: str) -> frozenset[str]:
    """What one stack says of a pre-fork role: ``master`` (a master waiting on its workers),
    ``pool`` (a process pool's child); empty for most stacks. Cheap on stacks of neither."""
    marks = set()
    if "arbiter.py" in stack or "process.py" in stack:  # the files of both tables
        if _has_frame(stack, MASTER_WAITS):
            marks.add("master")
        if _has_frame(stack, POOL_CHILD):
            marks.add("pool")
    return frozenset(marks)


def settle_role(candidate: str | None, marks: Iterable[str]) -> str | None:
    """The role /proc suggests (``prefork_role``) as the frames seen so far settle it: a master
    only once it was seen waiting on its workers, a worker unless it is a process pool's."""
    seen = set(marks)
    if candidate == "master":
        return "master" if "master" in seen else None
    if candidate == "worker":
        return None if "pool" in seen else "worker"
    return None


def refine(info: ProcessInfo, stacks: Mapping[str, int]) -> ProcessInfo:
    """``info`` with framework and loop corrected by what the frames of a profile show."""
    framework, source, loop = info.framework, info.framework_source, info.loop
    threads = loop_threads(stacks)
    if threads.framework != "unknown":
        framework, source = threads.framework, "frames"
    if threads.loop == "asyncio":
        loop = "asyncio"
    marks = frozenset().union(*(role_marks(stack) for stack in stacks))
    role = settle_role(info.role, marks)
    return replace(info, framework=framework, loop=loop, framework_source=source, role=role)
