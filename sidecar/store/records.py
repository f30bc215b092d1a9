"""What the store is given to write: processes as discovery sees them, windows of samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sidecar.classify.stalls import Stall

ProcessKey = tuple[int, int]
#: (waiter thread id, holder thread id, holder's thread name, holder's site, samples)
GilHolding = tuple[int, int, str, str, int]


@dataclass(frozen=True)
class ProcessRecord:
    """A process as discovery sees it; (pid, start_time) is its identity."""

    pid: int
    start_time: int
    cmdline: str
    seen: float
    framework: str = "unknown"
    loop: str = "asyncio"
    python_version: str = ""
    error: str | None = None
    #: ``master`` / ``worker`` in a pre-fork server, None for a lone process.
    role: str | None = None
    #: What groups it with the other processes of its program (``discover.group_of``); its
    #: command line when not given.
    group: str = ""

    @property
    def key(self) -> ProcessKey:
        return (self.pid, self.start_time)

    @property
    def group_key(self) -> str:
        return self.group or self.cmdline


@dataclass
class WindowBatch:
    """One window of one process: rows of (stack, thread id, state, count), and of its asyncio
    tasks (task stack without its leaf, task state, task-samples) with the scans that counted
    them and the tasks they found past their bound, and who held the GIL while its event-loop
    threads waited for it."""

    process: ProcessKey
    start: int
    width: int
    ticks: int
    rows: list[tuple[str, int, str, int]]
    thread_names: dict[int, str] = field(default_factory=dict)
    tasks: list[tuple[str, str, int]] = field(default_factory=list)
    task_scans: int = 0
    #: tasks the scans found past their bound and did not read, summed over them
    task_unread: int = 0
    #: (waiting loop thread id, holding thread id (0: none), the holder's name, where it was:
    #: its innermost application frame or "", samples), from ``ClassifiedWindow.gil_holders``
    gil_holders: list[GilHolding] = field(default_factory=list)
    #: the stalls of its event loops that ended in it, and those past the sampler's bound
    stalls: list[Stall] = field(default_factory=list)
    stalls_dropped: int = 0
