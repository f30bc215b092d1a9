"""Processes of the tests and the benchmarks: where the checkout is, the interpreter, the line a
target prints once ready, stopping a process for good, waiting for a condition, a free port,
and ``Procs``, the benchmarks' children (tests start theirs with ``helpers.Spawner``).

``Procs`` writes every child's output to a file in the run's directory (no pipe can fill up),
has the child get SIGTERM when the harness dies (PR_SET_PDEATHSIG), and terminates, then
kills, every child it started when it closes.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
PR_SET_PDEATHSIG = 1

#: The line a target (``python -m targets.MODULE``) prints once it is ready: ``ready`` (a line
#: of its own), or ``listening on URL`` when it serves (group 1 the URL, group 2 its port).
#: The newline is part of it, so a line still being written never matches.
READY = re.compile(r"(?:listening on (http://127\.0\.0\.1:(\d+))|^ready)\n", re.MULTILINE)


def stop_process(popen: subprocess.Popen[Any], sig: int, timeout: float) -> int:
    """Sends ``sig`` unless the process has ended, and kills it if it is still there after
    ``timeout`` seconds; its exit status."""
    if popen.poll() is None:
        popen.send_signal(sig)
    try:
        return popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        return popen.wait()


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def pinned(
    argv: Sequence[str], cpus: str | None, rt: int | None = None, nice: int | None = None
) -> list[str]:
    """``argv`` under ``taskset -c CPUS``, ``chrt -f RT`` (real-time FIFO priority RT) and
    ``nice -n NICE``, each when given."""
    out = list(argv)
    if rt:
        out = ["chrt", "-f", str(rt), *out]
    if nice:
        out = ["nice", "-n", str(nice), *out]
    if cpus:
        out = ["taskset", "-c", cpus, *out]
    return out


@dataclass
class Child:
    popen: subprocess.Popen[bytes]
    out: Path
    err: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def wait_for(
        self, pattern: str | re.Pattern[str], *, stream: str = "out", timeout: float = 30.0
    ) -> re.Match[str]:
        """Waits until ``pattern`` appears in the child's stdout (or stderr)."""
        path = self.out if stream == "out" else self.err
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, path.read_text(errors="replace"))
            if match:
                return match
            if self.popen.poll() is not None:
                raise RuntimeError(
                    f"{self.popen.args} exited ({self.popen.returncode}) before {pattern!r}: "
                    f"{self.stderr()[-500:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.popen.args}: no {pattern!r} within {timeout} s")
            time.sleep(0.02)


class Procs:
    """Starts children into ``workdir`` and stops every one of them on ``close``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.children: list[Child] = []
        self.count = 0

    def start(
        self,
        argv: Sequence[str],
        *,
        cpus: str | None = None,
        rt: int | None = None,
        nice: int | None = None,
        env: dict[str, str] | None = None,
    ) -> Child:
        self.count += 1
        name = f"{self.count:03d}-{Path(argv[0]).name}"
        out, err = self.workdir / f"{name}.out", self.workdir / f"{name}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            popen = subprocess.Popen(
                pinned(argv, cpus, rt, nice),
                cwd=ROOT,
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, **(env or {})),
                preexec_fn=_die_with_parent,
            )
        child = Child(popen, out, err)
        self.children.append(child)
        return child

    def target(
        self,
        module: str,
        *args: str,
        cpus: str | None = None,
        rt: int | None = None,
        nice: int | None = None,
        python: str = PYTHON,
    ) -> tuple[Child, str | None]:
        """``python -m targets.MODULE`` (under ``python``), once it says it is ready; with its URL
        if it serves."""
        child = self.start([python, "-m", f"targets.{module}", *args], cpus=cpus, rt=rt, nice=nice)
        match = child.wait_for(READY)
        return child, match[1]

    def stop(self, child: Child, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        try:
            return stop_process(child.popen, sig, timeout)
        finally:
            if child in self.children:
                self.children.remove(child)

    def close(self) -> None:
        for child in list(reversed(self.children)):
            self.stop(child, timeout=10)

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
