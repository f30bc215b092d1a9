"""The tasks block's routes, from task stacks as the native scan writes them: a request's stack
begins with its route frame (``[METHOD ROUTE]``), which ``route_of`` reads; each route's row
has its share of requests' task-samples, its own states' shares and its top await sites, and
the routes past the block's bound are pooled in one row."""

from __future__ import annotations

from sidecar.analyze.tasks import OTHER_ROUTES, ROUTES, route_lines, task_block
from sidecar.classify.tasks import InFlight
from sidecar.rules.tasks import NO_ROUTE, route_of

ROOT = "RequestHandler.start (aiohttp/web_protocol.py:686);RequestHandler._handle_request (aiohttp/web_protocol.py:577)"  # noqa: E501
SLEEP = "sleep (asyncio/tasks.py:649)"


def request(route: str, handler: str, state: str) -> str:
    return f"[{route}];{ROOT};{handler} (app/views.py:3);{SLEEP};[{state}]"


def test_the_route_frame_is_read_from_a_requests_stack_only() -> None:
    assert route_of(request("GET /users/{id}", "user", "waiting")) == "GET /users/{id}"
    assert route_of(f"[POST {NO_ROUTE}];{ROOT};[running]") == f"POST {NO_ROUTE}"
    assert route_of(f"{ROOT};[waiting]") is None  # written before requests were read
    assert route_of("[idle]") is None and route_of("main (m.py:1);[waiting]") is None


def test_each_route_has_its_own_states_and_await_sites() -> None:
    stacks = {
        request("GET /users/{id}", "user", "waiting"): 60,
        request("GET /users/{id}", "user", "ready"): 20,
        request("POST /orders", "order", "waiting"): 15,
        request("POST /orders", "order", "running"): 5,
        "housekeeping (app/jobs.py:9);" + SLEEP + ";[waiting]": 50,  # background: no route
    }
    block = task_block(stacks, InFlight.of(stacks, scans=10, peak=15.0))
    users, orders = block["routes"]
    assert (users["route"], users["task_samples"], users["share"]) == ("GET /users/{id}", 80, 0.8)
    assert users["shares"] == {"running": 0.0, "ready": 0.25, "waiting": 0.75}
    assert [s["site"] for s in users["await_sites"]] == ["user (app/views.py:3)"]
    assert (orders["route"], orders["share"], orders["shares"]["running"]) == (
        "POST /orders",
        0.2,
        0.25,
    )
    lines = route_lines(block["routes"])
    assert lines[1].split() == [
        "requests",
        "by",
        "route",
        "of",
        "requests",
        "running",
        "ready",
        "waiting",
        "top",
        "await",
        "site",
    ]
    assert lines[2].split()[:6] == ["GET", "/users/{id}", "80.0%", "0.0%", "25.0%", "75.0%"]


def test_routes_past_the_bound_are_pooled_in_one_row() -> None:
    stacks = {request(f"GET /r{i:02}", f"h{i}", "waiting"): 100 - i for i in range(ROUTES + 5)}
    block = task_block(stacks, InFlight.of(stacks, scans=1, peak=1.0))
    rows = block["routes"]
    assert len(rows) == ROUTES and rows[-1]["route"] == OTHER_ROUTES
    assert [r["route"] for r in rows[:3]] == ["GET /r00", "GET /r01", "GET /r02"]
    assert sum(r["task_samples"] for r in rows) == sum(stacks.values())
    pooled = sum(100 - i for i in range(ROUTES - 1, ROUTES + 5))
    assert rows[-1]["task_samples"] == pooled
