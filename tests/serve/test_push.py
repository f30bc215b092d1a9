"""``sidecar serve --push`` against a real Grafana Pyroscope (tests/support/pyroscope.py): what
arrives, with which labels and counts; an outage and the backlog after it; a server that hangs
or rejects everything costs sampling and storing nothing."""

from __future__ import annotations

import http.server
import json
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.rules.frames import STATES
from sidecar.serve.push import Client, Pusher, endpoint
from sidecar.store import ProcessRecord, WindowBatch
from sidecar.store.query import Range, Reader
from sidecar.store.taskquery import TaskReader
from tests.support.batches import window_batch
from tests.support.helpers import LoadDriver, Serve, Spawner, wait_until
from tests.support.pyroscope import PERIOD_NS, Pyroscope, build, wait_pushed

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
WALL = "wall:wall:nanoseconds:wall:nanoseconds"
TASKS = "asyncio_tasks:wall:nanoseconds:wall:nanoseconds"


@pytest.fixture(scope="module")
def pyroscope_binary() -> Path:
    return build()


@pytest.fixture(scope="module")
def pyroscope(
    pyroscope_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pyroscope]:
    """One server for the module (it takes ~16 s to be ready): each test pushes under a service
    name of its own and queries only that."""
    server = Pyroscope(pyroscope_binary, tmp_path_factory.mktemp("pyroscope"))
    server.start()
    yield server
    server.stop()


def pushing(db: Path, pid: int, url: str, *args: str) -> Serve:
    return Serve(db, "--window", "1", "--pid", str(pid), "--push", url, *args)


def stored(db: Path, start: int, end: int, states: set[str] | None = None) -> int:
    """Samples sidecar's own database holds for windows starting in [start, end)."""
    return Reader(db, 1).profile(None, Range(start, end), states).total


