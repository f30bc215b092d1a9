"""Which threads a range holds, through ``sidecar serve``, on a real aiohttp service with an idle
helper thread (``pretend-service``, a ``socketserver`` loop beside the event loop):
``GET /api/threads`` lists both with their samples and says which runs the event loop, and
``threads=loop|all`` of /api/profile and /api/timeline count what they say, by the same rule."""

from __future__ import annotations

import json
import math
import time
from typing import Any

from tests.support.helpers import Serve, Spawner, wait_until


def folded_total(server: Serve, query: str) -> tuple[int, str]:
    """Samples of /api/profile?``query`` (folded) and which threads it says they are of."""
    status, body, headers = server.request(f"/api/profile?format=folded&{query}")
    assert status == 200, body
    total = sum(int(row.rpartition(" ")[2]) for row in body.decode().splitlines())
    return total, headers["x-sidecar-threads"]


def test_threads_are_listed_with_their_samples_and_loop_flag(spawn: Spawner, serve: Any) -> None:
    target = spawn.target("aiohttp_app")
    start = math.floor(time.time())
    server = serve(pids=(target.pid,))

    def names() -> set[str]:
        return {t["name"] for t in server.json(f"/api/threads?from={start}")["threads"]}

    assert wait_until(lambda: {"MainThread", "pretend-service"} <= names(), timeout=20), names()
    time.sleep(1.0)
    end = math.floor(time.time())
    span = f"from={start}&to={end}"
    (row,) = server.targets()
    doc = server.settled(f"/api/threads?target={row['id']}&{span}", tries=20, pause=0.3)
    assert (doc["from"], doc["to"]) == (start, end), doc
    by_name = {t["name"]: t for t in doc["threads"]}
    main, helper = by_name["MainThread"], by_name["pretend-service"]
    # the event loop's thread first; the helper runs none
    assert doc["threads"][0] == main, doc
    assert main["loop"] and main["loop_samples"] > 0 and main["pid"] == target.pid, main
    assert not helper["loop"] and helper["loop_samples"] == 0 and helper["samples"] > 0, helper
    assert main["target"] == helper["target"] == row["id"]
    assert main["loop_samples"] <= main["samples"]

    # the profile counts what the list counts: all threads, loop threads, one thread
    every, scope = folded_total(server, f"target={row['id']}&{span}")
    assert (every, scope) == (sum(t["samples"] for t in doc["threads"]), "all")
    loop, scope = folded_total(server, f"target={row['id']}&{span}&threads=loop")
    assert (loop, scope) == (sum(t["loop_samples"] for t in doc["threads"]), "loop")
    one, _ = folded_total(server, f"target={row['id']}&{span}&thread=pretend-service")
    assert one == helper["samples"]
    # the helper's samples are in no loop-thread view: loop-thread samples and all differ
    assert loop < every

    # the timeline: loop-thread samples by default, every thread's with threads=all
    def summed(line: dict[str, Any]) -> int:
        return sum(b["busy"] + b["idle"] + b["blocked"] + b["gil"] for b in line["buckets"])

    by_loop = server.json(f"/api/timeline?target={row['id']}&{span}")
    by_all = server.json(f"/api/timeline?target={row['id']}&{span}&threads=all")
    assert by_loop["loop_threads_only"] and not by_all["loop_threads_only"]
    assert (summed(by_loop), summed(by_all)) == (loop, every)

    # bad input: the API's one JSON error shape
    for path, status, code in (
        (f"/api/threads?target=999&{span}", 404, "unknown_target"),
        (f"/api/threads?from={end}&to={start}", 400, "bad_request"),
        (f"/api/profile?{span}&threads=some", 400, "invalid_parameter"),
        (f"/api/profile?{span}&kind=tasks&threads=loop", 400, "bad_request"),
    ):
        got, body, _ = server.request(path)
        error = json.loads(body)["error"]
        assert (got, error["status"], error["code"]) == (status, status, code), (path, error)
