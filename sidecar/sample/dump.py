"""One read of every Python thread of a live process (``sidecar dump``): each thread's name,
OS thread id, state now, whether it holds the GIL, and its frames, innermost first, with their
local variables when asked for, all read from the target's memory (never by running code in
it). The states are the sampler's (``sidecar.classify.threads``): one read of a thread is one
sample of it. The threads come in the order they started, the main thread first, as py-spy
lists them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from sidecar import _native, defaults
from sidecar.classify.threads import classify
from sidecar.discover import read_cmdline
from sidecar.errors import UsageError, native_errors
from sidecar.sample.fate import refuse_stopped, said_if_stopped

#: Characters of a str or bytes value shown before it is cut.
DEFAULT_LOCALS_CHARS = defaults.LOCALS_CHARS


@dataclass(frozen=True)
class FrameDump:
    function: str
    file: str
    line: int
    #: (name, short repr) of each bound local; None when not asked for or not read.
    locals: tuple[tuple[str, str], ...] | None = None
    #: Why the locals did not read, when they were asked for.
    locals_error: str | None = None

    @property
    def where(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"


@dataclass(frozen=True)
class ThreadDump:
    tid: int
    name: str | None
    #: ``busy``, ``idle``, ``blocked`` or ``gil`` (waiting for the GIL another thread holds).
    state: str
    holds_gil: bool
    #: The interpreter was collecting garbage on this thread.
    gc: bool
    frames: tuple[FrameDump, ...]
    #: Its stack changed between the dump and the read after it: it ran on, and the frames
    #: are those of one read.
    moving: bool


@dataclass(frozen=True)
class ProcessDump:
    pid: int
    python_version: str
    #: Which reader read it (the walker or py-spy) and why.
    reader: str
    #: Reads taken; how long the threads were stopped (``blocking``).
    reads: int
    pause: float | None
    #: the main thread, then the others in the order they started
    threads: tuple[ThreadDump, ...]
    #: its command line, arguments separated by spaces ("" once it has exited)
    cmdline: str = ""


def read_dump(pid: int, *, blocking: bool = False, locals_chars: int | None = None) -> ProcessDump:
    """Every Python thread of ``pid`` once; with ``locals_chars``, each frame's locals, str
    and bytes cut at that many characters. ``blocking`` stops the threads for the read.
    Raises TargetGone, PermissionDenied or TargetError with one line that says why."""
    if pid <= 0:
        raise UsageError(f"--pid must be a positive process id, not {pid}")
    if locals_chars is not None and locals_chars < 1:
        raise UsageError(f"--locals-chars must be 1 or more, not {locals_chars}")
    if blocking:
        refuse_stopped(pid)
    with said_if_stopped(pid), native_errors(pid):
        read = _native.dump_threads(pid, blocking=blocking, locals=locals_chars)
    moving = set(read["moving"])
    threads = [_thread(thread, thread["tid"] in moving) for thread in read["threads"]]
    return ProcessDump(
        pid=pid,
        python_version=read["python_version"],
        reader=read["reader"],
        reads=read["reads"],
        pause=read["pause"],
        threads=tuple(sorted(threads, key=lambda thread: _start_order(pid, thread.tid))),
        cmdline=read_cmdline(pid),
    )


def _start_order(pid: int, tid: int) -> tuple[bool, int, int]:
    """Where thread ``tid`` of ``pid`` sorts: the main thread (its id is the PID) first, then
    by when each started (``/proc``'s start time, in clock ticks since boot), then by id (ids
    go up as threads start); a thread that exited since the read, last."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", encoding="utf-8", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        started = int(fields[19])  # field 22 of stat(5); fields[0] is the third, its state
    except (OSError, IndexError, ValueError):
        started = sys.maxsize
    return tid != pid, started, tid


def _thread(thread: _native.DumpThread, moving: bool) -> ThreadDump:
    stack = thread["stack"] or ""
    return ThreadDump(
        tid=thread["tid"],
        name=thread["name"],
        state=classify(stack, thread["active"], thread["gil"] == "waits", thread["cpu_wait"]),
        holds_gil=thread["gil"] == "holds",
        gc=thread["gc"],
        frames=tuple(
            FrameDump(
                function=frame["function"],
                file=frame["file"],
                line=frame["line"],
                locals=None if frame["locals"] is None else tuple(frame["locals"]),
                locals_error=frame["locals_error"],
            )
            for frame in thread["frames"]
        ),
        moving=moving,
    )
