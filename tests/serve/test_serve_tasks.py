"""``sidecar serve`` with its task scans, as a real process against real targets: task windows
stored beside the thread windows, the task profile, timeline and stats of the API, the stats
CLI and the Prometheus gauges agreeing with them."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.store.query import Range, Reader
from sidecar.store.taskquery import NoTaskScans, TaskReader
from tests.support.helpers import ROOT, LoadDriver, Serve, Spawner, sidecar, wait_until
from tests.support.pythons import interpreter
from tests.support.stats_schema import SCHEMA
from tests.support.task_scans import await_lines

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARKED = 12
#: The parked tasks, the ticker and main's task.
LIVE_TASKS = PARKED + 2


def scanned(db: Path, target: int, scans: int) -> bool:
    """The store holds at least ``scans`` task scans of the target."""
    try:
        return TaskReader(Reader(db)).require_scans(target, Range(0, 2**33)) >= scans
    except (NoTaskScans, Exception):
        return False


def scanned_target(server: Serve, scans: int) -> dict[str, Any]:
    """The one target of ``server``, once the store holds ``scans`` of its task scans."""
    assert wait_until(lambda: bool(server.targets()), timeout=20)
    (row,) = server.targets()
    assert wait_until(lambda: scanned(server.db, row["id"], scans), timeout=30)
    return row


def request_stacks(server: Serve, target: int) -> list[str]:
    """The folded task stacks of the target's requests, all its windows."""
    path = f"/api/profile?target={target}&kind=tasks&tasks=requests&from=0"
    return server.request(path)[1].decode().splitlines()


def stats_cli(pid: int, *options: str) -> dict[str, Any]:
    """The tasks block of ``sidecar stats --pid PID --tasks --json`` over 3 s (unless
    ``options`` say otherwise)."""
    result = sidecar("stats", "--pid", str(pid), "--duration", "3", "--tasks", "--json", *options)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    block: dict[str, Any] = doc["targets"][0]["tasks"]
    return block


def test_task_windows_are_stored_beside_thread_windows(
    spawn: Spawner, serve: Any, tmp_path: Path
) -> None:
    """A target with 12 tasks parked on one await, a ticker and its main task: the stored
    windows count 14 tasks in flight, 12 of them in the parked stack, none of them requests."""
    target = spawn.target("tasks_parked", "--tasks", str(PARKED))
    server = serve("--task-rate", "20", pids=(target.pid,))
    row = scanned_target(server, 40)
    tasks = TaskReader(Reader(server.db))
    span = Range(0, 2**33)
    flight = tasks.in_flight(row["id"], span)
    assert abs(flight.mean - LIVE_TASKS) < 0.2, flight
    assert flight.requests == 0
    assert flight.states["waiting"] > LIVE_TASKS - 0.2, flight
    profile = tasks.profile(row["id"], span)
    parked = {s: n for s, n in profile.stacks.items() if "(targets/tasks_parked.py:15)" in s}
    assert sum(parked.values()) / flight.scans > PARKED - 0.2, profile.stacks
    assert all(s.endswith(";[waiting]") for s in parked), parked
    # the threads are stored as before
    assert Reader(server.db).profile(row["id"], span).total > 0