def stored_span(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        low, high = conn.execute("SELECT MIN(window), MAX(window) FROM windows").fetchone()
    return int(low), int(high) + 1


def health(server: Serve) -> dict[str, Any]:
    _status, body, _ = server.request("/healthz")
    doc: dict[str, Any] = json.loads(body)
    return doc


def test_windows_arrive_with_their_states_and_the_stores_counts(
    spawn: Spawner, load: LoadDriver, pyroscope: Pyroscope, tmp_path: Path
) -> None:
    target = spawn.target("aiohttp_app")
    load.start(target.url + "/blocking", seconds=40, connections=2)
    # the loop's own work between blocking calls is about 0.5 % of its samples (2-7 of 800 in
    # 8 s here; a CI run once stored none): 8 ms of pure Python a /cpu request gives the busy
    # state samples to compare by (about 7 % of the loop's)
    load.start(target.url + "/cpu?repeat=2000", seconds=40, connections=1)
    db = tmp_path / "s.db"
    server = pushing(db, target.pid, pyroscope.url, "--service-name", "shop")
    assert wait_until(lambda: health(server)["push"]["pushed_windows"] >= 6, timeout=40), health(
        server
    )
    assert server.stop() == 0  # flushes both sinks
    start, end = stored_span(db)
    selector = '{service_name="shop"}'

    # every window sampled is in Pyroscope, with the same counts as in sidecar's database
    def same_counts() -> bool:
        wall = pyroscope.total(WALL, selector, start, end)
        return wall == stored(db, start, end) * PERIOD_NS

    assert wait_pushed(same_counts), (
        pyroscope.total(WALL, selector, start, end) // PERIOD_NS,
        stored(db, start, end),
    )
    cpu = pyroscope.total(CPU, selector, start, end)
    assert cpu == stored(db, start, end, {"busy"}) * PERIOD_NS > 0
    for state in ("blocked", "idle"):
        one = f'{{service_name="shop", state="{state}"}}'
        assert pyroscope.total(WALL, one, start, end) == stored(db, start, end, {state}) * PERIOD_NS
    # the blocking call is where the blocked time went; the handler is there
    blocked = pyroscope.names(WALL, '{service_name="shop", state="blocked"}', start, end)
    assert any(name.startswith("blocking_sleep") for name in blocked), sorted(blocked)[:40]
    assert any(name.startswith("blocking_handler") for name in blocked)
    assert "[blocked]" in blocked
    assert "[idle]" in pyroscope.names(WALL, '{service_name="shop", state="idle"}', start, end)
    # the series say what the target is
    assert pyroscope.label_values("framework", selector, start, end) == {"aiohttp"}
    assert pyroscope.label_values("loop", selector, start, end) == {"asyncio"}
    assert pyroscope.label_values("state", selector, start, end) >= {"busy", "blocked", "idle"}
    threads = pyroscope.label_values("thread_name", selector, start, end)
    assert {"MainThread", "pretend-service"} <= threads
    versions = pyroscope.label_values("python_version", selector, start, end)
    assert len(versions) == 1 and next(iter(versions)).startswith("3.")


def test_a_loop_starved_of_the_gil_arrives_as_state_gil(
    spawn: Spawner, pyroscope: Pyroscope, tmp_path: Path
) -> None:
    """A loop starved of the GIL by a crunching thread (targets/gil.py): the waits for the
    GIL arrive in ``wall`` labelled state="gil", ending in [gil], as many as the store kept,
    most of them the loop's; a loop that collects garbage beside it sends its [gc] frames in
    ``process_cpu``."""
    starved = spawn.target("gil", "--holder", "spin")
    collector = spawn.target("gil", "--gc")
    db = tmp_path / "s.db"
    server = Serve(
        db,
        "--window",
        "1",
        *("--pid", str(starved.pid), "--pid", str(collector.pid)),
        *("--push", pyroscope.url, "--service-name", "hog"),
    )
    assert wait_until(lambda: health(server)["push"]["pushed_windows"] >= 8, timeout=40)
    assert server.stop() == 0
    start, end = stored_span(db)
    gil = '{service_name="hog", state="gil"}'
    waited = stored(db, start, end, {"gil"})
    assert waited > 0
    assert wait_pushed(lambda: pyroscope.total(WALL, gil, start, end) == waited * PERIOD_NS), (
        pyroscope.total(WALL, gil, start, end) // PERIOD_NS,
        waited,
    )
    assert "[gil]" in pyroscope.names(WALL, gil, start, end)
    # the loops waited (and the spinning thread, in the instants a loop held the GIL)
    waiters = pyroscope.label_values("thread_name", gil, start, end)
    assert "MainThread" in waiters and waiters <= {"MainThread", "holder"}, waiters
    loops = Reader(db, 1).profile(None, Range(start, end), {"gil"}, "MainThread").total
    main = '{service_name="hog", state="gil", thread_name="MainThread"}'
    assert pyroscope.total(WALL, main, start, end) == loops * PERIOD_NS > waited * PERIOD_NS / 2
    assert "gil" in pyroscope.label_values("state", '{service_name="hog"}', start, end)

    # two processes under one service name, each its own series: none of their windows lost
    # (Pyroscope keeps one of a series' profiles that share a timestamp: under the same labels,
    # the windows of one of the two were missing from queries)
    hog = '{service_name="hog"}'
    assert wait_pushed(
        lambda: pyroscope.total(WALL, hog, start, end) == stored(db, start, end) * PERIOD_NS
    ), (pyroscope.total(WALL, hog, start, end) // PERIOD_NS, stored(db, start, end))
    assert pyroscope.total(CPU, hog, start, end) == stored(db, start, end, {"busy"}) * PERIOD_NS
    assert pyroscope.label_values("pid", hog, start, end) == {str(starved.pid), str(collector.pid)}
    cpu = pyroscope.names(CPU, hog, start, end)
    assert "[gc]" in cpu and any(name.startswith("spin") for name in cpu), sorted(cpu)


def test_an_outage_is_sent_when_pyroscope_is_back(
    spawn: Spawner, pyroscope: Pyroscope, tmp_path: Path
) -> None:
    target = spawn.target("tornado_app")
    db = tmp_path / "s.db"
    server = pushing(db, target.pid, pyroscope.url, "--service-name", "outage")
    assert wait_until(lambda: health(server)["push"]["pushed_windows"] >= 2, timeout=40)
    pyroscope.stop()
    down_at = int(time.time()) + 1
    # while it is down: windows are stored, the push backlog grows, the retries are counted
    assert wait_until(
        lambda: health(server)["push"]["retries"] >= 2 and health(server)["push"]["backlog"] >= 5,
        timeout=60,
    ), health(server)
    doc = health(server)
    assert doc["status"] == "degraded" and doc["push"]["pushing"] is False
    assert doc["push"]["last_error"]
    pyroscope.start()
    up_at = int(time.time())
    assert wait_until(lambda: health(server)["push"]["backlog"] == 0, timeout=90), health(server)
    after = health(server)["push"]
    assert after["pushing"] is True and sum(after["given_up"].values()) == 0
    assert server.stop() == 0
    _, end = stored_span(db)
    selector = '{service_name="outage"}'
    # the windows sampled during the outage arrived, as many samples as the store kept
    outage = stored(db, down_at, up_at)
    assert outage > 0
    assert wait_pushed(
        lambda: pyroscope.total(WALL, selector, down_at, up_at) == outage * PERIOD_NS
    ), [
        (t, pyroscope.total(WALL, selector, t, t + 1) // PERIOD_NS, stored(db, t, t + 1))
        for t in range(down_at - 3, end)
    ]
    assert wait_pushed(
        lambda: (
            pyroscope.total(WALL, selector, down_at, end) == stored(db, down_at, end) * PERIOD_NS
        )
    )


def test_task_windows_arrive_as_asyncio_tasks_with_the_stores_counts(
    spawn: Spawner, load: LoadDriver, pyroscope: Pyroscope, tmp_path: Path
) -> None:
    """With task scans on (20 Hz here), each window's tasks go out as a third profile type,
    ``asyncio_tasks``: one scan period of wall time per task-sample, labelled with the task's
    state and kind (a request's with its route), the totals those of the store."""
    target = spawn.target("aiohttp_app")
    load.start(target.url + "/stages", seconds=40, connections=4)
    db = tmp_path / "s.db"
    server = pushing(db, target.pid, pyroscope.url, "--service-name", "tasks", "--task-rate", "20")
    assert wait_until(lambda: health(server)["push"]["pushed_windows"] >= 4, timeout=40)
    assert server.stop() == 0
    start, end = stored_span(db)
    scan_ns = 1_000_000_000 // 20
    selector = '{service_name="tasks"}'

    def stored_tasks(which: str = "all", states: set[str] | None = None) -> int:
        return TaskReader(Reader(db, 1)).profile(None, Range(start, end), states, which).total

    assert stored_tasks() > 0
    assert wait_pushed(
        lambda: pyroscope.total(TASKS, selector, start, end) == stored_tasks() * scan_ns
    ), (
        pyroscope.total(TASKS, selector, start, end) // scan_ns,
        stored_tasks(),
    )
    assert pyroscope.label_values("task", selector, start, end) == {"request", "background"}
    requests = pyroscope.total(TASKS, '{service_name="tasks", task="request"}', start, end)
    assert requests == stored_tasks("requests") * scan_ns > 0
    states = pyroscope.label_values("state", selector, start, end)
    assert "waiting" in states and states <= {"running", "ready", "waiting"} | set(STATES)
    waiting = pyroscope.total(TASKS, '{service_name="tasks", state="waiting"}', start, end)
    assert waiting == stored_tasks(states={"waiting"}) * scan_ns
    # the requests' await chains: the handler and the awaits it is parked on
    names = pyroscope.names(TASKS, '{service_name="tasks", task="request"}', start, end)
    assert {"stages_handler", "fetch", "[waiting]"} <= {n.split(" (")[0] for n in names}, names
    # each request's samples carry its route: those of GET /stages are nearly all of them
    assert "GET /stages" in pyroscope.label_values("route", selector, start, end)
    routed = pyroscope.total(TASKS, '{service_name="tasks", route="GET /stages"}', start, end)
    assert 0.9 * requests <= routed <= requests, (routed, requests)


class _Hanging:
    """Accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()
        self.sock.close()


class _Rejecting(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = b'{"code":"invalid_argument","message":"no thanks"}'
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def windows_in(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM windows").fetchone()[0])


def test_a_hanging_or_rejecting_server_holds_up_neither_sampling_nor_storing(
    spawn: Spawner, tmp_path: Path
) -> None:
    target = spawn.target("spin")
    hanging = _Hanging()
    rejecting = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Rejecting)
    threading.Thread(target=rejecting.serve_forever, daemon=True).start()
    stopping: list[Serve] = []
    try:
        for name, url in (
            ("hanging", f"http://127.0.0.1:{hanging.port}"),
            ("rejecting", f"http://127.0.0.1:{rejecting.server_address[1]}"),
        ):
            db = tmp_path / f"{name}.db"
            server = pushing(db, target.pid, url)
            # the store writes window after window while the push cannot get through
            assert wait_until(lambda: windows_in(db) >= 8, timeout=60), (name, health(server))  # noqa: B023
            doc = health(server)
            push = doc["push"]
            assert doc["store"]["writing"] and doc["store"]["dropped_windows"] == 0
            assert push["pushed_windows"] == 0, name
            if name == "hanging":
                # stuck in its first request: everything since is queued, nothing given up
                assert push["backlog"] >= 5 and sum(push["given_up"].values()) == 0
            else:
                assert wait_until(lambda: health(server)["push"]["given_up"]["rejected"] >= 5)  # noqa: B023
                assert "HTTP 400" in health(server)["push"]["last_error"]
                assert "no thanks" in health(server)["push"]["last_error"]
            _status, text, _ = server.request("/metrics")
            metrics = text.decode()
            assert "sidecar_sampler_dropped_windows_total 0.0" in metrics
            assert "sidecar_push_windows_pushed_total 0.0" in metrics
            start, end = stored_span(db)
            samples = stored(db, start, end)
            # each stored window holds its second of samples: sampling went on at its rate
            assert samples >= 0.5 * 100 * windows_in(db), (name, samples, windows_in(db))
            # a stop waits out the push under way, up to its 10 s of trying: the next server
            # starts meanwhile, and each one's exit is checked at the end
            server.popen.send_signal(signal.SIGTERM)
            stopping.append(server)
        for server in stopping:
            assert server.popen.wait(timeout=30) == 0
    finally:
        hanging.close()
        rejecting.shutdown()
        rejecting.server_close()


#: (path, headers, body size) of each push the recording server took.
SEEN: list[tuple[str, dict[str, str], int]] = []


class _Recording(http.server.BaseHTTPRequestHandler):
    """Accepts every push and keeps what came with it."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        SEEN.append((self.path, dict(self.headers), len(body)))
        self.send_response(200)
        self.send_header("Content-Type", "application/proto")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("secret", "authorization"),
    [("s3cr3t-token", "Bearer s3cr3t-token"), ("12345:glc_abc", "Basic MTIzNDU6Z2xjX2FiYw==")],
)
def test_credentials_and_tenant_go_with_each_push(
    spawn: Spawner, tmp_path: Path, secret: str, authorization: str
) -> None:
    target = spawn.target("spin")
    SEEN.clear()
    recording = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recording)
    threading.Thread(target=recording.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text(secret + "\n")
    try:
        url = f"http://127.0.0.1:{recording.server_address[1]}/prefix/"
        server = pushing(
            tmp_path / "c.db",
            target.pid,
            url,
            "--push-token-file",
            str(token),
            "--push-tenant",
            "t1",
        )
        assert wait_until(lambda: health(server)["push"]["pushed_windows"] >= 2, timeout=40)
        doc = health(server)["push"]
        assert doc["url"] == f"http://127.0.0.1:{recording.server_address[1]}/prefix"
        assert secret not in json.dumps(doc)
        assert server.stop() == 0
    finally:
        recording.shutdown()
        recording.server_close()
    path, headers, size = SEEN[0]
    assert path == "/prefix/push.v1.PusherService/Push" and size > 0
    assert headers["Authorization"] == authorization
    assert headers["X-Scope-OrgID"] == "t1"
    assert headers["Content-Type"] == "application/proto"
    assert headers["Connect-Protocol-Version"] == "1"


def _window(start: float) -> WindowBatch:
    return window_batch((7, 7), int(start), 1, 100, [("main (app.py:1)", 7, "busy", 100)], {})


def test_the_backlog_is_bounded_and_too_old_windows_are_not_sent(tmp_path: Path) -> None:
    hanging = _Hanging()
    SEEN.clear()
    recording = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recording)
    threading.Thread(target=recording.serve_forever, daemon=True).start()
    record = ProcessRecord(7, 7, "python -m app", time.time(), "aiohttp", "asyncio", "3.11.7")
    try:
        # a server that never answers: the first request hangs, the rest queue up to the bound
        stuck = Pusher(
            Client(endpoint(f"http://127.0.0.1:{hanging.port}", timeout=30)),
            rate_hz=100,
            max_backlog=5,
        )
        stuck.start()
        stuck.submit(record)
        now = time.time()
        for n in range(12):
            stuck.submit(_window(now - 12 + n))
        assert wait_until(lambda: stuck.health.given_up["overflow"] >= 6, timeout=10)
        assert stuck.health.backlog <= 5
        stuck.stop(timeout=0.5)
        given_up = stuck.health.given_up
        assert given_up["overflow"] + given_up["shutdown"] == 12 - stuck.health.pushed_windows
        # windows older than Pyroscope accepts are dropped, not sent; the fresh one goes
        pusher = Pusher(
            Client(endpoint(f"http://127.0.0.1:{recording.server_address[1]}")), rate_hz=100
        )
        pusher.submit(record)
        pusher.submit(_window(time.time() - 2 * 3600))
        pusher.submit(_window(time.time() - 2))
        pusher.start()
        assert wait_until(lambda: pusher.health.pushed_windows == 1, timeout=10)
        pusher.stop(timeout=2)
        assert pusher.health.given_up["expired"] == 1 and len(SEEN) == 1
    finally:
        hanging.close()
        recording.shutdown()
        recording.server_close()
