"""``sidecar serve`` as a real process against real targets: targets, profiles, restarts,
crashes, a full database, retention, the token and the metrics."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.rules.frames import STATES
from tests.support.helpers import (
    HARD_CONNECTIONS,
    LoadDriver,
    Spawner,
    free_port,
    sidecar,
    wait_until,
)


def by_framework(targets: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["framework"]: t for t in targets}


def test_targets_profiles_and_timeline(spawn: Spawner, load: LoadDriver, serve: Any) -> None:
    aio = spawn.target("aiohttp_app", "--uvloop")
    tor = spawn.target("tornado_app")
    # the load outlasts every wait below (the fixture stops it when the test ends)
    load.start(aio.url + "/hard", seconds=120, connections=HARD_CONNECTIONS)
    load.start(tor.url + "/hard", seconds=120, connections=HARD_CONNECTIONS)
    server = serve(pids=(aio.pid, tor.pid))
    assert wait_until(lambda: len(server.targets()) == 2, timeout=15), server.targets()
    targets = by_framework(server.targets())
    assert targets["aiohttp"]["loop"] == "uvloop" and targets["aiohttp"]["pid"] == aio.pid
    assert targets["tornado"]["loop"] == "asyncio" and targets["tornado"]["pid"] == tor.pid
    assert all(t["alive"] and t["problem"] is None for t in targets.values())

    tid = targets["aiohttp"]["id"]

    def folded(target_id: int, query: str = "") -> str:
        path = f"/api/profile?target={target_id}&format=folded{query}"
        status, body, _ = server.request(path)
        return body.decode() if status == 200 else ""

    # the handlers run briefly between awaits: wait until busy samples caught them (the
    # depth asserted below is that of busy samples)
    assert wait_until(
        lambda: "hard_handler (targets/aiohttp_app.py:" in folded(tid, "&state=busy"), timeout=60
    )
    tor_id = targets["tornado"]["id"]
    assert wait_until(
        lambda: "HardWorkHandler.get (targets/tornado_app.py:" in folded(tor_id), timeout=30
    )
    assert "aiohttp_app.py" not in folded(tor_id)  # never another target's samples

    status, svg, headers = server.request(f"/api/profile?target={tid}&format=svg")
    assert status == 200 and svg.startswith(b"<?xml")
    assert "sandbox" in headers["content-security-policy"]
    doc = server.json(f"/api/profile?target={tid}&format=speedscope")
    assert doc["profiles"][0]["type"] == "sampled"

    busy = server.request(f"/api/profile?target={tid}&state=busy")[1].decode()
    assert busy and "[idle]" not in busy and "[blocked]" not in busy

    stats = server.json("/api/stats")
    assert {t["framework"] for t in stats["targets"]} == {"aiohttp", "tornado"}
    assert set(stats["frameworks"]) == {"aiohttp", "tornado"}
    aio_stats = next(t for t in stats["targets"] if t["framework"] == "aiohttp")
    assert aio_stats["loop"] == "uvloop" and aio_stats["pid"] == aio.pid
    shares = sum(aio_stats[f"{state}_share"] for state in STATES)
    assert shares == pytest.approx(1.0, abs=0.001)
    assert aio_stats["depth"]["max"] >= aio_stats["depth"]["p95"] >= aio_stats["depth"]["p50"] > 0
    one = server.json(f"/api/stats?target={tid}")
    assert [t["pid"] for t in one["targets"]] == [aio.pid]
    assert server.status("/api/stats?target=12345") == 404

    compare = server.json(f"/api/diff?target={tor_id}&target_b={tid}&format=json")
    assert compare["verdict"] and compare["before_samples"] > 0 and compare["after_samples"] > 0
    assert compare["total_changes"] and compare["self_changes"]
    status, svg, headers = server.request(f"/api/diff?target={tor_id}&target_b={tid}")
    assert status == 200 and b"<svg" in svg and "sandbox" in headers["content-security-policy"]
    lines = server.request(f"/api/diff?target={tid}&target_b={tid}&format=folded")[1].decode()
    assert all(line.split()[-1] == line.split()[-2] for line in lines.splitlines())
    assert server.status(f"/api/diff?target={tid}") == 400  # nothing to compare with

    def timeline() -> dict[str, Any]:
        end = time.time()
        result: dict[str, Any] = server.json(
            f"/api/timeline?target={tid}&step=1&from={end - 60}&to={end}"
        )
        return result

    # the handlers may have shown up within the first seconds: wait for three of them stored
    assert wait_until(lambda: len(timeline()["buckets"]) >= 3, timeout=15)
    result = timeline()
    assert result["loop_threads_only"] is True
    buckets = result["buckets"]
    assert all(b["t"] % 1 == 0 for b in buckets)
    assert sum(b["idle"] for b in buckets) > sum(b["blocked"] for b in buckets)


def test_restart_keeps_the_target_and_adds_a_process(spawn: Spawner, serve: Any) -> None:
    port = str(free_port())
    first = spawn.target("tornado_app", "--port", port)
    server = serve("--match", f"targets.tornado_app --port {port}$")
    assert wait_until(lambda: len(server.targets()) == 1 and server.targets()[0]["samples"] > 50)
    target_id = server.targets()[0]["id"]
    first.popen.kill()
    first.popen.wait()
    assert wait_until(lambda: not server.targets()[0]["alive"], timeout=15)
    second = spawn.target("tornado_app", "--port", port)
    assert wait_until(lambda: server.targets()[0]["pid"] == second.pid, timeout=15)
    (target,) = server.targets()
    assert target["id"] == target_id and target["processes"] == 2 and target["alive"]


def test_workers_of_one_command_are_separate_targets(spawn: Spawner, serve: Any) -> None:
    one = spawn.target("aiohttp_app")
    two = spawn.target("aiohttp_app")
    server = serve(pids=(one.pid, two.pid))
    assert wait_until(lambda: len(server.targets()) == 2, timeout=15)
    targets = server.targets()
    assert {t["pid"] for t in targets} == {one.pid, two.pid}
    assert len({t["id"] for t in targets}) == 2
    assert len({t["group"] for t in targets}) == 1


def windows_in(db: Path) -> set[tuple[int, int, int]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return set(conn.execute("SELECT window, target_id, process_id FROM windows").fetchall())
    finally:
        conn.close()


def test_kill_9_during_writes_keeps_a_consistent_database(
    spawn: Spawner, load: LoadDriver, serve: Any, tmp_path: Path
) -> None:
    target = spawn.target("aiohttp_app")
    load.start(target.url + "/cpu", seconds=30, connections=2)
    db = tmp_path / "crash.db"
    for _ in range(3):
        server = serve(pids=(target.pid,), db=db)
        assert wait_until(lambda: len(windows_in(db)) > 0, timeout=15)
        time.sleep(1.5)
        before = windows_in(db)
        server.stop(signal.SIGKILL)
        conn = sqlite3.connect(db)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        conn.close()
        assert before <= windows_in(db)


def test_sigterm_flushes_the_window_in_progress(spawn: Spawner, serve: Any, tmp_path: Path) -> None:
    target = spawn.target("tornado_app")
    db = tmp_path / "term.db"
    server = serve("--window", "5", pids=(target.pid,), db=db)  # the later --window wins
    assert wait_until(lambda: server.targets() and server.targets()[0]["pid"] == target.pid)
    time.sleep(2)  # inside the first 5 s window: nothing completed yet
    assert server.stop() == 0
    conn = sqlite3.connect(db)
    ticks = conn.execute("SELECT SUM(ticks) FROM windows").fetchone()[0]
    conn.close()
    assert ticks and ticks >= 100


def test_full_database_keeps_sampling_and_recovers(
    spawn: Spawner, load: LoadDriver, serve: Any
) -> None:
    target = spawn.target("aiohttp_app")
    load.start(target.url + "/cpu?repeat=1", seconds=120, connections=2)
    # A cap a little over the empty database (112 KiB) and its WAL's share (an eighth), and
    # many small windows (1 s). How soon the cap is met depends on how many stacks the windows
    # hold: seconds here under the load, never within 40 s while the service idles (its few
    # stacks fit the pages it has).
    server = serve("--max-db-size", "256K", "--rate", "400", pids=(target.pid,))
    assert wait_until(
        lambda: server.json("/healthz")["store"]["evicted_windows"] > 0, timeout=90
    ), server.json("/healthz")
    health = server.json("/healthz")
    samples_then = server.metric("sidecar_sampler_samples_total")
    assert wait_until(lambda: server.metric("sidecar_sampler_samples_total") > samples_then)
    # writing resumes: room is made by evicting the oldest windows
    written = server.metric("sidecar_store_windows_written_total")
    assert wait_until(
        lambda: server.metric("sidecar_store_windows_written_total") > written, timeout=30
    ), server.json("/healthz")
    # the cap met is what it is for: no write error, the file and its WAL within it
    assert health["store"]["write_errors"] == 0 and health["status"] == "ok", health
    assert server.json("/healthz")["store"]["size_bytes"] <= 256 * 1024


def test_retention_removes_old_windows(spawn: Spawner, serve: Any, tmp_path: Path) -> None:
    target = spawn.target("tornado_app")
    db = tmp_path / "ret.db"
    server = serve("--retention", "4s", pids=(target.pid,), db=db)
    assert wait_until(lambda: len(windows_in(db)) >= 6, timeout=20)

    def oldest_is_recent() -> bool:
        starts = [w for w, _, _ in windows_in(db)]
        return bool(starts) and min(starts) >= time.time() - 4 - 3

    assert wait_until(oldest_is_recent, timeout=20), sorted(windows_in(db))[:3]
    assert server.json("/healthz")["status"] == "ok"


def test_token_is_enforced(serve: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-0123456789\n")
    server = serve("--token-file", str(token_file), token="s3cret-token-0123456789")
    assert server.status("/api/targets") == 200
    for bad in ("wrong-token-0123456789", "s3cret-token-012345678"):
        status, body, _ = server.request("/api/targets", token=bad)
        assert status == 401
        assert json.loads(body)["error"]["code"] == "unauthorized"
    raw = urllib.request.Request(f"http://127.0.0.1:{server.port}/api/targets")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(raw, timeout=10)
    assert caught.value.code == 401
    status, body, _ = server.request("/openapi.json", token="wrong-token-0123456789")
    assert status == 401
    for open_path in ("/healthz", "/metrics", "/", "/index.html"):
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{open_path}") as response:
            assert response.status == 200
    query = f"http://127.0.0.1:{server.port}/api/targets?token=s3cret-token-0123456789"
    with urllib.request.urlopen(query) as response:
        assert response.status == 200


def test_metrics_parse_and_errors_have_one_shape(spawn: Spawner, serve: Any) -> None:
    target = spawn.target("aiohttp_app", "--uvloop")
    server = serve(pids=(target.pid,))
    assert wait_until(lambda: server.metric("sidecar_sampler_samples_total") > 100)
    text = server.request("/metrics")[1].decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    for name in (
        "sidecar_sampler_samples",
        "sidecar_sampler_errors",
        "sidecar_sampler_retried",
        "sidecar_sampling_lag_seconds",
        "sidecar_targets",
        "sidecar_store_bytes",
        "sidecar_store_write_errors",
        "sidecar_loop_share",
        "sidecar_cpu_limit_cores",
        "sidecar_cpu_cfs_periods",
        "sidecar_cpu_cfs_throttled_periods",
        "sidecar_cpu_cfs_throttled_seconds",
    ):
        assert name in names

    def cgroup_series() -> dict[str, dict[str, str]]:
        """The target's sidecar_cpu_* samples (its limit only where its cgroup sets one)."""
        return {
            sample.name: sample.labels
            for family in text_string_to_metric_families(server.request("/metrics")[1].decode())
            for sample in family.samples
            if sample.name.startswith("sidecar_cpu_") and sample.labels["pid"] == str(target.pid)
        }

    # the target's cgroup, read as its windows come, under the labels of its other series
    assert wait_until(lambda: len(cgroup_series()) >= 3, timeout=30), server.log_text()[-2000:]
    series = cgroup_series()
    assert {
        "sidecar_cpu_cfs_periods_total",
        "sidecar_cpu_cfs_throttled_periods_total",
        "sidecar_cpu_cfs_throttled_seconds_total",
    } <= set(series)
    assert series["sidecar_cpu_cfs_periods_total"] == {
        "pid": str(target.pid),
        "framework": "aiohttp",
        "loop": "uvloop",
        "role": "",
    }
    assert server.metric("sidecar_store_bytes") > 0
    for path, status in (
        ("/api/profile?target=999", 404),
        ("/api/profile?target=abc", 400),
        ("/api/profile?from=10&to=5", 400),
        ("/api/profile?from=-5", 400),
        ("/api/profile?format=png", 400),
        ("/api/profile?state=sleepy", 400),
        ("/api/timeline?from=0&to=1e10&step=1", 400),
        ("/no/such/route", 404),
        ("/api/../../etc/passwd", 404),
    ):
        got, body, _ = server.request(path)
        assert got == status, (path, body)
        error = json.loads(body)["error"]
        assert error["status"] == status and error["code"] and error["message"], path


