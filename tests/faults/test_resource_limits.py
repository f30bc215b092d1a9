"""Limits of the machine under a running ``sidecar serve``: a database at its --max-db-size
cap, with its WAL, in normal running; clients that hold connections open without a request,
or with half its headers; clients that would take every file descriptor it may open.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faultkit import Entry, integrity, record, window_ticks
from tests.support.helpers import NO_TARGET, Serve, Servers, Spawner, wait_until

pytestmark = pytest.mark.faults

#: The cap of the capped database: small, so that stacks that never repeat reach it in seconds.
CAP = 1 << 20
#: /healthz polls at the cap.
POLLS = 30


def on_disk(db: Path) -> int:
    """The database file and its WAL, as the disk holds them now."""
    total = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(FileNotFoundError):
            total += os.path.getsize(f"{db}{suffix}")
    return total


def test_a_database_at_its_cap_with_its_wal_stays_under_it_and_healthy(
    spawn: Spawner, sidecars: Servers, tmp_path: Path
) -> None:
    """--max-db-size bounds the database file and its WAL together; evicting the oldest
    windows at the cap is what the cap is for, not a write error, and /healthz says "ok"
    all along in normal running at the cap. Stacks that never repeat fill 1 MiB in seconds."""
    fresh = spawn.target("generated", "--threads", "2")
    db = tmp_path / "capped.db"
    server = sidecars(db, "--window", "1", "--rate", "200", "--max-db-size", "1M", "--pid",
                      str(fresh.pid))  # fmt: skip
    assert wait_until(lambda: server.health()["store"]["evicted_windows"] >= 3, timeout=90), (
        server.health()
    )
    statuses: list[str] = []
    sizes: list[int] = []
    errors: list[int] = []
    for _ in range(POLLS):
        health = server.health()
        statuses.append(health["status"])
        sizes.append(health["store"]["size_bytes"])
        errors.append(health["store"]["write_errors"])
        time.sleep(0.5)
    store = server.health()["store"]
    written = server.metric("sidecar_store_windows_written_total")
    assert statuses == ["ok"] * POLLS, (statuses, server.health())
    assert max(errors) == 0, store
    assert max(sizes) <= CAP, sizes
    assert store["evicted_windows"] > 3 and store["dropped_windows"] == 0, store
    assert server.stop() == 0
    assert on_disk(db) <= CAP, on_disk(db)
    assert integrity(db) == "ok"
    entry = Entry("a database at its size cap, with its WAL", "storage faults", rounds=POLLS)
    entry.fault("database at --max-db-size 1M", store["evicted_windows"])
    entry.note(
        f"{store['evicted_windows']:.0f} windows evicted at the cap and {written:.0f} written, "
        f"no write error, {POLLS} of {POLLS} polls ok; the file and its WAL at most "
        f"{max(sizes) / CAP:.0%} of the cap"
    )
    record(entry)


# -- HTTP connections -----------------------------------------------------------------------

#: --header-timeout of the server that tests it: small, to keep the test short.
HEADER_TIMEOUT = 1.0
#: Connections of each kind held open against it.
HELD = 60


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setblocking(False)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """The server closed (or reset) the connection: a read returns end of file."""
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def wait_closed(socks: list[socket.socket], bound: float) -> list[socket.socket]:
    """Waits up to ``bound`` seconds for the server to close each of ``socks``; those still
    open then."""
    open_ = list(socks)
    deadline = time.monotonic() + bound
    while open_ and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select(open_, [], [], left)
        open_ = [sock for sock in open_ if sock not in ready or not closed_by_server(sock)]
    return open_


def test_connections_that_send_no_or_half_their_headers_are_closed(
    sidecars: Servers, tmp_path: Path
) -> None:
    """uvicorn has no timeout for reading a request's headers: 900 half-open connections were
    held 40 s, none closed. With --header-timeout, a connection that sends nothing, half the
    headers of its request, or half those of its next request after a full one is closed by
    the server within three times the timeout; a full request is answered all along."""
    server = sidecars(tmp_path / "http.db", "--window", "1", *NO_TARGET, "--header-timeout",
                      str(HEADER_TIMEOUT), "--max-connections", "400")  # fmt: skip
    silent = [connect(server.port) for _ in range(HELD)]
    partial = [connect(server.port) for _ in range(HELD)]
    for sock in partial:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1")
    again = []
    for _ in range(HELD // 6):  # a full request answered, then half of the next one
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "no answer to a full request"
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 1")
        sock.setblocking(False)
        again.append(sock)
    try:
        assert server.status("/healthz") == 200  # held connections take nobody's turn
        still_open = wait_closed(silent + partial + again, 3 * HEADER_TIMEOUT)
        assert not still_open, f"{len(still_open)} of {len(silent + partial + again)} still open"
        http = server.health()["http"]
        assert http["timed_out"] >= len(silent + partial + again), http
        assert http["header_timeout"] == HEADER_TIMEOUT
    finally:
        for sock in silent + partial + again:
            sock.close()
    refused = sidecar_refuses("--header-timeout", "0") + sidecar_refuses("--max-connections", "0")
    entry = Entry("connections that send no or half their headers", "hostile HTTP input")
    entry.rounds = 1
    entry.inputs = len(silent + partial + again) + refused
    entry.fault("connection held open without a request", len(silent))
    entry.fault("connection held open with half its headers", len(partial) + len(again))
    entry.note(
        f"{len(silent + partial + again)} connections held with --header-timeout "
        f"{HEADER_TIMEOUT:g}: every one closed by the server within {3 * HEADER_TIMEOUT:g} s"
    )
    record(entry)


def sidecar_refuses(*args: str) -> int:
    """A bad value of a limit is refused in one line, exit 2, before anything starts."""
    from tests.support.helpers import sidecar

    result = sidecar("serve", "--port", "0", "--db", "/nonexistent/x.db", *args, timeout=30)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and args[0] in lines[0], result.stderr
    return 1


# -- file descriptors -----------------------------------------------------------------------

#: Connections held open at once against the sampling server: more than its open-files limit.
CONNECTIONS = 400
#: serve's open-files limit in the first test (as ``ulimit -n 256`` gives it), and in the
#: second one, under what its connection cap (100) and its own files need.
LIMIT = 256
TIGHT = 96


@pytest.fixture(scope="module")
def sampling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, int]]:
    """One sidecar sampling one service at 100 Hz in 1 s windows, for the module."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < CONNECTIONS + 100:
        pytest.skip(f"the tests hold {CONNECTIONS} connections: the hard limit is {hard}")
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    workdir = tmp_path_factory.mktemp("descriptors")
    spawner = Spawner()
    started: Serve | None = None
    try:
        target = spawner.target("aiohttp_app")
        started = Serve(workdir / "fds.db", "--window", "1", "--rate", "100", "--pid",
                        str(target.pid))  # fmt: skip
        assert wait_until(lambda: len(window_ticks(started.db)) >= 3, timeout=30)
        yield started, target.pid
    finally:
        if started is not None:
            started.kill()
        spawner.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def hold(port: int, count: int) -> list[socket.socket]:
    """``count`` connections to ``port`` that send nothing (some may be refused)."""
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect(("127.0.0.1", port))
        socks.append(sock)
    return socks


