"""pprof out: ``record --format pprof`` and ``/api/profile?format=pprof`` of real targets, read
back by ``go tool pprof`` (Go's own reader of the format)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from sidecar.profile import parse_folded
from sidecar.rules.frames import STATES
from sidecar.serve.push.series import MAX_SAMPLES, OTHER, profiles
from tests.support.batches import window_batch
from tests.support.helpers import LoadDriver, Spawner, sidecar, wait_until
from tests.support.pprof_tool import pprof, tags, total


def test_go_tool_pprof_reads_a_recording(spawn: Spawner, load: LoadDriver, tmp_path: Path) -> None:
    target = spawn.target("aiohttp_app")
    load.start(target.url + "/blocking", seconds=10, connections=2)
    time.sleep(0.5)
    out = tmp_path / "p.pb.gz"
    done = sidecar(
        "record", "--pid", str(target.pid), "--duration", "2", "--format", "pprof", "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:2] == b"\x1f\x8b"  # gzipped, as the format asks
    written = re.search(r"\(pprof, ([\d,]+) samples\)", done.stderr)
    assert written, done.stderr

    top = pprof(out, "-top", "-nodecount=200")
    assert "Type: wall" in top
    assert re.search(r"\bblocking_sleep\b", top), top
    assert re.search(r"\bApplication\._handle\b", top), top
    counted = pprof(out, "-top", "-sample_index=samples")
    assert total(counted) == int(written[1].replace(",", ""))

    labels = tags(pprof(out, "-tags"))
    assert set(labels["state"]) <= set(STATES) and "blocked" in labels["state"]
    assert {"MainThread", "pretend-service"} <= set(labels["thread_name"])
    # the blocking call's samples are the blocked ones, and they run on the loop's thread
    blocked = pprof(out, "-top", "-sample_index=samples", "-tagfocus=state=blocked")
    assert re.search(r"\bblocking_sleep\b", blocked), blocked
    main = pprof(out, "-top", "-tagfocus=thread_name=MainThread", "-nodecount=200")
    assert "blocking_sleep" in main and "pretend" not in main


def test_api_profile_as_pprof(spawn: Spawner, load: LoadDriver, serve: Any, tmp_path: Path) -> None:
    target = spawn.target("tornado_app")
    load.start(target.url + "/blocking", seconds=20, connections=2)
    server = serve(pids=(target.pid,))
    assert wait_until(lambda: len(server.targets()) == 1 and server.targets()[0]["samples"] > 200)
    tid = server.targets()[0]["id"]
    end = time.time() - 1
    span = f"target={tid}&from={end - 60}&to={end}"
    status, body, headers = server.request(f"/api/profile?{span}&format=pprof")
    assert status == 200 and headers["content-type"] == "application/vnd.google.protobuf+gzip"
    folded = parse_folded(server.request(f"/api/profile?{span}&format=folded")[1].decode())
    out = tmp_path / "api.pb.gz"
    out.write_bytes(body)
    counted = pprof(out, "-top", "-sample_index=samples", "-nodecount=200")
    assert total(counted) == folded.total
    assert "blocking_sleep" in counted
    labels = tags(pprof(out, "-tags"))
    assert "blocked" in labels["state"]
    assert server.status(f"/api/profile?{span}&format=pprof&state=nothing") in (400, 404)


def raw_samples(path: Path) -> list[int]:
    """The value of each sample in ``go tool pprof -raw``'s listing."""
    text = pprof(path, "-raw")
    section = text.split("Samples:", 1)[1].split("Locations", 1)[0]
    return [int(m[1]) for m in re.finditer(r"^\s+(\d+):", section, re.MULTILINE)]


def test_a_window_past_pyroscopes_sample_limit_keeps_its_totals(tmp_path: Path) -> None:
    states = ("busy", "idle", "blocked")
    rows = [
        (
            f"main (app.py:1);handler_{n} (app.py:{n});leaf (lib.py:{n % 7})",
            n % 2,
            states[n % 3],
            1 + n % 5,
        )
        for n in range(20_000)
    ]
    batch = window_batch((1, 1), 1_700_000_000, 10, 1000, rows, {0: "MainThread", 1: "worker"})
    made = dict(profiles(batch, 100.0))
    assert set(made) == {"process_cpu", "wall"}
    wall = tmp_path / "wall.pb.gz"
    wall.write_bytes(made["wall"])
    values = raw_samples(wall)
    assert len(values) <= MAX_SAMPLES
    assert sum(values) == sum(row[3] for row in rows) * 10_000_000
    assert OTHER in pprof(wall, "-top", "-nodecount=20000")
    cpu = tmp_path / "cpu.pb.gz"
    cpu.write_bytes(made["process_cpu"])
    assert "Type: cpu" in pprof(cpu, "-top")
    busy = sum(row[3] for row in rows if row[2] == "busy")
    assert sum(raw_samples(cpu)) == busy * 10_000_000


def test_the_task_profile_of_a_recording_as_pprof(
    spawn: Spawner, load: LoadDriver, tmp_path: Path
) -> None:
    target = spawn.target("aiohttp_app")
    load.start(target.url + "/stages", seconds=10, connections=4)
    time.sleep(0.5)
    out = tmp_path / "p.pb.gz"
    done = sidecar(
        "record",
        "--pid",
        str(target.pid),
        "--duration",
        "2",
        "--tasks",
        "--format",
        "pprof",
        "-o",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    tasks = tmp_path / "p.tasks.pb.gz"  # the compound suffix stays whole
    assert f"wrote {tasks} (pprof," in done.stderr
    labels = tags(pprof(tasks, "-tags"))
    assert "waiting" in labels["state"] and set(labels["state"]) <= {"running", "ready", "waiting"}
    assert set(labels["task"]) == {"request", "background"}  # request handlers and the rest
    assert "GET /stages" in labels["route"], labels  # a request's route, from its route frame
    assert "stages_handler" in pprof(tasks, "-top", "-nodecount=200")
