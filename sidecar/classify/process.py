"""What the frames of a process say of it: which server framework its event loop runs, which
loop that is, and its role in a pre-fork server, by the tables of ``rules.processes``; and
``ProcessInfo``, a process as sidecar describes it (``discover`` reads the rest from /proc).
No I/O happens here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from sidecar.classify.threads import is_loop_stack
from sidecar.rules.frames import Frame, code_frames
from sidecar.rules.processes import ASYNCIO_LOOP, MASTER_WAITS, POOL_CHILD, SERVER_FILES


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


def _frames_of_loop_threads(stacks: Mapping[str, int]) -> Iterable[tuple[list[Frame], int]]:
    for stack, count in stacks.items():
        if is_loop_stack(stack):
            yield code_frames(stack), count


def framework_from_frames(stacks: Mapping[str, int]) -> str:
    """The server framework whose files the event-loop threads run, weighted by samples."""
    score = dict.fromkeys(SERVER_FILES, 0)
    for frames, count in _frames_of_loop_threads(stacks):
        files = {frame.file.replace("\\", "/") for frame in frames}
        for name, suffixes in SERVER_FILES.items():
            if any(file.endswith(suffix) for file in files for suffix in suffixes):
                score[name] += count
    best = max(score, key=lambda name: score[name])
    return best if score[best] else "unknown"


def loop_from_frames(stacks: Mapping[str, int]) -> str:
    """asyncio when the loop thread runs asyncio's Python loop, uvloop when it runs a C loop
    (callbacks right above the frame that entered the loop), unknown without a loop thread."""
    loop_samples = 0
    for frames, count in _frames_of_loop_threads(stacks):
        loop_samples += count
        for frame in frames:
            name = frame.name.rsplit(".", 1)[-1]
            if any(name == fn and frame.file.endswith(sfx) for fn, sfx in ASYNCIO_LOOP):
                return "asyncio"
            if frame.file.replace("\\", "/").split("/")[0] == "uvloop":
                return "uvloop"
    return "uvloop" if loop_samples else "unknown"


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
    seen = framework_from_frames(stacks)
    if seen != "unknown":
        framework, source = seen, "frames"
    if loop_from_frames(stacks) == "asyncio":
        loop = "asyncio"
    marks = frozenset().union(*(role_marks(stack) for stack in stacks))
    role = settle_role(info.role, marks)
    return replace(info, framework=framework, loop=loop, framework_source=source, role=role)
