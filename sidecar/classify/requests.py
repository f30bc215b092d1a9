"""Slow requests: each request the task scans saw in flight for at least a threshold (500 ms by
default, ``--slow-ms``), as the sampler followed it from scan to scan
(``sidecar._native.SlowRequest``), and where its time went.

A request is its framework's (aiohttp, Tornado) as the scans read it from memory: method, path
without the query, the route matched, its trace id and the header that carried it. Its start is
the framework's own (Tornado's, aiohttp's with its access log on) or, where the framework keeps
none, the first scan that saw it; its duration is known within a scan period either way: at
least ``duration_s`` (to the last scan that saw it), at most ``duration_max_s`` (to the first
that did not, and from the scan before the first that saw it when the start is the scans').

Where its time went is the split of its task-samples: by state (running, ready: queued behind
other work, waiting) and, of those waiting or ready, by await site (``rules.tasks.await_site``:
which call of the service it waited on). Decoded once per request, for ``record``, ``stats``
and ``serve`` alike.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sidecar.rules.tasks import NO_ROUTE, STATES, await_site, split_leaf

if TYPE_CHECKING:
    from sidecar._native import SlowRequest as NativeSlowRequest

#: Await sites kept per slow request.
SITES = 3


@dataclass(frozen=True)
class SlowRequest:
    """One request in flight for the threshold or longer."""

    #: unix seconds; ``start_from``: "framework" (its own clock) or "scans" (the first scan
    #: that saw it)
    start: float
    start_from: str
    #: seconds, at least and at most (within a scan period); ``ongoing``: still in flight
    #: when sampling ended
    duration_s: float
    duration_max_s: float
    ongoing: bool
    framework: str
    method: str
    path: str
    #: the pattern matched, or ``NO_ROUTE``
    route: str
    handler: str | None
    trace: str | None
    trace_header: str | None
    task: str
    scans: int
    #: its task-samples by folded task stack (route frame first), and those past the
    #: sampler's bound of stacks
    stacks: tuple[tuple[str, int], ...]
    other: int

    @property
    def task_samples(self) -> int:
        return sum(count for _, count in self.stacks) + self.other

    def shares(self) -> dict[str, float]:
        """The share of its task-samples in each state (running, ready, waiting)."""
        by_state: Counter[str] = Counter()
        for stack, count in self.stacks:
            by_state[split_leaf(stack)[1]] += count
        total = sum(by_state.values())
        return {state: round(by_state[state] / total, 4) if total else 0.0 for state in STATES}

    def await_sites(self, top: int = SITES) -> list[dict[str, Any]]:
        """Where it waited (ready or waiting), most task-samples first: the site, what it
        awaited, and the share of its task-samples there."""
        sites: Counter[tuple[str, str]] = Counter()
        total = 0
        for stack, count in self.stacks:
            body, state = split_leaf(stack)
            total += count
            if state != "running":
                sites[await_site(body)] += count
        ranked = sorted(sites.items(), key=lambda item: (-item[1], item[0]))[:top]
        return [
            {"site": site, "awaits": awaits, "share": round(n / total, 4)}
            for (site, awaits), n in ranked
        ]

    def as_json(self) -> dict[str, Any]:
        """Its row in ``stats --json``, ``GET /api/requests`` and the record summary."""
        return {
            "start": round(self.start, 6),
            "start_from": self.start_from,
            "duration_ms": round(1000 * self.duration_s, 1),
            "duration_max_ms": round(1000 * self.duration_max_s, 1),
            "ongoing": self.ongoing,
            "framework": self.framework,
            "method": self.method,
            "path": self.path,
            "route": self.route,
            "handler": self.handler,
            "trace": self.trace,
            "trace_header": self.trace_header,
            "task": self.task,
            "scans": self.scans,
            "task_samples": self.task_samples,
            "shares": self.shares(),
            "await_sites": self.await_sites(),
        }


def slow_request_of(native: NativeSlowRequest) -> SlowRequest:
    """``native`` decoded."""
    return SlowRequest(
        start=float(native["start"]),
        start_from=str(native["start_from"]),
        duration_s=float(native["duration"]),
        duration_max_s=float(native["duration_max"]),
        ongoing=bool(native["ongoing"]),
        framework=str(native["framework"]),
        method=str(native["method"]),
        path=str(native["path"]),
        route=native["route"] or NO_ROUTE,
        handler=native["handler"],
        trace=native["trace"],
        trace_header=native["trace_header"],
        task=str(native["task"]),
        scans=int(native["scans"]),
        stacks=tuple((str(stack), int(count)) for stack, count in native["stacks"]),
        other=int(native["other"]),
    )
