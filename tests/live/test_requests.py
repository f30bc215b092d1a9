"""Each request in flight, read from outside: real aiohttp and Tornado services (the demo
ones, on asyncio and on uvloop, under CPython 3.11 to 3.15) serve requests to a route with a
parameter (``/items/ITEM``) that sleep while a scan reads their tasks. Every request's task
says its method, its path without the query string, the route the framework matched, its
trace id from whichever header carried one, and when it started where the framework keeps
that; nothing of the query string is read.

The requests come from this process, each in a thread of its own that ends with its
response (``ms`` bounds the sleep); the scan is taken while all of them are in flight.

Over a span (``stats --pid --tasks``), each request's task-samples carry its route (the route
frame first in its stacks), and the tasks block says where each route's requests spent their
time: under load of two routes, each route's row holds its own handler's await site.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from sidecar import _native
from sidecar.sample.tasks import snapshot
from tests.support.helpers import LoadDriver, Proc, Spawner, sidecar
from tests.support.procs import PYTHON
from tests.support.pythons import frameworks_site, interpreter
from tests.support.stats_schema import SCHEMA

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
#: (item, the trace header sent, its value, the trace id it must give)
REQUESTS = (
    ("7", "traceparent", f"00-{TRACE}-00f067aa0ba902b7-01", TRACE),
    ("alpha", "X-Request-Id", "req-42/a", "req-42/a"),
    ("beta", "b3", "80f198ee56343ba8-e457b5a2e4d86bd1-1", "80f198ee56343ba8"),
)
HEADER_OF = {"traceparent": "traceparent", "X-Request-Id": "x-request-id", "b3": "b3"}
SECRET = "s3cretQueryValue"
#: How long each request sleeps in its handler (ms): long enough for a few scans.
SLEEP_MS = 2500
ROUTES = {"aiohttp": ("/items/{item}", None), "tornado": ("/items/([^/]+)", "ItemHandler")}
MODULES = {"aiohttp": "aiohttp_app", "tornado": "tornado_app"}
VERSIONS = ("3.11", "3.12", "3.13", "3.14", "3.15")
#: (framework, loop, version, whether aiohttp's access log is on): asyncio under every version
#: (aiohttp with its access log, so it keeps each request's start), uvloop under the first and
#: the last (aiohttp without it).
VARIANTS = [
    *[(app, "asyncio", v, app == "aiohttp") for app in MODULES for v in VERSIONS],
    *[(app, "uvloop", v, False) for app in MODULES for v in ("3.11", "3.15")],
]


def start(spawn: Spawner, app: str, loop: str, version: str, access_log: bool) -> Proc:
    args = [*(["--uvloop"] if loop == "uvloop" else []), *(["--access-log"] if access_log else [])]
    if version == "3.11":
        return spawn.target(MODULES[app], *args, python=PYTHON)
    python = interpreter(version)
    return spawn.target(MODULES[app], *args, python=python, path=frameworks_site(version))


def send(port: int, item: str, header: str, value: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=SLEEP_MS / 1000 + 20)
    try:
        conn.request("GET", f"/items/{item}?ms={SLEEP_MS}&token={SECRET}", headers={header: value})
        conn.getresponse().read()
    finally:
        conn.close()


@pytest.fixture
def in_flight(spawn: Spawner, request: pytest.FixtureRequest) -> Iterator[tuple[Proc, float]]:
    """The service of the variant with the requests in flight, and when they were sent (unix
    seconds, just before)."""
    service = start(spawn, *request.param)
    assert service.port is not None
    sent = time.time()
    threads = [
        threading.Thread(target=send, args=(service.port, item, header, value), daemon=True)
        for item, header, value, _ in REQUESTS
    ]
    for thread in threads:
        thread.start()
    yield service, sent
    for thread in threads:
        thread.join(SLEEP_MS / 1000 + 25)


def requests_of(pid: int) -> tuple[list[_native.RequestRow], _native.TaskScan, float]:
    """The requests of the first scan that finds them all in flight (within a second of
    scans), that scan, and when it was read (unix seconds, just after)."""
    deadline = time.monotonic() + SLEEP_MS / 1000 - 0.5
    while True:
        scan = snapshot(pid)
        found = [t["request"] for t in scan["tasks"] if t["request"] is not None]
        if len(found) == len(REQUESTS) or time.monotonic() > deadline:
            return found, scan, time.time()
        time.sleep(0.05)


@pytest.mark.parametrize(
    "in_flight", VARIANTS, indirect=True, ids=["-".join(map(str, v)) for v in VARIANTS]
)
def test_each_request_in_flight_says_its_route_trace_and_start(
    in_flight: tuple[Proc, float],
) -> None:
    service, sent = in_flight
    found, scan, read_at = requests_of(service.pid)
    assert len(found) == len(REQUESTS), (scan["requests_torn"], found)
    framework = found[0]["framework"]
    route, handler = ROUTES[framework]
    by_path = {r["path"]: r for r in found}
    assert sorted(by_path) == sorted(f"/items/{item}" for item, *_ in REQUESTS), by_path
    for item, header, _, trace in REQUESTS:
        got = by_path[f"/items/{item}"]
        assert (got["method"], got["route"], got["handler"]) == ("GET", route, handler), got
        assert (got["trace"], got["trace_header"]) == (trace, HEADER_OF[header]), got
        if got["started"] is None:
            assert framework == "aiohttp" and got["started_clock"] is None, got
            continue
        # started between the sending and the scan: the margin is the clocks' resolution
        # (uvloop's loop.time() counts milliseconds) and the conversion of the loop's clock
        assert sent - 0.05 <= got["started"] <= read_at + 0.05, (sent, got, read_at)
        assert got["age_s"] is not None and 0 <= got["age_s"] <= read_at - sent + 0.05, got
    clocks = {r["started_clock"] for r in found}
    assert clocks == {"wall"} if framework == "tornado" else clocks in ({"loop"}, {None})
    assert SECRET not in repr(scan), "the query string was read"


def test_sidecar_tasks_prints_each_request(spawn: Spawner) -> None:
    service = start(spawn, "aiohttp", "asyncio", "3.11", access_log=False)
    assert service.port is not None
    item, header, value, trace = REQUESTS[0]
    thread = threading.Thread(target=send, args=(service.port, item, header, value), daemon=True)
    thread.start()
    requests_of(service.pid)
    result = sidecar("tasks", "--pid", str(service.pid))
    thread.join(SLEEP_MS / 1000 + 25)
    assert result.returncode == 0, result.stderr
    assert "· 1 request in flight" in result.stdout.splitlines()[0], result.stdout
    assert (
        f"request: GET /items/{item} · route /items/{{item}} · trace {trace} (traceparent) · "
        "start not kept (aiohttp keeps it for its access log only)"
    ) in result.stdout, result.stdout
    assert SECRET not in result.stdout


#: (framework, version, its two routes' names in the task block, their handlers' frames)
SPLITS = [
    (
        "aiohttp",
        "3.11",
        ("GET /items/{item}", "GET /stages"),
        ("item_handler (", "stages_handler ("),
    ),
    (
        "tornado",
        "3.15",
        ("GET /items/([^/]+)", "GET /stages"),
        ("ItemHandler.get (", "StagesHandler.get ("),
    ),
]


@pytest.mark.parametrize(
    ("app", "version", "routes", "handlers"), SPLITS, ids=["aiohttp", "tornado"]
)
def test_each_route_says_where_its_requests_spent_their_time(
    spawn: Spawner,
    load: LoadDriver,
    app: str,
    version: str,
    routes: tuple[str, str],
    handlers: tuple[str, str],
) -> None:
    """Two routes under load at once, /items/ITEM awaiting a 40 ms sleep and /stages its fetch
    and store: each has a row of its own, the two hold nearly all of the requests'
    task-samples, their requests mostly wait, and each row's top await site is in its own
    handler (or the stage functions /stages awaits), never in the other's.

    Beside them, two clients send /items/slow-N requests of 900 ms in turn, with a
    ``traceparent``: with ``--slow-ms 400``, those are the slow requests, each with its route,
    path, trace id and task, and a duration the scans bound (at least, at most) about what
    the client measured; the 40 ms ones and /stages never are."""
    service = start(spawn, app, "asyncio", version, access_log=False)
    assert service.port is not None
    load.start(service.url + "/items/7?ms=40", seconds=9, connections=3)
    load.start(service.url + "/stages", seconds=9, connections=3)
    done = threading.Event()
    taken: list[float] = []

    def slow_client(client: int) -> None:
        deadline = time.monotonic() + 30  # bounded, whatever becomes of the stats run
        n = 0
        while not done.is_set() and time.monotonic() < deadline:
            began = time.monotonic()
            conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=20)
            try:
                headers = {"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
                conn.request("GET", f"/items/slow-{client}-{n}?ms=900", headers=headers)
                conn.getresponse().read()
            finally:
                conn.close()
            taken.append(time.monotonic() - began)
            n += 1

    clients = [threading.Thread(target=slow_client, args=(i,), daemon=True) for i in range(2)]
    for client in clients:
        client.start()
    time.sleep(0.5)
    result = sidecar(
        "stats", "--pid", str(service.pid), "-d", "4", "--tasks", "--slow-ms", "400", "--json"
    )
    done.set()
    for client in clients:
        client.join(25)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    block = doc["targets"][0]["tasks"]
    slow = block["slow_requests"]
    ended = [r for r in slow["requests"] if not r["ongoing"]]
    assert slow["threshold_ms"] == 400 and len(ended) >= 3, slow
    assert [(r["method"], r["route"]) for r in slow["routes"]] == [("GET", routes[0][4:])], slow
    longest_taken = 1000 * max(taken)
    for request in ended:
        assert request["path"].startswith("/items/slow-"), request
        assert (request["trace"], request["trace_header"]) == (TRACE, "traceparent"), request
        assert request["start_from"] == ("framework" if app == "tornado" else "scans"), request
        # the handler slept 900 ms: the scans' bounds hold that, within what the client saw
        assert 400 <= request["duration_ms"] <= longest_taken, (request, taken)
        assert request["duration_max_ms"] >= 900, request
        assert request["shares"]["waiting"] >= 0.7, request
        assert request["await_sites"][0]["site"].startswith(handlers[0]), request
    rows = {row["route"]: row for row in block["routes"]}
    assert set(routes) <= set(rows), rows
    assert sum(rows[r]["share"] for r in routes) >= 0.9, rows
    stages = ("stages_handler (", "StagesHandler.get (", "fetch (", "store (")
    for route, handler in zip(routes, handlers, strict=True):
        row = rows[route]
        assert row["task_samples"] >= 30 and row["shares"]["waiting"] >= 0.7, row
        top = row["await_sites"][0]["site"]
        own = (handler,) if route != "GET /stages" else stages
        assert top.startswith(own), (route, row)
        other = [h for h in handlers if h != handler]
        assert not any(s["site"].startswith(tuple(other)) for s in row["await_sites"]), row


def test_record_says_the_stalls_a_request_sat_through_and_the_requests_a_stall_delayed(
    spawn: Spawner, tmp_path: Path
) -> None:
    """A 900 ms request in flight while the loop freezes 300 ms in time.sleep: record's slow
    request says the stall it sat through, and the stall the request it delayed."""
    service = spawn.target("aiohttp_app")

    def get(path: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=20)
        try:
            conn.request("GET", path)
            conn.getresponse().read()
        finally:
            conn.close()

    def traffic() -> None:
        time.sleep(1.0)  # record attached
        slow = threading.Thread(target=get, args=("/items/slow?ms=900",), daemon=True)
        slow.start()
        time.sleep(0.3)
        get("/freeze?how=sleep&ms=300")
        slow.join(timeout=20)

    driver = threading.Thread(target=traffic, daemon=True)
    driver.start()
    out = tmp_path / "r.folded"
    argv = ["record", "--pid", str(service.pid), "-d", "3", "--tasks", "--task-rate", "50"]
    result = sidecar(*argv, "-f", "folded", "-o", str(out))
    driver.join(timeout=30)
    assert result.returncode == 0, result.stderr
    said = result.stderr
    assert "\n         delayed 1 slow request: GET /items/{item}\n" in said, said
    sat = re.search(
        r"GET /items/slow · route /items/\{item\}\n(?:.*\n)?"
        r" {9}sat through 1 stall of the loop, 0\.\d\d s: the longest 0\.\d\d s blocked at "
        r"freeze_sleep \(targets/handlers\.py:\d+\)\n",
        said,
    )
    assert sat is not None, said