def test_the_api_serves_tasks_in_flight_and_refuses_unscanned_targets(
    spawn: Spawner, serve: Any
) -> None:
    """The parked target through the API: the task profile (folded and SVG), the timeline by
    state and the stats block all say 14 tasks in flight, all waiting, none of them requests;
    a target whose tasks are not scanned is refused in the one JSON error shape."""
    target = spawn.target("tasks_parked", "--tasks", str(PARKED))
    server = serve("--task-rate", "20", pids=(target.pid,))
    row = scanned_target(server, 40)
    span = f"&from={time.time() - 120:.0f}"
    folded = server.request(f"/api/profile?target={row['id']}&kind=tasks{span}")[1].decode()
    counts = {
        line.rpartition(" ")[0]: int(line.rpartition(" ")[2]) for line in folded.split("\n") if line
    }
    stats = server.json(f"/api/stats?target={row['id']}{span}")
    jsonschema.validate(stats, SCHEMA)
    (entry,) = stats["targets"]
    block = entry["tasks"]
    assert abs(block["in_flight"]["mean"] - LIVE_TASKS) < 0.2, block
    assert block["in_flight"]["requests"] == 0 and block["requests"]["task_samples"] == 0
    assert block["shares"]["waiting"] > 0.98, block
    assert block["task_samples"] >= sum(counts.values())  # stats read at least as late
    parked = sum(n for s, n in counts.items() if "tasks_parked.py:15)" in s)
    assert parked / sum(counts.values()) > (PARKED - 0.2) / LIVE_TASKS, counts
    timeline = server.json(f"/api/timeline?target={row['id']}&kind=tasks&step=1{span}")
    assert timeline["kind"] == "tasks" and len(timeline["buckets"]) >= 2, timeline
    for bucket in timeline["buckets"]:
        assert abs(bucket["waiting"] + bucket["running"] + bucket["ready"] - LIVE_TASKS) < 0.5
        assert bucket["requests"] == 0
        assert abs(bucket["background"] - LIVE_TASKS) < 0.5, bucket
    # Prometheus: the last window's mean tasks in flight, by state and kind
    gauges = {
        (sample.labels["state"], sample.labels["kind"]): sample.value
        for family in text_string_to_metric_families(server.request("/metrics")[1].decode())
        if family.name == "sidecar_tasks"
        for sample in family.samples
        if sample.labels["pid"] == str(target.pid)
    }
    assert abs(gauges[("waiting", "background")] - timeline["buckets"][-1]["waiting"]) < 0.5
    assert abs(sum(gauges.values()) - block["in_flight"]["mean"]) < 0.5, gauges
    assert sum(v for (_, kind), v in gauges.items() if kind == "request") == 0
    # the stats CLI, sampling the same target, says the same
    cli = stats_cli(target.pid)
    assert abs(cli["in_flight"]["mean"] - block["in_flight"]["mean"]) < 0.2, (cli, block)
    assert cli["shares"]["waiting"] > 0.98 and cli["await_sites"] == block["await_sites"] == []
    status, body, headers = server.request(
        f"/api/profile?target={row['id']}&kind=tasks&format=svg{span}"
    )
    assert status == 200 and headers["content-type"] == "image/svg+xml"
    assert b"task-samples" in body and b"parked (targets/tasks_parked.py:15)" in body
    status, body, _ = server.request(
        f"/api/profile?target={row['id']}&kind=tasks&tasks=requests{span}"
    )
    assert status == 404 and json.loads(body)["error"]["code"] == "no_samples"
    status, body, _ = server.request(f"/api/profile?target={row['id']}&tasks=requests{span}")
    assert status == 400 and json.loads(body)["error"]["code"] == "bad_request", body
    status, body, _ = server.request(f"/api/profile?kind=stacks{span}")
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_parameter", body


def test_a_target_not_scanned_is_told_so(spawn: Spawner, serve: Any) -> None:
    target = spawn.target("tasks_parked", "--tasks", "3")
    server = serve("--task-rate", "0", pids=(target.pid,))
    assert wait_until(
        lambda: bool(server.targets()) and server.targets()[0]["samples"] > 200, timeout=30
    )
    (row,) = server.targets()
    assert not scanned(server.db, row["id"], 1)
    for path in ("/api/profile?kind=tasks", "/api/timeline?kind=tasks"):
        status, body, _ = server.request(f"{path}&target={row['id']}&from=0")
        error = json.loads(body)["error"]
        assert (status, error["code"]) == (404, "no_task_scans"), body
        assert f"the asyncio tasks of target {row['id']} were not scanned" in error["message"]
    (entry,) = server.json(f"/api/stats?target={row['id']}&from=0")["targets"]
    assert entry["tasks"] is None


@pytest.mark.parametrize("version", ["3.8", "3.10"])
def test_a_python_without_task_scans_keeps_its_threads(
    spawn: Spawner, serve: Any, version: str
) -> None:
    """serve scans tasks by default; a target before 3.11 (py-spy's reader on 3.8, the own
    walker on 3.10) has no task to scan: its threads are stored as ever, its tasks refused."""
    target = spawn.target("spin", "--sleep", python=interpreter(version))
    server = serve(pids=(target.pid,))

    def sampled() -> bool:
        rows = server.targets()
        return bool(rows) and rows[0]["samples"] > 100

    assert wait_until(sampled, timeout=30)
    (row,) = server.targets()
    assert row["alive"] and not row["problem"], row
    status, body, _ = server.request(f"/api/profile?target={row['id']}&kind=tasks&from=0")
    assert (status, json.loads(body)["error"]["code"]) == (404, "no_task_scans"), body
    assert server.status(f"/api/profile?target={row['id']}&from=0") == 200


