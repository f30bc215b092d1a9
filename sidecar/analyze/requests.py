"""What a span's slow requests say: how many, the longest and where their time went, per route,
and a table of the longest (``classify.requests`` decodes each); and the per-route figures
``serve``'s ``/metrics`` exposes (``RouteSeries``). No I/O happens here.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sidecar.analyze.stalls import percentile, stalls_during
from sidecar.classify.requests import SlowRequest
from sidecar.rules.tasks import route_of

if TYPE_CHECKING:
    from sidecar.classify.stalls import Stall
    from sidecar.classify.window import Window

#: Slow requests a block lists at most (the longest), and routes it sums up.
LISTED = 20
ROUTES = 20


def longest(requests: Sequence[SlowRequest], n: int) -> list[SlowRequest]:
    return sorted(requests, key=lambda r: (-r.duration_s, r.start))[:n]


def _split(request: SlowRequest) -> str:
    """``61% waiting at fetch (app.py:12) · 22% ready · 9% running``."""
    shares = request.shares()
    parts = []
    sites = request.await_sites(1)
    if shares["waiting"] and sites:
        parts.append(f"{shares['waiting']:.0%} waiting, most at {sites[0]['site']}")
    elif shares["waiting"]:
        parts.append(f"{shares['waiting']:.0%} waiting")
    for state, said in (("ready", "ready (queued behind other work)"), ("running", "running")):
        if shares[state]:
            parts.append(f"{shares[state]:.0%} {said}")
    return " · ".join(parts)


def summary_line(
    requests: Sequence[SlowRequest], threshold_ms: float, dropped: int = 0, untracked: int = 0
) -> str:
    """``slow requests ≥ 500 ms: 4 · longest 1.20 s GET /items/{item} · p50 0.81 s``; or
    that there were none."""
    head = f"slow requests ≥ {threshold_ms:g} ms"
    if not requests:
        line = f"{head}: none"
    else:
        top = longest(requests, 1)[0]
        durations = [r.duration_s for r in requests]
        parts = [
            f"{head}: {len(requests) + dropped:,}",
            f"longest {top.duration_s:.2f} s {top.method} {top.route}",
            f"p50 {percentile(durations, 50):.2f} s",
        ]
        if dropped:
            parts.append(f"{dropped:,} not kept (past 100 a window, the shortest)")
        line = " · ".join(parts)
    if untracked:
        line += f" · {untracked:,} requests not followed (past 10,000 in flight at once)"
    return line


def request_rows(
    requests: Sequence[SlowRequest],
    top: int,
    period_s: float,
    stalls: Sequence[Stall] | None = None,
) -> list[str]:
    """The longest slow requests as a table: duration, start, method, path and route, trace
    id, and where the time went; and the durations' resolution. With the stalls of the span,
    those each request sat through."""
    if not requests:
        return []
    lines = [
        "",
        f"slowest requests (durations within {1000 * period_s:g} ms, the task scans' period; "
        "+ still in flight when sampling ended; ~ started at the first scan that saw it)",
    ]
    for request in longest(requests, top):
        when = time.strftime("%H:%M:%S", time.localtime(request.start))
        when += f".{int(request.start * 1000) % 1000:03d}"
        mark = "+" if request.ongoing else ("~" if request.start_from == "scans" else " ")
        route = f" · route {request.route}" if request.route != request.path else ""
        trace = f" · trace {request.trace}" if request.trace else ""
        lines.append(
            f"{request.duration_s:5.2f} s{mark} {when}  {request.method} {request.path}"
            f"{route}{trace}"
        )
        if split := _split(request):
            lines.append(f"{'':>9}{split}")
        if stalls is not None and (sat := stalls_during(request, stalls)):
            worst = max(sat, key=lambda stall: stall.duration_s)
            site = f" at {worst.site}" if worst.site else ""
            lines.append(
                f"{'':>9}sat through {len(sat):,} stall{'s' * (len(sat) != 1)} of the loop, "
                f"{sum(stall.duration_s for stall in sat):.2f} s: the longest "
                f"{worst.duration_s:.2f} s {worst.state}{site}"
            )
    return lines


def requests_block(
    requests: Sequence[SlowRequest],
    threshold_ms: float,
    dropped: int = 0,
    untracked: int = 0,
    total: int | None = None,
) -> dict[str, Any]:
    """The ``slow_requests`` of a tasks block: the threshold, how many (``total`` when only
    some of them are given: the store's longest), per route (count, longest, p50), and the
    longest listed (``SlowRequest.as_json``)."""
    by_route: dict[tuple[str, str], list[float]] = {}
    for request in requests:
        by_route.setdefault((request.method, request.route), []).append(request.duration_s)
    ranked = sorted(by_route.items(), key=lambda item: (-len(item[1]), -max(item[1]), item[0]))
    return {
        "threshold_ms": threshold_ms,
        "count": (len(requests) if total is None else total) + dropped,
        "dropped": dropped,
        "untracked": untracked,
        "routes": [
            {
                "method": method,
                "route": route,
                "count": len(durations),
                "longest_ms": round(1000 * max(durations), 1),
                "p50_ms": round(1000 * percentile(durations, 50), 1),
            }
            for (method, route), durations in ranked[:ROUTES]
        ],
        "requests": [request.as_json() for request in longest(requests, LISTED)],
    }


#: The routes of one process /metrics labels at most (the first seen); the others count as
#: ``OTHER_ROUTES``, so a service with a route per user cannot grow the series without bound.
METRIC_ROUTES = 50
OTHER_ROUTES = "(other routes)"


class RouteSeries:
    """One process's per-route figures for ``/metrics``: the requests in flight per route and
    state in its last window with task scans, and its slow requests per route so far."""

    def __init__(self, bound: int = METRIC_ROUTES) -> None:
        self.bound = bound
        #: the routes labelled so far (``METHOD ROUTE``), in the order first seen
        self.known: dict[str, None] = {}
        #: requests in flight per (route, state), the mean over the last window's scans
        self.in_flight: dict[tuple[str, str], float] = {}
        #: slow requests per route since sampling began
        self.slow: Counter[str] = Counter()

    def label(self, route: str) -> str:
        """``route`` as a label: itself while the bound allows, else ``OTHER_ROUTES``."""
        if route not in self.known and len(self.known) < self.bound:
            self.known[route] = None
        return route if route in self.known else OTHER_ROUTES

    def add(self, window: Window) -> None:
        for request in window.slow_requests:
            self.slow[self.label(f"{request.method} {request.route}")] += 1
        if not window.task_scans:
            return
        counts: Counter[tuple[str, str]] = Counter()
        for stack, state, count in window.tasks:
            route = route_of(stack)
            if route is not None:
                counts[self.label(route), state] += count
        self.in_flight = {at: n / window.task_scans for at, n in counts.items()}
