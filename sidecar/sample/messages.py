"""What sampling hands on to its consumers over time (the store's writer, the Pyroscope pusher):
a process as discovery sees it, a window of one process's samples, a process gone."""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.classify.window import Window

#: A process's identity: (pid, start time in clock ticks since boot).
ProcessKey = tuple[int, int]
#: (waiter thread id, holder thread id (0: none), the holder's thread name or "", the
#: holder's site or "", samples): who held the GIL while a loop thread waited, as stored
HolderRow = tuple[int, int, str, str, int]


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


@dataclass(frozen=True)
class WindowBatch:
    """One window of one process, as ``serve``'s sessions hand it on: the classified window,
    stored as the window of ``width`` seconds that starts at its start's whole second."""

    process: ProcessKey
    width: int
    window: Window

    @property
    def start(self) -> int:
        """The whole second its window starts at: its key in the store."""
        return int(self.window.start)

    def gil_holdings(self) -> list[HolderRow]:
        """Who held the GIL while a loop thread waited, the holder named as the window names
        its threads ("" when it does not)."""
        names = self.window.thread_names
        return [
            (held.waiter, held.holder, names.get(held.holder, ""), held.site, held.samples)
            for held in self.window.gil_holders
        ]


@dataclass(frozen=True)
class Gone:
    """A process that exited, or is no longer sampled."""

    key: ProcessKey
    when: float


Message = ProcessRecord | Gone | WindowBatch
