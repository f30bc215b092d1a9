"""``sidecar serve`` against a loop starved of the GIL (``targets/gil.py``: a thread named
``holder`` spins in pure Python beside it) and one that collects garbage, through the real
HTTP API and /metrics: the loop reads ``gil``, with that thread named as who held the GIL and
where; the collector's loop has its ``[gc]`` frames and its gc share."""

from __future__ import annotations

import time
from typing import Any

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.rules.frames import STATES
from tests.support.helpers import Spawner, wait_until
from tests.support.stats_schema import SCHEMA

#: Seconds of 1 s windows the checks read (each about 100 samples of a loop thread).
SECONDS = 6


def loop_metrics(text: str, pid: int) -> dict[tuple[str, str], float]:
    """(metric, state) -> value of /metrics's loop gauges of one process."""
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("sidecar_loop_") and sample.labels.get("pid") == str(pid):
                out[(sample.name, sample.labels.get("state", ""))] = sample.value
    return out


def test_a_loop_starved_of_the_gil_and_one_collecting_garbage(spawn: Spawner, serve: Any) -> None:
    starved = spawn.target("gil", "--holder", "spin")
    collector = spawn.target("gil", "--gc")
    started = time.time()
    server = serve(pids=(starved.pid, collector.pid))
    assert wait_until(lambda: len(server.targets()) == 2, timeout=20), server.targets()
    ids = {t["pid"]: t["id"] for t in server.targets()}
    # where the GIL states of each come from, as the API and the log say
    assert wait_until(lambda: all(t["gil"] for t in server.targets()), timeout=20)
    assert {t["gil"] for t in server.targets()} == {
        "the GIL's holder, and the waiters' futex in /proc"
    }
    assert f"PID {starved.pid}: GIL states from the GIL's holder" in server.log_text()

    def stats(pid: int) -> dict[str, Any]:
        now = time.time()
        doc = server.json(f"/api/stats?target={ids[pid]}&from={now - 60:.0f}&to={now:.0f}")
        return dict(doc["targets"][0]) if doc["targets"] else {"samples": 0}

    # SECONDS of windows of both stored (each loop thread: ~100 samples a window)
    assert wait_until(
        lambda: min(stats(pid)["samples"] for pid in ids) >= 100 * SECONDS, timeout=60
    ), server.log_text()[-2000:]

    # the starved loop: mostly waiting for the GIL, held by the holder thread in spin
    hog = stats(starved.pid)
    assert sum(hog[f"{state}_share"] for state in STATES) == pytest.approx(1.0, abs=0.001)
    assert hog["gil_share"] > 0.5, hog
    holders = hog["gil_holders"]
    assert holders[0]["thread"] == "holder", holders
    # spin's lines: the loop of its loop and its body
    sites = {h["site"].rpartition(":")[0] for h in holders if h["thread"] == "holder"}
    assert sites == {"spin (targets/gil.py"}, holders
    assert sum(h["share"] for h in holders if h["thread"] == "holder") > 0.9, holders
    whole = server.json(f"/api/stats?from={started:.0f}")
    jsonschema.validate(whole, SCHEMA)
    merged = whole["frameworks"]
    assert any(shares["gil_holders"] for shares in merged.values()), merged

    span = f"target={ids[starved.pid]}&from={started - 1:.0f}&to={time.time():.0f}"
    line = server.json(f"/api/timeline?{span}&step=1")
    assert line["loop_threads_only"] is True
    assert sum(b["gil"] for b in line["buckets"]) > sum(b["idle"] for b in line["buckets"])
    status, body, _ = server.request(f"/api/profile?{span}&state=gil")
    assert status == 200
    rows = body.decode().splitlines()
    assert rows and all(row.rpartition(" ")[0].endswith(";[gil]") for row in rows), rows[:5]

    # the collector: no wait for the GIL, [gc] frames on top of the code that collected
    gc = stats(collector.pid)
    assert gc["gil_share"] < 0.05 and not gc["gil_holders"], gc
    assert gc["gc_share"] > 0.01, gc
    span = f"target={ids[collector.pid]}&from={started - 1:.0f}&to={time.time():.0f}"
    folded = server.request(f"/api/profile?{span}&state=busy")[1].decode()
    assert any(
        row.rpartition(" ")[0].endswith(";[gc]") and "collect (targets/gil.py:" in row
        for row in folded.splitlines()
    ), folded[:2000]

    # /metrics: the loop's shares of the last minute, gil among them, and the gc share
    text = server.request("/metrics")[1].decode()
    starving = loop_metrics(text, starved.pid)
    assert {state for name, state in starving if name == "sidecar_loop_share"} == set(STATES)
    assert starving[("sidecar_loop_share", "gil")] > 0.5, starving
    collecting = loop_metrics(text, collector.pid)
    assert collecting[("sidecar_loop_share", "gil")] < 0.05, collecting
    assert collecting[("sidecar_loop_gc_share", "")] > 0.01, collecting