def test_requests_of_a_loaded_aiohttp_server_are_told_from_background(
    spawn: Spawner, load: LoadDriver, serve: Any
) -> None:
    """aiohttp under load on /stages (30 ms on fetch, then 10 ms on store, four connections):
    its request handlers count as requests, about four in flight, the connections' own tasks
    as background; fetch tops the requests' await sites, store comes second; the task
    profile of requests holds only request handlers' stacks. ``stats`` agrees with ``serve``
    on the top site's share within 0.1: both scan at 47 Hz, 300 scans and 5 s, about 1,000
    task-samples of requests each (the spread of one share then about 0.03)."""
    target = spawn.target("aiohttp_app")
    load.start(target.url + "/stages", seconds=40, connections=4)
    server = serve("--task-rate", "47", pids=(target.pid,))
    row = scanned_target(server, 300)
    block = server.json(f"/api/stats?target={row['id']}&from=0")["targets"][0]["tasks"]
    flight = block["in_flight"]
    assert 2.5 <= flight["requests"] <= 4.05, block
    assert flight["background"] >= 1, block  # the server's own and the connections' tasks
    at = await_lines(ROOT / "targets" / "aiohttp_app.py")
    sites = [site["site"] for site in block["await_sites"]]
    assert sites[:2] == [
        f"fetch (targets/aiohttp_app.py:{at['fetch']})",
        f"store (targets/aiohttp_app.py:{at['store']})",
    ], block["await_sites"]
    assert block["await_sites"][0]["awaits"].startswith("sleep (asyncio/tasks.py:")
    assert block["await_sites"][0]["share"] > 0.5, block
    line = server.json(f"/api/timeline?target={row['id']}&kind=tasks&tasks=requests&from=0")
    assert line["tasks"] == "requests"
    for bucket in line["buckets"]:  # the states of requests' tasks add up to the requests
        states = bucket["running"] + bucket["ready"] + bucket["waiting"]
        assert abs(states - bucket["requests"]) < 0.01, bucket
    cli = stats_cli(target.pid, "--duration", "5", "--task-rate", "47")
    assert [s["site"] for s in cli["await_sites"][:2]] == sites[:2], (cli, block)
    assert abs(cli["in_flight"]["requests"] - flight["requests"]) < 1, (cli, block)
    assert abs(cli["await_sites"][0]["share"] - block["await_sites"][0]["share"]) < 0.1
    for line in request_stacks(server, row["id"]):
        assert "RequestHandler._handle_request (aiohttp/web_protocol.py:" in line, line


def test_requests_of_a_loaded_tornado_server_are_told_by_execute(
    spawn: Spawner, load: LoadDriver, serve: Any
) -> None:
    """Tornado under load on /sleep (four connections): each request's task runs
    RequestHandler._execute, so about four requests are in flight (five with the slow one
    below), waiting in the handler's sleep, and the requests' task profile holds only stacks
    through _execute.

    Beside them, four /items/slow-N requests of 700 ms in turn, with a ``traceparent`` on the
    first two: with ``--slow-ms 300`` those are stored as slow requests, and
    ``GET /api/requests`` lists them (by route, by trace id, by length) as /api/stats counts
    them, and /metrics counts them per route; the /sleep ones never are."""
    target = spawn.target("tornado_app")
    assert target.port is not None
    load.start(target.url + "/sleep", seconds=20, connections=4)
    server = serve("--task-rate", "20", "--slow-ms", "300", pids=(target.pid,))
    row = scanned_target(server, 20)
    for n in range(4):
        headers = {"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"} if n < 2 else {}
        conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=20)
        try:
            conn.request("GET", f"/items/slow-{n}?ms=700", headers=headers)
            assert conn.getresponse().read() is not None
        finally:
            conn.close()
    assert wait_until(lambda: scanned(server.db, row["id"], 100), timeout=30)
    block = server.json(f"/api/stats?target={row['id']}&from=0")["targets"][0]["tasks"]
    # four /sleep at a time, and for most of the scans a slow one beside them
    assert 2.5 <= block["in_flight"]["requests"] <= 5.05, block
    assert block["await_sites"][0]["site"].startswith("work (targets/tornado_app.py:"), block
    for line in request_stacks(server, row["id"]):
        assert "RequestHandler._execute (tornado/web.py:" in line, line
    listed = f"/api/requests?target={row['id']}&from=0"
    assert wait_until(lambda: server.json(listed)["total"] >= 4, timeout=30), server.json(listed)
    found = server.json(listed)
    assert found["slow_ms"] == 300 and found["total"] == 4, found
    assert sorted(r["path"] for r in found["requests"]) == [f"/items/slow-{n}" for n in range(4)]
    for request in found["requests"]:
        assert (request["route"], request["handler"]) == ("/items/([^/]+)", "ItemHandler")
        assert request["start_from"] == "framework" and request["target"] == row["id"], request
        assert 300 <= request["duration_ms"] <= request["duration_max_ms"], request
        assert request["duration_max_ms"] >= 700 and request["duration_ms"] < 1500, request
        assert request["await_sites"][0]["site"].startswith("ItemHandler.get ("), request
    route = urllib.parse.quote("GET /items/([^/]+)")
    assert server.json(f"{listed}&route={route}")["total"] == 4
    assert server.json(f"{listed}&route=/stages")["total"] == 0
    traced = server.json(f"{listed}&trace={TRACE}")["requests"]
    assert sorted(r["path"] for r in traced) == ["/items/slow-0", "/items/slow-1"], traced
    assert server.json(f"{listed}&min_ms=5000")["total"] == 0
    slow = block["slow_requests"]
    assert slow["threshold_ms"] == 300, slow
    # /metrics: the slow ones per route; the requests in flight per route and state
    counted: dict[tuple[str, str], float] = {}
    text = server.request("/metrics")[1].decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("sidecar_slow_requests_total", "sidecar_route_requests"):
                at = (sample.name, sample.labels["route"] + " " + sample.labels.get("state", ""))
                counted[at] = counted.get(at, 0) + sample.value
    assert counted[("sidecar_slow_requests_total", "GET /items/([^/]+) ")] == 4, counted
    assert 2.5 <= counted[("sidecar_route_requests", "GET /sleep waiting")] <= 4.05, counted
    assert (
        server.json(f"/api/stats?target={row['id']}&from=0")["targets"][0]["tasks"][
            "slow_requests"
        ]["count"]
        == 4
    )


