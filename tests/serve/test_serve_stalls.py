"""Stalls through ``sidecar serve``, on a real aiohttp service whose /freeze route holds its
loop a known time: ``GET /api/stalls`` lists them with what held each, ``/metrics``'s
``sidecar_loop_stall_seconds`` histogram counts exactly those, ``/api/stats`` gives them per
target, and a restart of the service keeps the stored stalls."""

from __future__ import annotations

import threading
import time
from typing import Any

import jsonschema
from prometheus_client.parser import text_string_to_metric_families

from tests.support.helpers import Spawner, running_state, wait_until
from tests.support.stats_schema import SCHEMA

#: (how, ms) of each /freeze, in order; the first is under --stall-ms 120 and must not show.
FREEZES = (("sleep", 60), ("sleep", 300), ("spin", 200), ("gc", 150))


def stall_histogram(text: str, pid: int) -> dict[str, float]:
    """le → cumulative count, and ``count`` / ``sum``, of one process's stall histogram."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "sidecar_loop_stall_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("pid") != str(pid):
                continue
            if sample.name.endswith("_bucket"):
                out[sample.labels["le"]] = sample.value
            else:
                out[sample.name.rsplit("_", 1)[1]] = sample.value
    return out


def test_stalls_are_listed_counted_and_kept(spawn: Spawner, serve: Any) -> None:
    target = spawn.target("aiohttp_app")
    began = time.time()
    server = serve("--stall-ms", "120", pids=(target.pid,))
    assert wait_until(lambda: server.targets() and server.targets()[0]["samples"] > 0, timeout=20)
    held = []  # how long each held the loop by the target's own clock
    for how, ms in FREEZES:
        said = target.get(f"/freeze?how={how}&ms={ms}", timeout=30).decode()
        held.append(float(said.split()[3]) / 1000)  # "froze the loop 301.2 ms (...)"
        time.sleep(0.3)

    def listed() -> dict[str, Any]:
        return dict(server.json(f"/api/stalls?from={began - 1:.0f}"))

    # each window is handed over once it ends (1 s windows)
    assert wait_until(lambda: len(listed()["stalls"]) >= 3, timeout=20), listed()
    time.sleep(1.5)
    doc = listed()
    stalls = doc["stalls"]
    assert (doc["total"], doc["dropped"], doc["stall_ms"]) == (3, 0, 120), doc
    found = [(s["state"], s["duration_s"], s["site"]) for s in stalls]
    expected = [("blocked", "freeze_sleep"), ("busy", "freeze_spin"), ("gc", "freeze_gc")]
    for stall, (state, function), length in zip(stalls, expected, held[1:], strict=True):
        if state == "busy":  # a spin on a loaded host may wait for its CPU most of the time
            state = running_state(stall["states"])
        assert stall["state"] == state, found
        # within a period (10 ms) at either end, and the sampler's lag under a loaded machine
        assert abs(stall["duration_s"] - length) <= 0.05, (found, held)
        assert stall["site"].startswith(f"{function} (targets/handlers.py:"), found
        assert (stall["pid"], stall["target"]) == (target.pid, server.targets()[0]["id"]), stall
        # the task scans (10 Hz, one at a random instant of each 100 ms) fall in each of them:
        # the request's task named
        assert stall["task"]["name"].startswith("Task-") and stall["task"]["request"], stall
    assert [s["start"] for s in stalls] == sorted(s["start"] for s in stalls)

    # the histogram counts the same stalls, each in its bucket
    histogram = stall_histogram(server.request("/metrics")[1].decode(), target.pid)
    assert histogram["count"] == 3 and histogram["+Inf"] == 3, histogram
    for bound in ("0.1", "0.25", "0.5", "1"):
        below = sum(1 for stall in stalls if stall["duration_s"] <= float(bound))
        assert histogram[bound] == below, (bound, histogram, found)
    assert abs(histogram["sum"] - sum(s["duration_s"] for s in stalls)) < 0.05, histogram

    # filters: the longest only, one target, a range after them
    longest = server.json(f"/api/stalls?from={began - 1:.0f}&min_ms=250")["stalls"]
    assert [s["state"] for s in longest] == ["blocked"], longest
    by_length = server.json(f"/api/stalls?from={began - 1:.0f}&order=longest&limit=2")
    assert [s["duration_s"] for s in by_length["stalls"]] == sorted(
        (s["duration_s"] for s in stalls), reverse=True
    )[:2]
    assert by_length["total"] == 3
    target_id = stalls[0]["target"]
    assert server.json(f"/api/stalls?target={target_id}&from={began - 1:.0f}")["total"] == 3
    later = f"/api/stalls?from={time.time() + 5:.0f}&to={time.time() + 60:.0f}"
    assert server.json(later)["stalls"] == []
    status, body, _ = server.request(f"/api/stalls?target=999&from={began - 1:.0f}")
    assert status == 404 and b"999" in body, body

    # /api/stats gives them per target, in the stats document's shape
    stats = server.json(f"/api/stats?target={target_id}&from={began - 1:.0f}")
    jsonschema.validate(stats, SCHEMA)
    assert [s["duration_s"] for s in stats["targets"][0]["stalls"]] == [
        s["duration_s"] for s in stalls
    ]

    # a stall in progress shows before it ends: how long the loop has been held so far
    def stalled() -> float:
        text = server.request("/metrics")[1].decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "sidecar_loop_stalled_seconds":
                    return float(sample.value)
        raise AssertionError("no sidecar_loop_stalled_seconds")

    assert stalled() == 0.0
    long = threading.Thread(target=target.get, args=("/freeze?how=sleep&ms=2500", 30))
    long.start()
    try:
        assert wait_until(lambda: stalled() >= 1.0, timeout=10), stalled()
        assert long.is_alive()  # seen while the loop was still held
    finally:
        long.join()
    assert wait_until(lambda: stalled() == 0.0, timeout=10)
    assert wait_until(lambda: listed()["total"] == 4, timeout=10), listed()

    # a restart keeps what was stored
    stored = [(s["start"], s["duration_s"]) for s in listed()["stalls"]]
    server.stop()
    again = serve("--stall-ms", "120", pids=(target.pid,))
    assert wait_until(lambda: bool(again.targets()), timeout=20)
    kept = again.json(f"/api/stalls?from={began - 1:.0f}")
    assert [(s["start"], s["duration_s"]) for s in kept["stalls"]] == stored