def per_window(db: Path) -> dict[int, int]:
    ticks: dict[int, int] = {}
    for (window, _, _), n in window_ticks(db).items():
        ticks[window] = ticks.get(window, 0) + n
    return ticks


def test_clients_cannot_take_the_descriptors_sampling_needs(
    sampling: tuple[Serve, int],
) -> None:
    """Under an open-files limit of 256 (``ulimit -n 256``), 400 connections held open used to
    take every descriptor: samples were lost, the session started again and again, /healthz
    said "ok". HTTP connections are capped below the limit now (100): the rest are closed as
    they come, the descriptors in use stay under the limit, every window keeps its samples,
    the process is sampled by one session throughout, and /healthz says how many were
    closed."""
    server, _ = sampling
    pid = server.popen.pid
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
    before = per_window(server.db)
    usual = sorted(before.values())[len(before) // 2]
    socks = hold(server.port, CONNECTIONS)
    in_use: list[int] = []
    try:

        def windows_during() -> bool:
            in_use.append(open_fds(pid))
            return len(set(per_window(server.db)) - set(before)) >= 6

        assert wait_until(windows_during, timeout=40), per_window(server.db)
    finally:
        for sock in socks:
            sock.close()
    during = {w: n for w, n in per_window(server.db).items() if w not in before}
    # the first window may have begun before the connections came; the last may be partial
    full = [during[w] for w in sorted(during)[1:-1]]
    assert min(full) >= 0.8 * usual, (usual, during)
    assert max(in_use) < LIMIT - 16, in_use
    health = server.health()
    assert health["http"]["refused"] >= CONNECTIONS - health["http"]["max_connections"], health
    assert health["http"]["max_connections"] == 100
    log = server.log_text()
    assert log.count("sampling PID") == 1, log
    assert "HTTP connections at once, the most allowed" in log
    entry = Entry("clients holding every connection they can", "hostile HTTP input", rounds=1)
    entry.fault(f"connections held open under ulimit -n {LIMIT}", CONNECTIONS)
    entry.note(
        f"{CONNECTIONS} connections held under an open-files limit of {LIMIT}: "
        f"{health['http']['refused']} closed at the cap of {health['http']['max_connections']}, "
        f"at most {max(in_use)} descriptors in use, windows of {min(full)}-{max(full)} samples "
        f"(usually {usual})"
    )
    record(entry)


def test_out_of_descriptors_is_said_once_and_degrades_health_while_it_lasts(
    sampling: tuple[Serve, int],
) -> None:
    """With the limit under what the connection cap and serve's own files need, clients do
    take every descriptor: serve notices, says so in one WARNING line (not one per failure),
    /healthz reads "degraded" with the reason, "ok" again once descriptors are free; the
    process stays sampled by the same session."""
    server, _ = sampling
    pid = server.popen.pid
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (TIGHT, TIGHT))
    socks = hold(server.port, CONNECTIONS)
    try:
        # out of them: serve's open descriptors reach its limit (a scan of /proc, samples,
        # writes and accepts fail meanwhile)
        assert wait_until(lambda: open_fds(pid) >= TIGHT - 1, timeout=30), open_fds(pid)
        wait_until(lambda: "out of file descriptors" in server.log_text(), timeout=10)
    finally:
        for sock in socks:
            sock.close()
    health = server.health()
    descriptors = health["descriptors"]
    assert health["status"] == "degraded", health
    assert descriptors["exhausted"] and descriptors["limit"] == TIGHT, descriptors
    assert "out of file descriptors" in descriptors["reason"], descriptors
    assert wait_until(lambda: server.health()["status"] == "ok", timeout=60), server.health()
    # said at the session loop's next count of them after it ended
    assert wait_until(lambda: "descriptors available again" in server.log_text(), timeout=10)
    log = server.log_text()
    warnings = [line for line in log.splitlines() if "WARNING" in line and "out of file" in line]
    assert len(warnings) == 1, warnings
    assert log.count("sampling PID") == 1, log
    entry = Entry("out of file descriptors", "hostile HTTP input", rounds=1)
    entry.fault(f"connections held open under ulimit -n {TIGHT}", CONNECTIONS)
    entry.note(
        f"{descriptors['failures']} failures for want of descriptors, said in one WARNING "
        "line; /healthz degraded with the reason meanwhile, ok after; one session throughout"
    )
    record(entry)
