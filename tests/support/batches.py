"""Windows as serve's sessions hand them to the store and the pusher, built from rows: the
store's and the push's tests give their data as a window's rows, not as a sampler's window."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sidecar.classify.requests import SlowRequest
from sidecar.classify.stalls import Stall
from sidecar.classify.threads import GilHolder
from sidecar.classify.window import TaskRow, ThreadRow, Window
from sidecar.sample.messages import HolderRow, ProcessKey, WindowBatch


def window_batch(
    process: ProcessKey,
    start: int,
    width: int,
    ticks: int,
    rows: Iterable[ThreadRow],
    thread_names: Mapping[int, str] | None = None,
    *,
    tasks: Iterable[TaskRow] = (),
    task_scans: int = 0,
    task_unread: int = 0,
    gil_holders: Iterable[HolderRow] = (),
    stalls: Iterable[Stall] = (),
    stalls_dropped: int = 0,
    slow_requests: Iterable[SlowRequest] = (),
    slow_requests_dropped: int = 0,
) -> WindowBatch:
    """The window of ``width`` seconds at ``start`` with these rows; each GIL holding
    (waiter, holder, holder's name, site, samples) names its holder as the window's threads."""
    names = dict(thread_names or {})
    held: list[GilHolder] = []
    for waiter, holder, name, site, samples in gil_holders:
        if name:
            names.setdefault(holder, name)
        held.append(GilHolder(waiter, holder, site, samples))
    window = Window(
        start=float(start),
        end=float(start + width),
        ticks=ticks,
        rows=list(rows),
        thread_names=names,
        gil_holders=held,
        stalls=list(stalls),
        stalls_dropped=stalls_dropped,
        tasks=list(tasks),
        task_scans=task_scans,
        task_unread=task_unread,
        slow_requests=list(slow_requests),
        slow_requests_dropped=slow_requests_dropped,
    )
    return WindowBatch(process, width, window)