def test_second_sidecar_on_the_same_database_refuses(serve: Any, tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    serve(db=db)
    result = sidecar("serve", "--db", str(db), "--port", str(free_port()), timeout=30)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert (
        lines[-1].startswith("sidecar: error: database")
        and "in use by another sidecar" in lines[-1]
    )


def test_a_taken_port_is_one_error_line_before_anything_starts(serve: Any, tmp_path: Path) -> None:
    taken = serve(db=tmp_path / "first.db")
    db = tmp_path / "second.db"
    result = sidecar("serve", "--db", str(db), "--port", str(taken.port), timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"sidecar: error: cannot listen on 127.0.0.1:{taken.port}: Address already in use"
    ]
    assert not db.exists()  # refused before the store was opened or a target sampled
    assert sidecar("serve", "--port", "70000", timeout=30).returncode == 2


def test_untraceable_process_is_reported_then_marked_gone(
    spawn: Spawner, serve: Any, tmp_path: Path
) -> None:
    fake = tmp_path / "python3"  # named like an interpreter, but it is not one
    fake.write_bytes(Path("/bin/sleep").read_bytes())
    fake.chmod(0o755)
    popen = spawn.command(str(fake), "60")
    db = tmp_path / "fake.db"
    server = serve(pids=(popen.pid,), db=db)

    def problem() -> str | None:
        targets = server.targets()
        return targets[0]["problem"] if targets else None

    assert wait_until(lambda: bool(problem()), timeout=20), server.targets()
    assert "Python" in (problem() or "")
    assert server.json("/healthz")["status"] == "degraded"
    popen.kill()
    popen.wait()

    def gone_in_db() -> bool:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT alive FROM processes").fetchall() == [(0,)]
        finally:
            conn.close()

    assert wait_until(gone_in_db, timeout=20)
    assert not server.targets()[0]["alive"] and server.targets()[0]["problem"] is None
    # no longer a problem, but a PID asked for that is gone: still degraded, and why
    health = server.json("/healthz")
    assert health["status"] == "degraded" and not health["problems"], health
    assert [(m["pid"], m["reason"]) for m in health["missing"]] == [(popen.pid, "it exited")]


def test_a_target_whose_reads_tear_is_named_in_the_log_until_they_stand(
    spawn: Spawner, serve: Any
) -> None:
    """``targets/chunks.py`` changes its 100-700-frame stack faster than a read for 8 s (about
    a third of the ticks here read no sample), then sleeps. serve's log says so of its PID,
    judged 1,000 ticks at a time, with ``--blocking`` as the way out; then that its reads
    stand again."""
    target = spawn.target("chunks", "--seconds", "8", "--settle", "0", "--rest", "60")
    server = serve("--rate", "200", pids=(target.pid,))

    def lines(text: str) -> list[str]:
        return [line for line in server.log_text().splitlines() if text in line]

    assert wait_until(lambda: lines("under-counted"), timeout=30), server.log_text()[-3000:]
    torn = lines("under-counted")
    assert len(torn) == 1 and f"PID {target.pid}: " in torn[0], torn
    assert "ticks read no sample" in torn[0] and "--blocking" in torn[0], torn
    assert wait_until(lambda: lines("reads stand again"), timeout=30), server.log_text()[-3000:]
    assert f"PID {target.pid}: " in lines("reads stand again")[0]
    assert len(lines("under-counted")) == 1
