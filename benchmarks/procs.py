"""Processes of the benchmark harness: targets, load, profilers; none outlives a run.

Every child writes its output to a file in the run's directory (no pipe can fill up), gets
SIGTERM when the harness dies (PR_SET_PDEATHSIG), and is terminated, then killed, when the
``Procs`` that started it closes.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
PYSPY = shutil.which("py-spy", path=str(Path(PYTHON).parent)) or "py-spy"
WRK_SCRIPT = Path(__file__).resolve().parent / "wrk_report.lua"
PR_SET_PDEATHSIG = 1


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
        self, pattern: str, *, stream: str = "out", timeout: float = 30.0
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
        match = child.wait_for(r"(listening on (http://127\.0\.0\.1:\d+)|ready)\n")
        return child, match[2]

    def stop(self, child: Child, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if child.popen.poll() is None:
            child.popen.send_signal(sig)
        try:
            return child.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            child.popen.kill()
            return child.popen.wait()
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


def wrk(
    procs: Procs,
    url: str,
    *,
    seconds: float,
    connections: int,
    rate: float = 0.0,
    cpus: str | None = None,
    nice: int | None = None,
) -> dict[str, Any]:
    """One wrk run (one thread); the ``BENCH`` summary of ``wrk_report.lua`` as a dict."""
    child = procs.start(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds:g}s",
            "--timeout",
            "2s",
            "-s",
            str(WRK_SCRIPT),
            url,
        ],
        cpus=cpus,
        nice=nice,
        env={"BENCH_RATE": f"{rate:g}"},
    )
    code = child.popen.wait(seconds + 30)
    procs.children.remove(child)
    if code != 0:
        raise RuntimeError(f"wrk failed ({code}): {child.stderr()[-300:]}")
    return parse_wrk(child.stdout())


def parse_wrk(text: str) -> dict[str, Any]:
    """The ``BENCH {...}`` line of ``wrk_report.lua`` with rps added."""
    match = re.search(r"^BENCH (\{.*\})$", text, re.MULTILINE)
    if match is None:
        raise ValueError(f"no BENCH line in wrk's output: {text[-300:]!r}")
    result: dict[str, Any] = json.loads(match[1])
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    return result


#: The summary line of ``sidecar record``.
RECORD_SUMMARY = re.compile(
    r"samples ([\d,]+) in ([\d.]+) s at ([\d.]+) Hz · errors (\d+) · late (\d+) · missed (\d+)"
)


def parse_record(text: str) -> dict[str, float]:
    """samples, seconds, errors, late, missed from ``sidecar record``'s stderr."""
    match = RECORD_SUMMARY.search(text)
    if match is None:
        raise ValueError(f"no summary in sidecar record's output: {text[-300:]!r}")
    samples, seconds, _rate, errors, late, missed = match.groups()
    return {
        "samples": int(samples.replace(",", "")),
        "seconds": float(seconds),
        "errors": int(errors),
        "late": int(late),
        "missed": int(missed),
    }


def parse_pyspy(text: str) -> dict[str, int]:
    """samples and errors from ``py-spy record``'s closing line."""
    match = re.search(r"Samples: (\d+) Errors: (\d+)", text)
    if match is None:
        raise ValueError(f"no summary in py-spy's output: {text[-300:]!r}")
    return {"samples": int(match[1]), "errors": int(match[2])}


def start_profiler(
    procs: Procs,
    tool: str,
    pid: int,
    rate: float,
    out: Path,
    *,
    cpus: str | None = None,
    idle: bool = False,
    rt: int | None = None,
    nice: int | None = None,
) -> Child:
    """Attaches a profiler CLI to ``pid`` until stopped; returns once it samples.

    tool: ``sidecar`` (default, non-blocking), ``sidecar-blocking`` (``--blocking``), ``py-spy``
    (its default mode: it pauses the whole process for every sample) or ``py-spy-nonblocking``.
    ``idle``: py-spy keeps off-CPU samples too (sidecar always does), so every sample counts.
    ``rt``: run the profiler at that real-time priority (``chrt -f``); ``nice``: at that nice.
    """
    if tool.startswith("sidecar"):
        argv = [PYTHON, "-m", "sidecar", "record", "--pid", str(pid), "--rate", f"{rate:g}"]
        argv += ["--format", "folded", "-o", str(out)]
        if tool == "sidecar-blocking":
            argv.append("--blocking")
        child = procs.start(argv, cpus=cpus, rt=rt, nice=nice)
        child.wait_for(r"sampling PID \d+", stream="err")
    elif tool.startswith("py-spy"):
        argv = [PYSPY, "record", "--pid", str(pid), "--rate", f"{rate:g}"]
        argv += ["--format", "raw", "-o", str(out)]
        if tool == "py-spy-nonblocking":
            argv.append("--nonblocking")
        if idle:
            argv.append("--idle")
        child = procs.start(argv, cpus=cpus, rt=rt, nice=nice)
        child.wait_for(r"Sampling process")
    else:
        raise ValueError(f"unknown profiler {tool!r}")
    return child


def stop_profiler(procs: Procs, child: Child, tool: str) -> dict[str, float]:
    """Stops a profiler started by ``start_profiler``; its own summary (samples, errors ...)."""
    if tool.startswith("sidecar"):
        code = procs.stop(child, signal.SIGTERM)
        if code != 0:
            raise RuntimeError(f"sidecar record failed ({code}): {child.stderr()[-300:]}")
        return dict(parse_record(child.stderr()))
    code = procs.stop(child, signal.SIGINT)
    if code != 0:
        raise RuntimeError(f"py-spy failed ({code}): {child.stdout()[-300:]}")
    return dict(parse_pyspy(child.stdout()))


def schedstat(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(seconds on CPU, seconds runnable but waiting for a CPU) of one thread so far."""
    with open(f"/proc/{pid}/task/{tid or pid}/schedstat") as handle:
        run, wait, _ = handle.read().split()
    return int(run) / 1e9, int(wait) / 1e9


def load_average() -> float:
    return os.getloadavg()[0]


def machine() -> dict[str, Any]:
    """What the report says about the machine it ran on."""
    import platform

    model = "unknown CPU"
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as handle:
        mem_kb = int(handle.readline().split()[1])
    pyspy = subprocess.run([PYSPY, "--version"], capture_output=True, text=True).stdout.strip()
    wrk_version = subprocess.run(["wrk", "--version"], capture_output=True, text=True)
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gb": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "py_spy": pyspy,
        "wrk": (wrk_version.stdout or wrk_version.stderr).split(" Copyright")[0].strip(),
    }
