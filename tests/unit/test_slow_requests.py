"""Slow requests as the summary and the tasks block say them: the split of a request's
task-samples by state and await site, the summary line, the table and the block per route."""

from __future__ import annotations

from dataclasses import replace

import jsonschema

from sidecar.analyze.requests import (
    OTHER_ROUTES,
    RouteSeries,
    request_rows,
    requests_block,
    summary_line,
)
from sidecar.classify.requests import SlowRequest
from sidecar.classify.window import Window
from tests.support.stats_schema import SLOW_REQUESTS

ROOT = "RequestHandler._execute (tornado/web.py:1990)"
WAIT = f"[GET /items/([^/]+)];{ROOT};ItemHandler.get (app.py:12);sleep (asyncio/tasks.py:649)"


def slow(
    duration: float, path: str, ongoing: bool = False, trace: str | None = None
) -> SlowRequest:
    return SlowRequest(
        start=1_700_000_000.25,
        start_from="framework",
        duration_s=duration,
        duration_max_s=duration + 0.1,
        ongoing=ongoing,
        framework="tornado",
        method="GET",
        path=path,
        route="/items/([^/]+)",
        handler="ItemHandler",
        trace=trace,
        trace_header="traceparent" if trace else None,
        task="Task-9",
        scans=10,
        stacks=(
            (f"{WAIT};[waiting]", 6),
            (f"{WAIT};[ready]", 2),
            (f"[GET /items/([^/]+)];{ROOT};ItemHandler.get (app.py:13);[running]", 2),
        ),
        other=0,
    )


def test_a_slow_request_splits_its_time_by_state_and_await_site() -> None:
    request = slow(1.2, "/items/7")
    assert request.shares() == {"running": 0.2, "ready": 0.2, "waiting": 0.6}
    # ready and waiting at the same site: 80% of its task-samples there
    assert request.await_sites() == [
        {
            "site": "ItemHandler.get (app.py:12)",
            "awaits": "sleep (asyncio/tasks.py:649)",
            "share": 0.8,
        }
    ]


def test_the_summary_says_how_many_the_longest_and_marks_the_ongoing() -> None:
    requests = [slow(0.6, "/items/1"), slow(1.25, "/items/2", ongoing=True, trace="ab" * 16)]
    line = summary_line(requests, 500, dropped=2)
    assert line.startswith("slow requests ≥ 500 ms: 4 · longest 1.25 s GET /items/([^/]+)"), line
    assert "2 not kept" in line
    assert summary_line([], 500) == "slow requests ≥ 500 ms: none"
    rows = request_rows(requests, 5, 0.1)
    assert rows[2].startswith(" 1.25 s+ ") and f"trace {'ab' * 16}" in rows[2], rows
    assert rows[3].strip() == (
        "60% waiting, most at ItemHandler.get (app.py:12) · 20% ready (queued behind other "
        "work) · 20% running"
    )
    assert rows[4].startswith(" 0.60 s  "), rows


def test_the_block_counts_per_route_and_lists_the_longest_first() -> None:
    block = requests_block([slow(0.6, "/items/1"), slow(0.9, "/items/2")], 500)
    jsonschema.validate(block, SLOW_REQUESTS)
    assert block["routes"] == [
        {
            "method": "GET",
            "route": "/items/([^/]+)",
            "count": 2,
            "longest_ms": 900.0,
            "p50_ms": 600.0,
        }
    ]
    assert [r["path"] for r in block["requests"]] == ["/items/2", "/items/1"]
    assert block["requests"][0]["duration_max_ms"] == 1000.0


def test_metrics_label_50_routes_a_process_and_pool_the_rest() -> None:
    series = RouteSeries()
    requests = [replace(slow(0.6, f"/u/{n}"), route=f"/u/{n}") for n in range(60)]
    tasks = [(f"[GET /u/{n}];{ROOT}", "waiting", 4) for n in range(60)]
    window = Window(start=0.0, end=1.0, ticks=10, rows=[], tasks=tasks, task_scans=2)
    series.add(replace(window, slow_requests=requests))
    assert len(series.slow) == 51 and series.slow[OTHER_ROUTES] == 10, series.slow
    assert series.slow["GET /u/0"] == 1
    assert series.in_flight[("GET /u/3", "waiting")] == 2.0
    assert series.in_flight[(OTHER_ROUTES, "waiting")] == 20.0
