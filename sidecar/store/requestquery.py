"""Reading the slow requests from the store (``slow_requests``: one row per request, with the
window it ended in), and those past the sampler's bound that no row keeps
(``windows.slow_requests_dropped``).

A range holds the slow requests that overlap it: one that began before the range and was still
in flight in it is in. They can be asked for by route (``METHOD ROUTE`` or the route alone), by
trace id, and by their shortest duration.
"""

from __future__ import annotations

import json
from typing import Any

from sidecar.classify.requests import SlowRequest
from sidecar.store.query import MAX_LISTED, Range, Reader

#: The most slow requests one answer lists (``limit``'s bound).
MAX_REQUESTS = MAX_LISTED
#: The most stacks a stored request's JSON is read with, and the longest JSON read.
MAX_STACKS = 64
MAX_STACKS_TEXT = 1 << 20
_COLUMNS = (
    "r.start, r.start_from, r.duration, r.duration_max, r.ongoing, r.framework, r.method, "
    "r.path, r.route, r.handler, r.trace, r.trace_header, r.task, r.scans, r.stacks, r.other, "
    "r.target_id, p.pid"
)


def _stacks(text: str) -> tuple[tuple[str, int], ...]:
    """A stored request's stacks (its own JSON, read defensively all the same)."""
    if len(text) > MAX_STACKS_TEXT:
        return ()
    try:
        pairs = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(pairs, list):
        return ()
    out = []
    for pair in pairs[:MAX_STACKS]:
        if (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], int)
            and pair[1] > 0
        ):
            out.append((pair[0], pair[1]))
    return tuple(out)


def _request(row: tuple[Any, ...]) -> SlowRequest:
    (start, start_from, duration, duration_max, ongoing, framework, method, path, route,
     handler, trace, trace_header, task, scans, stacks, other) = row[:-2]  # fmt: skip
    return SlowRequest(
        start=float(start),
        start_from=str(start_from),
        duration_s=float(duration),
        duration_max_s=float(duration_max),
        ongoing=bool(ongoing),
        framework=str(framework),
        method=str(method),
        path=str(path),
        route=str(route),
        handler=handler,
        trace=trace,
        trace_header=trace_header,
        task=str(task),
        scans=int(scans),
        stacks=_stacks(str(stacks)),
        other=int(other),
    )


class RequestReader:
    """The slow requests' side of a ``Reader``: same database, same connections."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def requests(
        self,
        target: int | None,
        span: Range,
        *,
        route: str | None = None,
        trace: str | None = None,
        min_ms: float = 0.0,
        limit: int = 100,
        longest: bool = False,
    ) -> tuple[list[tuple[int, int, SlowRequest]], int]:
        """The slow requests of one target (or all) overlapping ``span``, of ``route`` (``GET
        /items/{id}`` or ``/items/{id}``) and ``trace`` when given, at least ``min_ms`` long,
        at most ``limit``: the oldest, oldest first, or with ``longest`` the longest first;
        each with its target and PID. And how many matched in all."""
        where = "r.start < ? AND r.start + r.duration_max >= ? AND r.duration >= ?"
        params: tuple[Any, ...] = (span.end, span.start, min_ms / 1000)
        if target is not None:
            self.reader.target(target)  # an unknown target is an error, not "none slow"
            where += " AND r.target_id = ?"
            params += (target,)
        if route is not None:
            method, _, pattern = route.partition(" ")
            if pattern and method.isupper():
                where += " AND r.method = ? AND r.route = ?"
                params += (method, pattern)
            else:
                where += " AND r.route = ?"
                params += (route,)
        if trace is not None:
            where += " AND r.trace = ?"
            params += (trace,)
        base = f"FROM slow_requests r JOIN processes p ON p.id = r.process_id WHERE {where}"
        order = "r.duration DESC, r.start" if longest else "r.start"
        rows, total = self.reader.listed(_COLUMNS, base, params, order, limit)
        return [(int(row[-2]), int(row[-1]), _request(row)) for row in rows], total

    def dropped(self, target: int | None, span: Range) -> int:
        """Slow requests of the range's windows past the sampler's bound (100 a window)."""
        return self.reader.window_sum("slow_requests_dropped", target, span)
