"""Helpers for tests: start real targets, drive real load, run the real ``sidecar`` CLI and
``sidecar serve``. The process primitives they share with the benchmarks (ROOT, PYTHON,
stop_process, wait_until, free_port) come from ``procs`` and are importable from here too."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.procs import PYTHON, READY, ROOT, free_port, stop_process, wait_until

if TYPE_CHECKING:
    from sidecar._native import Window

REPORTS = ROOT / "tests" / "reports"
#: ``serve``'s arguments that select no process (a --match no command line matches): a PID
#: asked for must exist and run Python, or serve refuses it.
NO_TARGET = ("--match", "(?!)")
#: The browser of the UI tests (Debian's Chromium, driven by Playwright) and its flags.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass
class Proc:
    """A started target: its process, and its port when it is a server."""

    popen: subprocess.Popen[str]
    port: int | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 5.0) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
            data: bytes = response.read()
            return data

    def line(self, timeout: float = 10.0) -> str:
        """The next line it prints."""
        return _read_line(self.popen, timeout)


def _read_line(popen: subprocess.Popen[str], timeout: float) -> str:
    assert popen.stdout is not None
    ready, _, _ = select.select([popen.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError(f"target {popen.args} printed nothing within {timeout} s")
    return popen.stdout.readline()


class Spawner:
    """Starts processes for one test and makes sure none outlives it."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def target(
        self,
        module: str,
        *args: str,
        timeout: float = 20.0,
        python: str | Path = PYTHON,
        path: Path | None = None,
        prefix: Sequence[str] = (),
    ) -> Proc:
        """Starts ``python -m targets.MODULE ARGS`` and waits for its ready line; ``python`` is
        the interpreter, the venv's unless told, ``path`` a folder of packages for it, and
        ``prefix`` a command that runs it (one that ends by executing it, as ``setpriv``)."""
        env = {**os.environ, "PYTHONPATH": str(path)} if path is not None else None
        popen = subprocess.Popen(
            [*prefix, str(python), "-m", f"targets.{module}", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(popen)
        line = _read_line(popen, timeout)
        match = READY.search(line)
        if match:
            return Proc(popen, int(match[2])) if match[2] else Proc(popen)
        popen.kill()
        raise RuntimeError(f"target {module} did not start: {line!r}")

    def command(self, *argv: str) -> subprocess.Popen[str]:
        popen = subprocess.Popen(
            list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
        )
        self.procs.append(popen)
        return popen

    def close(self) -> None:
        for popen in self.procs:
            if popen.poll() is None:
                popen.terminate()
        for popen in self.procs:
            try:
                popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()


@dataclass
class Load:
    """wrk driving a URL in the background for a bounded time."""

    popen: subprocess.Popen[str]

    def stop(self) -> None:
        stop_process(self.popen, signal.SIGINT, timeout=10)


#: Connections of ``/hard`` that make busy samples catch its handler within seconds: the
#: handler runs for microseconds between its awaits, and with 6 connections (47 requests a
#: second) samples caught it 0 to 11 times in 4,000-6,000 ticks from run to run.
HARD_CONNECTIONS = 30


class LoadDriver:
    """Starts wrk runs for one test; each stops by itself after its duration."""

    def __init__(self) -> None:
        self.runs: list[Load] = []

    def start(self, url: str, seconds: float, connections: int = 4) -> Load:
        wrk = shutil.which("wrk")
        if wrk is None:
            raise RuntimeError("wrk is not installed (.ci/run installs it with apt-get)")
        popen = subprocess.Popen(
            [
                wrk,
                "-t1",
                f"-c{connections}",
                f"-d{max(1, round(seconds))}s",
                "--timeout",
                "5s",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        run = Load(popen)
        self.runs.append(run)
        return run

    def close(self) -> None:
        for run in self.runs:
            run.stop()


#: Every ``Serve`` started, in order: a test's own are killed once it ends, however it ended
#: (``tests/conftest.py``), those of fixtures when the fixture ends.
STARTED: list[Serve] = []


class Serve(Proc):
    """``sidecar serve`` as a real process on a free loopback port; stderr goes to a file, so a
    long run never blocks on a full pipe. ``env`` replaces the environment it inherits."""

    port: int

    def __init__(
        self,
        db: Path,
        *args: str,
        log: Path | None = None,
        token: str | None = None,
        wait: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        self.db = db
        self.port = free_port()
        self.token = token
        self.log = log or db.with_name(db.name + f".{self.port}.log")
        self.argv = [PYTHON, "-m", "sidecar", "serve", "--db", str(db), "--port", str(self.port)]
        self.argv += args
        with open(self.log, "w") as handle:
            self.popen = subprocess.Popen(
                self.argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=handle, text=True
            )
        STARTED.append(self)
        if wait:
            assert wait_until(self.up, timeout=30), self.log_text()

    def up(self) -> bool:
        if self.popen.poll() is not None:
            raise AssertionError(f"sidecar exited {self.popen.returncode}: {self.log_text()}")
        try:
            return self.request("/healthz", timeout=5)[0] == 200
        except OSError:
            return False

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def request(
        self,
        path: str,
        token: str | None = None,
        timeout: float = 30,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes, dict[str, str]]:
        """Status, body and headers (names in lower case) of a GET of ``path``."""
        req = urllib.request.Request(self.url + path)
        if token or self.token:
            req.add_header("Authorization", f"Bearer {token or self.token}")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                return (
                    response.status,
                    response.read(),
                    {k.lower(): v for k, v in response.headers.items()},
                )
        except urllib.error.HTTPError as err:
            return err.code, err.read(), {k.lower(): v for k, v in err.headers.items()}

    def status(self, path: str) -> int:
        return self.request(path)[0]

    def json(self, path: str, timeout: float = 30) -> Any:
        status, body, _ = self.request(path, timeout=timeout)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def settled(self, path: str, tries: int = 40, pause: float = 0.5) -> Any:
        """The API's answer once the windows of its range are all written: the first that
        equals the one before it (else the last of ``tries``)."""
        previous = None
        for _ in range(tries):
            current = self.json(path)
            if current == previous:
                return current
            previous = current
            time.sleep(pause)
        return previous

    def targets(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.json("/api/targets")
        return result

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self.json("/healthz")
        return result

    def metric(self, name: str) -> float:
        """An unlabelled sample of /metrics (NaN when there is none)."""
        return metrics(self.request("/metrics")[1].decode()).get(name, float("nan"))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        return self.popen.wait(timeout=timeout)

    def kill(self) -> None:
        stop_process(self.popen, signal.SIGKILL, timeout=30)


class Servers:
    """Starts ``sidecar serve`` processes for one test; none outlives it."""

    def __init__(self) -> None:
        self.started: list[Serve] = []

    def __call__(self, db: Path, *args: str, **kwargs: Any) -> Serve:
        server = Serve(db, *args, **kwargs)
        self.started.append(server)
        return server

    def close(self) -> None:
        for server in self.started:
            server.kill()


def metrics(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus exposition, by name."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.labels:
                out[sample.name] = float(sample.value)
    return out


def sidecar(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Runs the real CLI as a separate process."""
    return subprocess.run(
        [PYTHON, "-m", "sidecar", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one ``sidecar: error: ...`` line of a CLI run that failed with exit status 1."""
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sidecar: error: ")
    return lines[0]


def proc_status(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def memory_reads(stats: Any) -> tuple[float, float, float, float]:
    """(ticks, process_vm_readv calls, pieces, bytes) of a sampler so far, from its per-tick
    means in ``stats()``: the difference of two tells what was read in between."""
    ticks = stats["samples"] + stats["errors"]
    return (
        ticks,
        stats["read_calls"] * ticks,
        stats["read_pieces"] * ticks,
        stats["read_bytes"] * ticks,
    )


def stack_counts(windows: Iterable[Window]) -> Counter[tuple[str, str]]:
    """Samples per (thread name, folded stack) in a sampler's windows."""
    counts: Counter[tuple[str, str]] = Counter()
    for window in windows:
        for row in window["stacks"]:
            counts[(row.thread_name, row.stack)] += row.count
    return counts


def frequent(counts: Counter[tuple[str, str]], share: float = 0.02) -> set[tuple[str, str]]:
    """The keys holding at least ``share`` of all samples: the stacks that hold time."""
    total = sum(counts.values())
    return {key for key, count in counts.items() if count >= share * total}


def running_state(states: Mapping[str, float]) -> str:
    """The state of a stall that ran code (a spin), given its seconds per state: busy, or
    cpu_wait where it waited for the CPU it needed longer than it had one (a loaded host)."""
    return "cpu_wait" if states.get("cpu_wait", 0.0) > states.get("busy", 0.0) else "busy"
