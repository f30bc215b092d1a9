"""The tasks block of the stats: asyncio tasks in flight, their states, and where requests wait.

From a task profile (folded task stacks with a ``[running]``, ``[ready]`` or ``[waiting]``
leaf, counted in task-samples) and the scans that counted them, the same for ``sidecar stats
--tasks`` (a live recording) and ``GET /api/stats`` (the store):

- tasks in flight: task-samples / scans, pooled over the range (``mean``), and the highest
  mean of one window (``max``: a stored window for the API, a sampler's window for the CLI);
  split by state and into requests' tasks (``sidecar.rules.tasks.is_request``) and background ones;
  the tasks the scans found past their bound and did not read (``unread``) count in ``mean``
  and ``max``, in no state and neither requests' nor background; ``sampled`` is the share of
  the tasks in flight that were read (1 when every task was), which the profile is made of;
- the shares of task-samples running, ready (due to run, queued behind other work: the loop's
  scheduling delay) and waiting;
- the share of their time requests' tasks sat ready;
- the top await sites of requests' tasks: where in the service's code they wait (the innermost
  frame of the application or the framework, not of the event loop or the standard library),
  with what that frame awaits (the frame just above the leaf);
- per route (``METHOD ROUTE``, from the route frame the scan puts first in a request's task
  stacks, ``sidecar.rules.tasks.route_of``): its share of requests' task-samples, the shares of
  its own running, ready (queued behind other work) and waiting, and its top await sites. The
  routes past ``ROUTES`` are pooled in one ``OTHER_ROUTES`` row.

No I/O happens here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from sidecar.classify.tasks import InFlight
from sidecar.rules.tasks import STATES, await_site, is_request, route_of, split_leaf

#: Routes in the tasks block at most (by task-samples); the rest pooled in one row.
ROUTES = 20
OTHER_ROUTES = "(other routes)"
#: Await sites shown per route.
ROUTE_SITES = 3


def task_block(stacks: Mapping[str, int], flight: InFlight, top: int = 10) -> dict[str, Any]:
    """The ``tasks`` block of a target in ``stats --json`` and ``GET /api/stats``."""
    states: Counter[str] = Counter()
    request_states: Counter[str] = Counter()
    sites: Counter[tuple[str, str]] = Counter()
    routes: dict[str, tuple[Counter[str], Counter[tuple[str, str]]]] = {}
    for stack, count in stacks.items():
        body, state = split_leaf(stack)
        states[state] += count
        if is_request(body):
            request_states[state] += count
            site = await_site(body)
            sites[site] += count
            route = route_of(body)
            if route is not None:
                by_state, by_site = routes.setdefault(route, (Counter(), Counter()))
                by_state[state] += count
                by_site[site] += count
    total, requests = sum(states.values()), sum(request_states.values())
    ranked = sorted(sites.items(), key=lambda item: (-item[1], item[0]))[:top]
    return {
        "scans": flight.scans,
        "task_samples": total,
        "in_flight": {
            "mean": round(flight.mean, 3),
            "max": round(flight.max, 3),
            **{state: round(flight.states[state], 3) for state in STATES},
            "requests": round(flight.requests, 3),
            "background": round(flight.background, 3),
            "unread": round(flight.unread, 3),
        },
        "sampled": round(flight.sampled, 4),
        "shares": {state: _share(states[state], total) for state in STATES},
        "requests": {
            "task_samples": requests,
            "ready_share": _share(request_states["ready"], requests),
        },
        "await_sites": [
            {
                "site": site,
                "awaits": awaits,
                "task_samples": count,
                "share": _share(count, requests),
            }
            for (site, awaits), count in ranked
        ],
        "routes": _routes(routes, requests),
    }


def _routes(
    routes: Mapping[str, tuple[Counter[str], Counter[tuple[str, str]]]], requests: int
) -> list[dict[str, Any]]:
    """The ``routes`` of a tasks block: where each route's requests spent their time."""
    ranked = sorted(routes.items(), key=lambda item: (-sum(item[1][0].values()), item[0]))
    if len(ranked) > ROUTES:
        pooled: tuple[Counter[str], Counter[tuple[str, str]]] = (Counter(), Counter())
        for _, (by_state, by_site) in ranked[ROUTES - 1 :]:
            pooled[0].update(by_state)
            pooled[1].update(by_site)
        ranked = [*ranked[: ROUTES - 1], (OTHER_ROUTES, pooled)]
    rows = []
    for route, (by_state, by_site) in ranked:
        total = sum(by_state.values())
        top = sorted(by_site.items(), key=lambda item: (-item[1], item[0]))[:ROUTE_SITES]
        rows.append({
            "route": route,
            "task_samples": total,
            "share": _share(total, requests),
            "shares": {state: _share(by_state[state], total) for state in STATES},
            "await_sites": [
                {"site": site, "awaits": awaits, "task_samples": n, "share": _share(n, total)}
                for (site, awaits), n in top
            ],
        })  # fmt: skip
    return rows


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def task_lines(block: Mapping[str, Any]) -> list[str]:
    """The readable form of a tasks block, as ``sidecar stats`` prints it."""
    flight, shares = block["in_flight"], block["shares"]
    lines = [
        "",
        f"asyncio tasks: {flight['mean']:.1f} in flight (max {flight['max']:.1f}) · "
        f"requests {flight['requests']:.1f} · background {flight['background']:.1f}",
        "  "
        + " · ".join(f"{state} {_pct(shares[state])}" for state in STATES)
        + f" of {block['task_samples']:,} task-samples in {block['scans']:,} scans",
    ]
    if flight["unread"]:
        lines.append(
            f"  {flight['unread']:.1f} of them past a scan's bound, not read: the task profile "
            f"is a sample, {_pct(block['sampled'])} of the tasks in flight"
        )
    requests = block["requests"]
    if not requests["task_samples"]:
        lines.append("  no request task seen (aiohttp's or Tornado's request handlers)")
        return lines
    lines.append(f"  requests sat ready (queued behind other work) {_pct(requests['ready_share'])}")
    sites = block["await_sites"]
    names = [
        f"{s['site']} → {s['awaits']}" if s["site"] != s["awaits"] else s["site"] for s in sites
    ]
    width = max(len(name) for name in names)
    lines += ["", f"{'top await sites of requests':<{width}}  of requests' task-samples"]
    lines += [
        f"{name:<{width}}  {100 * s['share']:5.1f}%  ({s['task_samples']:,})"
        for name, s in zip(names, sites, strict=True)
    ]
    return lines + route_lines(block["routes"])


def route_lines(routes: list[dict[str, Any]]) -> list[str]:
    """Where each route's requests spent their time, as ``sidecar stats`` prints it."""
    if not routes:
        return []
    width = max(len("requests by route"), *(len(r["route"]) for r in routes))
    lines = [
        "",
        f"{'requests by route':<{width}}  {'of requests':>11}  "
        + "  ".join(f"{state:>7}" for state in STATES)
        + "  top await site",
    ]
    for r in routes:
        site = r["await_sites"][0] if r["await_sites"] else None
        where = f"{site['site']} {_pct(site['share'])}" if site else ""
        lines.append(
            f"{r['route']:<{width}}  {_pct(r['share']):>11}  "
            + "  ".join(f"{_pct(r['shares'][state]):>7}" for state in STATES)
            + f"  {where}"
        )
    return lines
