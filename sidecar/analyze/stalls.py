"""What a span's stalls of the event loop say: how many, the longest and what held it, the
median, and a table of the longest (``classify.stalls`` decodes each); and their lengths
bucketed as ``serve``'s ``/metrics`` exposes them. No I/O happens here.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import accumulate

from sidecar.classify.requests import SlowRequest
from sidecar.classify.stalls import Stall


def longest(stalls: Iterable[Stall], n: int) -> list[Stall]:
    return sorted(stalls, key=lambda s: s.duration_s, reverse=True)[:n]


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def _ms(threshold_ms: float) -> str:
    return f"{threshold_ms:g} ms"


def _where(stall: Stall) -> str:
    if stall.state == "gil" and stall.holder:
        where = f"GIL held by {stall.holder!r} at {stall.site}"
    elif stall.state == "cpu_wait":
        where = f"waiting for a CPU, at {stall.site}" if stall.site else "waiting for a CPU"
    else:
        where = f"at {stall.site}" if stall.site else ""
    if stall.tied:
        where += f" ({' and '.join(stall.tied)} as many samples)"
    return where.strip()


def summary_line(stalls: Sequence[Stall], threshold_ms: float, dropped: int = 0) -> str:
    """``stalls ≥ 100 ms: 6 · longest 0.41 s blocked at resize_image (app.py:12) · p50 0.25
    s``; or that there were none."""
    head = f"stalls ≥ {_ms(threshold_ms)}"
    if not stalls:
        return f"{head}: none"
    total = len(stalls) + dropped
    top = longest(stalls, 1)[0]
    durations = [s.duration_s for s in stalls]
    parts = [
        f"{head}: {total:,}",
        f"longest {top.duration_s:.2f} s {top.state} {_where(top)}".rstrip(),
        f"p50 {percentile(durations, 50):.2f} s",
    ]
    if dropped:
        parts.append(f"{dropped:,} not kept (past 100 a window, the shortest)")
    return " · ".join(parts)


def stalls_during(request: SlowRequest, stalls: Iterable[Stall]) -> list[Stall]:
    """The stalls that overlap a request's time in flight, from its start to the upper bound
    of its duration: the stalls it sat through."""
    end = request.start + request.duration_max_s
    return [s for s in stalls if s.start < end and request.start < s.start + s.duration_s]


def requests_during(stall: Stall, requests: Iterable[SlowRequest]) -> list[SlowRequest]:
    """The slow requests in flight during a stall (``stalls_during``'s other side): those it
    delayed."""
    return [request for request in requests if stalls_during(request, (stall,))]


def _delayed(requests: Sequence[SlowRequest]) -> str:
    """The slow requests a stall delayed, by route: ``GET /items/{item} ×2, POST /pay``."""
    routes = Counter(f"{r.method} {r.route}" for r in requests)
    named = ", ".join(f"{route} ×{n}" if n > 1 else route for route, n in routes.most_common(3))
    more = f" and {len(routes) - 3:,} more routes" if len(routes) > 3 else ""
    return f"delayed {len(requests):,} slow request{'s' * (len(requests) != 1)}: {named}{more}"


def stall_rows(
    stalls: Sequence[Stall],
    top: int,
    period_s: float,
    requests: Sequence[SlowRequest] | None = None,
) -> list[str]:
    """The longest stalls as a table, and the lengths' resolution; with the slow requests of
    the span (task scans), the ones each stall delayed."""
    if not stalls:
        return []
    lines = [
        "",
        f"longest stalls (lengths within {1000 * period_s:g} ms, the sampling period, at "
        "either end)",
    ]
    shown = longest(stalls, top)
    for stall in shown:
        when = time.strftime("%H:%M:%S", time.localtime(stall.start))
        when += f".{int(stall.start * 1000) % 1000:03d}"
        length = f"{stall.duration_s:5.2f} s{'+' if stall.ongoing else ' '}"
        lines.append(f"{length} {when}  {stall.state:<8}  {_where(stall)}")
        task = ""
        if stall.task is not None:
            task = f" · task {stall.task!r}{' (a request)' if stall.request else ''}"
        lines.append(f"{'':>9}in {stall.callback} ({stall.thread}){task}")
        if stall.throttling is not None and (
            stall.throttling.throttled_periods or stall.state == "cpu_wait"
        ):
            lines.append(f"{'':>9}{stall.throttling.line()}")
        if requests is not None and (delayed := requests_during(stall, requests)):
            lines.append(f"{'':>9}{_delayed(delayed)}")
    if any(s.ongoing for s in shown):  # the legend of a mark in the table, when one is there
        lines.append("+ still stalled when sampling ended")
    return lines


#: The upper bounds of ``sidecar_loop_stall_seconds``'s buckets (and +Inf).
STALL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class StallHistogram:
    """The lengths of one process's stalls, bucketed as ``sidecar_loop_stall_seconds``."""

    def __init__(self) -> None:
        #: stalls per bucket (not cumulative), the last one +Inf
        self.buckets = [0] * (len(STALL_BUCKETS) + 1)
        self.sum = 0.0

    def add(self, lengths: list[float], dropped: int = 0) -> None:
        """Stalls of ``lengths`` seconds, and ``dropped`` more that a window did not keep (the
        shortest of it): each counted at the shortest length kept, an upper bound of its own."""
        for length in lengths:
            self.buckets[bisect_left(STALL_BUCKETS, length)] += 1
            self.sum += length
        if dropped and lengths:
            shortest = min(lengths)
            self.buckets[bisect_left(STALL_BUCKETS, shortest)] += dropped
            self.sum += shortest * dropped

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def exposed(self) -> list[tuple[str, float]]:
        """Cumulative (upper bound, count) pairs, +Inf last, as Prometheus exposes them."""
        bounds = [f"{bound:g}" for bound in STALL_BUCKETS] + ["+Inf"]
        return list(zip(bounds, accumulate(self.buckets), strict=True))