def test_tasks_past_the_scans_bound_count_in_flight(spawn: Spawner, serve: Any) -> None:
    """1,000 parked tasks (with the ticker and main's task, 1,002 live) scanned with a bound
    of 200 tasks (serve's hidden ``--task-bound``): the stored windows
    count the 802 unread tasks of each scan, so the stats block and the timeline say 1,002 in
    flight, of which 200 read, a sample of a fifth; ``stats --tasks`` says the same."""
    many, bound = 1000, 200
    live = many + 2
    target = spawn.target("tasks_many", "--tasks", str(many))
    server = serve("--task-rate", "20", "--task-bound", str(bound), pids=(target.pid,))
    row = scanned_target(server, 20)
    span = Range(0, 2**33)
    flight = TaskReader(Reader(server.db)).in_flight(row["id"], span)
    assert abs(flight.mean - live) < 1, flight
    assert abs(flight.unread - (live - bound)) < 1, flight
    assert abs(sum(flight.states.values()) - bound) < 1, flight
    stats = server.json(f"/api/stats?target={row['id']}&from={time.time() - 120:.0f}")
    jsonschema.validate(stats, SCHEMA)
    block = stats["targets"][0]["tasks"]
    assert abs(block["in_flight"]["mean"] - live) < 1, block
    assert abs(block["in_flight"]["unread"] - (live - bound)) < 1, block
    assert abs(block["sampled"] - bound / live) < 0.002, block
    assert abs(block["task_samples"] / block["scans"] - bound) < 1, block
    since = f"&from={time.time() - 120:.0f}"
    timeline = server.json(f"/api/timeline?target={row['id']}&kind=tasks&step=1{since}")
    for bucket in timeline["buckets"]:
        read = sum(bucket[state] for state in ("running", "ready", "waiting"))
        assert abs(read - bound) < 1 and abs(bucket["unread"] - (live - bound)) < 1, bucket
    assert timeline["buckets"], timeline
    # Prometheus: the last window's tasks read, by state and kind, and the unread beside them
    families = {
        family.name: [s for s in family.samples if s.labels.get("pid") == str(target.pid)]
        for family in text_string_to_metric_families(server.request("/metrics")[1].decode())
    }
    assert abs(sum(s.value for s in families["sidecar_tasks"]) - bound) < 1, families
    (gauge,) = families["sidecar_tasks_unread"]
    assert abs(gauge.value - (live - bound)) < 1, gauge
    # stats --tasks of a live recording counts them alike
    live_block = stats_cli(target.pid, "--task-bound", str(bound))
    assert abs(live_block["in_flight"]["mean"] - live) < 1, live_block
    assert abs(live_block["sampled"] - bound / live) < 0.002, live_block
