"""One window of one process's samples, classified once: what every consumer of windows takes.

The native sampler hands over windows of unique stacks (``sidecar._native.Window``); ``window_of``
decodes one into a ``Window``: its thread rows with their state (``classify.threads``), who held
the GIL while a loop thread waited, its stalls with what held each (``classify.stalls``), its
asyncio task rows by state (``classify.tasks``), what its task scans counted, and the slow
requests they saw end (``classify.requests``). Nothing of a
window is derived anywhere else: ``record`` and ``stats`` count windows (``sample.record``),
``top`` rolls them (``analyze.top``), ``serve`` hands them to its sinks (``serve.sessions``), each
through one ``add(window)`` (``Consumer``). A new field of a window is added here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sidecar.classify.requests import SlowRequest, slow_request_of
from sidecar.classify.stalls import Stall, stall_of
from sidecar.classify.tasks import in_flight, task_rows
from sidecar.classify.threads import GilHolder, classify, holder_site, is_loop_stack
from sidecar.rules.frames import GC_FRAME, STATES

if TYPE_CHECKING:
    from sidecar._native import Window as NativeWindow

#: (folded stack, thread id, state, samples): a thread row, as the store keeps it
ThreadRow = tuple[str, int, str, int]
#: (task stack without its leaf, task state, task-samples): a task row, as the store keeps it
TaskRow = tuple[str, str, int]


@dataclass(frozen=True)
class Window:
    """A sampler's window of one process, decoded once."""

    start: float
    end: float
    #: the sampler's ticks in it
    ticks: int
    #: its samples summed per (folded stack, thread id, state); a ``[gc]`` frame on top of a
    #: sample taken while its thread collected garbage
    rows: list[ThreadRow]
    thread_names: dict[int, str] = field(default_factory=dict)
    #: who held the GIL while an event-loop thread waited for it
    gil_holders: list[GilHolder] = field(default_factory=list)
    #: the stalls of its event loops that ended in it (oldest first), and those past the
    #: sampler's bound
    stalls: list[Stall] = field(default_factory=list)
    stalls_dropped: int = 0
    #: its asyncio tasks: task rows, the scans that counted them, and the tasks those scans
    #: found past their bound and did not read (summed over the scans)
    tasks: list[TaskRow] = field(default_factory=list)
    task_scans: int = 0
    task_unread: int = 0
    #: the slow requests that ended in it (oldest first; still in flight at the end:
    #: ``ongoing``), and those past the sampler's bound
    slow_requests: list[SlowRequest] = field(default_factory=list)
    slow_requests_dropped: int = 0

    @property
    def states(self) -> dict[str, int]:
        """Samples of every thread per state."""
        out = dict.fromkeys(STATES, 0)
        for _, _, state, count in self.rows:
            out[state] += count
        return out

    @property
    def in_flight(self) -> float:
        """Tasks in flight on average over its scans: (task-samples + unread) / scans; 0
        without a scan."""
        if not self.task_scans:
            return 0.0
        return (sum(row[2] for row in self.tasks) + self.task_unread) / self.task_scans

    def tasks_by_kind(self) -> dict[tuple[str, str], float]:
        """Tasks in flight per (state, ``request`` or ``background``); empty without a scan."""
        return in_flight(self.tasks, self.task_scans) if self.task_scans else {}


class Consumer(Protocol):
    """What takes windows: ``record``'s counts, ``top``'s rolling view, a serve session."""

    def add(self, window: Window) -> None:
        """Takes one more window, in time order."""


def window_of(native: NativeWindow) -> Window:
    """``native`` decoded: each row classified (once per unique stack), who held the GIL while
    a loop thread waited, its stalls, its task rows."""
    counts: dict[tuple[str, int, str], int] = {}
    names: dict[int, str] = {}
    for row in native["stacks"]:
        state = classify(row.stack, row.on_cpu, row.gil, row.cpu_wait)
        stack = f"{row.stack};{GC_FRAME}" if row.gc else row.stack
        at = (stack, row.thread_id, state)
        counts[at] = counts.get(at, 0) + row.count
        if row.thread_name:
            names[row.thread_id] = row.thread_name
    holders: dict[tuple[int, int, str], int] = {}
    for waiter, waiter_stack, holder, holder_stack, count in native["gil_holders"]:
        if is_loop_stack(waiter_stack):
            by = (waiter, holder, holder_site(holder_stack))
            holders[by] = holders.get(by, 0) + count
    stalls = sorted((stall_of(s, names) for s in native["stalls"]), key=lambda s: s.start)
    return Window(
        start=float(native["start"]),
        end=float(native["end"]),
        ticks=int(native["samples"]),
        rows=[(stack, tid, state, count) for (stack, tid, state), count in counts.items()],
        thread_names=names,
        gil_holders=[GilHolder(*at, count) for at, count in holders.items()],
        stalls=stalls,
        stalls_dropped=int(native["stalls_dropped"]),
        tasks=task_rows(native.get("tasks", [])),
        task_scans=int(native.get("task_scans", 0)),
        task_unread=int(native.get("task_unread", 0)),
        slow_requests=sorted(
            (slow_request_of(r) for r in native.get("slow_requests", [])), key=lambda r: r.start
        ),
        slow_requests_dropped=int(native.get("slow_requests_dropped", 0)),
    )
