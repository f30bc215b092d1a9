"""Pre-fork servers under ``sidecar serve``: a real gunicorn (its arbiter, two aiohttp workers
of each worker class) and Tornado's ``fork_processes``. The master is listed as the master, in
the group of its workers, and the framework's loop shares are exactly those of the workers."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright
from prometheus_client.parser import text_string_to_metric_families

from sidecar.serve.push.series import service_name
from tests.support.helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PYTHON,
    ROOT,
    LoadDriver,
    Serve,
    Spawner,
    free_port,
    sidecar,
    wait_until,
)

pytestmark = pytest.mark.slow
WORKERS = 2


def forked_children(pid: int) -> list[int]:
    """Children of ``pid`` that run its command line (forked, not exec'd); under a gunicorn
    arbiter titled ``gunicorn: master [NAME]`` (setproctitle), its ``gunicorn: worker [NAME]``."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        own = Path(f"/proc/{pid}/cmdline").read_bytes()
        same = {own, own.replace(b"gunicorn: master [", b"gunicorn: worker [", 1)}
        for tid in os.listdir(f"/proc/{pid}/task"):
            for child in Path(f"/proc/{pid}/task/{tid}/children").read_text().split():
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{child}/cmdline").read_bytes() in same:
                        found.append(int(child))
    return sorted(found)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def gunicorn(spawn: Spawner, tmp: Path, worker_class: str) -> tuple[int, list[int], str]:
    """A gunicorn arbiter with two aiohttp workers on a free loopback port: (master PID,
    worker PIDs, base URL). Its control socket (gunicorn runs an asyncio loop in a thread of the
    arbiter for it) lives in ``tmp``. setproctitle is installed, as in most deployments: the
    processes are titled ``gunicorn: master [NAME]`` / ``gunicorn: worker [NAME]``, and NAME
    (the path of ``tmp``) marks them for ``--match``."""
    port = free_port()
    master = spawn.command(
        PYTHON,
        "-m",
        "gunicorn",
        "targets.aiohttp_app:make_app()",
        "--chdir",
        str(ROOT),
        "--workers",
        str(WORKERS),
        "--worker-class",
        worker_class,
        "--bind",
        f"127.0.0.1:{port}",
        "--control-socket",
        str(tmp / f"{worker_class}.ctl"),
        "--name",
        str(tmp / worker_class),
    )
    url = f"http://127.0.0.1:{port}"
    assert wait_until(lambda: len(forked_children(master.pid)) == WORKERS, timeout=30)
    assert wait_until(lambda: answers(url + "/health"), timeout=30)
    return master.pid, forked_children(master.pid), url


def stats_of(server: Serve) -> dict[str, Any]:
    doc: dict[str, Any] = server.json("/api/stats")
    return doc


def check_framework_is_its_workers(
    doc: dict[str, Any], framework: str, masters: set[int], workers: set[int]
) -> None:
    """The framework's samples and shares are the workers' own, the masters' left out."""
    rows = {row["pid"]: row for row in doc["targets"]}
    assert masters | workers <= set(rows), (sorted(rows), masters, workers)
    for pid in masters:
        assert rows[pid]["role"] == "master"
    for pid in workers:
        assert rows[pid]["role"] == "worker" and rows[pid]["framework"] == framework
    mine = [rows[pid] for pid in workers]
    merged = doc["frameworks"][framework]
    total = sum(row["samples"] for row in mine)
    assert total > 0, doc
    assert merged["samples"] == total, json.dumps(doc)
    # no process of this framework other than the workers counts in its shares
    others = [
        row for row in doc["targets"] if row["framework"] == framework and row["pid"] not in workers
    ]
    assert all(row["role"] == "master" for row in others), others
    for state in ("busy", "idle", "blocked"):
        weighted = sum(row[f"{state}_share"] * row["samples"] for row in mine) / total
        # the rows' shares are rounded to 4 places: their weighted mean within that
        assert abs(merged[f"{state}_share"] - weighted) <= 1e-4, (state, merged, mine)
    depth_max = max((row["depth"]["max"] or 0) for row in mine)
    assert merged["depth"]["max"] == (depth_max or None)


def wait_sampled_through_the_load(server: Serve, pids: set[int], load: LoadDriver) -> None:
    """Until every one of ``pids`` has samples, then until every load run is over."""

    def all_sampled() -> bool:
        rows = {row["pid"]: row for row in server.targets()}
        return all(rows.get(pid, {}).get("samples", 0) > 0 for pid in pids)

    assert wait_until(all_sampled, timeout=40), server.targets()
    assert wait_until(lambda: all(r.popen.poll() is not None for r in load.runs), timeout=20)


def test_gunicorn_master_and_aiohttp_workers(
    spawn: Spawner, load: LoadDriver, serve: Callable[..., Serve], tmp_path: Path
) -> None:
    servers = {
        kind: gunicorn(spawn, tmp_path, kind)
        for kind in ("aiohttp.GunicornWebWorker", "aiohttp.GunicornUVLoopWebWorker")
    }
    masters = {master for master, _, _ in servers.values()}
    workers = {pid for _, pids, _ in servers.values() for pid in pids}
    server = serve("--match", str(tmp_path))
    try:
        for _, _, url in servers.values():
            load.start(url + "/cpu?repeat=20", seconds=8, connections=2)
        wait_sampled_through_the_load(server, masters | workers, load)

        targets = {row["pid"]: row for row in server.targets()}
        for kind, (master, pids, _) in servers.items():
            group = targets[master]["group"]
            assert targets[master]["role"] == "master"
            loop = "uvloop" if "UVLoop" in kind else "asyncio"
            for pid in pids:
                assert targets[pid]["role"] == "worker" and targets[pid]["group"] == group
                assert targets[pid]["framework"] == "aiohttp" and targets[pid]["loop"] == loop
        assert len({targets[m]["group"] for m in masters}) == len(masters)
        for kind, (master, pids, _) in servers.items():
            # titled by setproctitle: master and workers push as one service, gunicorn's --name
            names = {service_name(targets[pid]["cmdline"]) for pid in (master, *pids)}
            assert names == {str(tmp_path / kind)}, [targets[p]["cmdline"] for p in pids]

        doc = stats_of(server)
        check_framework_is_its_workers(doc, "aiohttp", masters, workers)
        rows = {row["pid"]: row for row in doc["targets"]}
        # the arbiter's control-socket loop was sampled, and it would have counted
        assert all(rows[m]["samples"] > 0 for m in masters)
        # /metrics labels each process's loop shares with its role
        status, body, _ = server.request("/metrics")
        assert status == 200
        roles = {
            int(sample.labels["pid"]): sample.labels["role"]
            for family in text_string_to_metric_families(body.decode())
            if family.name == "sidecar_loop_share"
            for sample in family.samples
        }
        assert roles == {pid: "master" for pid in masters} | {pid: "worker" for pid in workers}
    finally:
        server.stop()

    master = next(iter(masters))
    done = sidecar("stats", "--pid", str(master), "--duration", "1", "--json")
    assert done.returncode == 0, done.stderr
    alone = json.loads(done.stdout)
    assert [row["role"] for row in alone["targets"]] == ["master"]
    assert alone["frameworks"] == {}
    done = sidecar("stats", "--pid", str(master), "--duration", "1")
    assert done.returncode == 0, done.stderr
    assert f"PID {master} (pre-fork master" in done.stdout.splitlines()[0]


def test_tornado_fork_processes(
    spawn: Spawner, load: LoadDriver, serve: Callable[..., Serve]
) -> None:
    parent = spawn.target("tornado_app", "--processes", str(WORKERS))
    assert wait_until(lambda: len(forked_children(parent.pid)) == WORKERS, timeout=30)
    children = forked_children(parent.pid)
    assert wait_until(lambda: answers(parent.url + "/health"), timeout=30)
    pids = [parent.pid, *children]
    server = serve(pids=tuple(pids))
    try:
        load.start(parent.url + "/cpu?repeat=20", seconds=8, connections=2)
        wait_sampled_through_the_load(server, set(pids), load)
        targets = {row["pid"]: row for row in server.targets()}
        assert targets[parent.pid]["role"] == "master"
        for pid in children:
            assert targets[pid]["role"] == "worker"
            assert targets[pid]["group"] == targets[parent.pid]["group"]
            assert targets[pid]["framework"] == "tornado"
        doc = stats_of(server)
        check_framework_is_its_workers(doc, "tornado", {parent.pid}, set(children))
        check_ui(f"http://127.0.0.1:{server.port}", parent.pid, children)
    finally:
        server.stop()
        for pid in children:  # the parent ends when its workers do
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def test_a_service_with_a_forked_process_pool_is_no_master(
    spawn: Spawner, load: LoadDriver, serve: Callable[..., Serve]
) -> None:
    """multiprocessing forks without exec too: the aiohttp service that owns a pool of forked
    workers serves the requests and counts in aiohttp's shares; neither it nor its pool's
    children get a pre-fork role."""
    service = spawn.target("aiohttp_app", "--pool", str(WORKERS))
    children = forked_children(service.pid)
    assert len(children) == WORKERS, children
    pids = [service.pid, *children]
    server = serve(pids=tuple(pids))
    try:
        load.start(service.url + "/offload?repeat=50", seconds=8, connections=2)
        load.start(service.url + "/sleep", seconds=8, connections=2)
        wait_sampled_through_the_load(server, set(pids), load)
        doc = stats_of(server)
        rows = {row["pid"]: row for row in doc["targets"]}
        assert [rows[pid]["role"] for pid in pids] == [None] * len(pids), doc["targets"]
        assert rows[service.pid]["framework"] == "aiohttp"
        # aiohttp's shares are the service's own: its pool's children run no event loop
        assert doc["frameworks"]["aiohttp"]["samples"] == rows[service.pid]["samples"], doc
    finally:
        server.stop()
    done = sidecar("stats", "--pid", str(service.pid), "--duration", "1", "--json")
    assert done.returncode == 0, done.stderr
    alone = json.loads(done.stdout)
    assert [row["role"] for row in alone["targets"]] == [None]
    assert set(alone["frameworks"]) == {"aiohttp"}


def check_ui(base: str, master: int, workers: list[int]) -> None:
    """The UI lists the master first with its role, its workers after it in its group, and the
    per-target table says which row is the master."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{base}/?range=300")
            page.locator('.target[data-role="master"]').wait_for()
            listed = page.eval_on_selector_all(
                ".target[data-id]:not([data-id=''])",
                "els => els.map(e => [e.dataset.role, e.querySelector('.t-meta').innerText,"
                " e.querySelector('.badge[data-role]')?.innerText ?? null])",
            )
            assert [role for role, _, _ in listed] == ["master"] + ["worker"] * len(workers)
            assert listed[0][1].startswith(f"PID {master}") and listed[0][2] == "master"
            assert "in no framework's shares" in listed[0][1]
            assert sorted(int(meta.split()[1]) for _, meta, _ in listed[1:]) == sorted(workers)
            assert all(badge == "worker" for _, _, badge in listed[1:])
            page.goto(f"{base}/?view=frameworks&range=300")
            page.wait_for_function(
                "() => document.querySelector('#frameworks')?.dataset.loading === '0'"
            )
            card = page.locator('.fw-card[data-framework="tornado"] .fw-head').inner_text()
            assert f"{len(workers)} targets" in card and "1 master left out" in card, card
            roles = page.eval_on_selector_all(
                "#fw-targets tbody tr",
                "rows => rows.map(r => [r.dataset.role, r.cells[0].innerText])",
            )
            assert sorted(roles) == sorted(
                [["master", str(master)]] + [["worker", str(pid)] for pid in workers]
            )
        finally:
            browser.close()
