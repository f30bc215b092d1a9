"""Helpers for tests: start real targets, drive real load, run the real ``sidecar`` CLI."""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sidecar._native import Window

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
REPORTS = ROOT / "tests" / "reports"


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
    ) -> Proc:
        """Starts ``python -m targets.MODULE ARGS`` and waits for its ready line; ``python`` is
        the interpreter, the venv's unless told, and ``path`` a folder of packages for it."""
        env = {**os.environ, "PYTHONPATH": str(path)} if path is not None else None
        popen = subprocess.Popen(
            [str(python), "-m", f"targets.{module}", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(popen)
        line = _read_line(popen, timeout)
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if match:
            return Proc(popen, int(match[1]))
        if line.strip() == "ready":
            return Proc(popen)
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
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


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


def sidecar(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Runs the real CLI as a separate process."""
    return subprocess.run(
        [PYTHON, "-m", "sidecar", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def proc_status(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
