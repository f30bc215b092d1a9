"""What the benchmarks add to the process harness they share with the tests
(``tests.support.procs``: ``Procs``, its children, targets, stopping): wrk runs and their
report, the profilers under comparison (sidecar record, py-spy) and their summaries, a
thread's scheduler times, the load average and the machine a report was measured on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.support.procs import PYTHON, Child, Procs

PYSPY = shutil.which("py-spy", path=str(Path(PYTHON).parent)) or "py-spy"
WRK_SCRIPT = Path(__file__).resolve().parent / "wrk_report.lua"


def finish(procs: Procs, argv: list[str], timeout: float, what: str, **kw: Any) -> str:
    """Runs ``argv`` to its end (``procs.start``'s options in ``kw``); its stdout."""
    child = procs.start(argv, **kw)
    code = child.popen.wait(timeout)
    procs.children.remove(child)
    if code != 0:
        raise RuntimeError(f"{what} failed ({code}): {child.stderr()[-300:]}")
    return child.stdout()


def wrk(procs: Procs, url: str, *, seconds: float, connections: int, rate: float = 0.0,
        cpus: str | None = None, nice: int | None = None) -> dict[str, Any]:  # fmt: skip
    """One wrk run (one thread); the ``BENCH`` summary of ``wrk_report.lua`` as a dict."""
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "2s", "-s",
            str(WRK_SCRIPT), url]  # fmt: skip
    env = {"BENCH_RATE": f"{rate:g}"}
    return parse_wrk(finish(procs, argv, seconds + 30, "wrk", cpus=cpus, nice=nice, env=env))


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
    r"ticks ([\d,]+) in ([\d.]+) s at ([\d.]+) Hz \([^)]*\) · errors ([\d,]+) · late ([\d,]+) · "
    r"missed ([\d,]+)"
)


def _count(text: str) -> int:
    """A count as sidecar prints it, with thousands separators."""
    return int(text.replace(",", ""))


def parse_record(text: str) -> dict[str, float]:
    """samples, seconds, errors, late, missed from ``sidecar record``'s stderr."""
    match = RECORD_SUMMARY.search(text)
    if match is None:
        raise ValueError(f"no summary in sidecar record's output: {text[-300:]!r}")
    samples, seconds, _rate, errors, late, missed = match.groups()
    return {"samples": _count(samples), "seconds": float(seconds),
            "errors": _count(errors), "late": _count(late),
            "missed": _count(missed)}  # fmt: skip


def parse_pyspy(text: str) -> dict[str, int]:
    """samples and errors from ``py-spy record``'s closing line."""
    match = re.search(r"Samples: (\d+) Errors: (\d+)", text)
    if match is None:
        raise ValueError(f"no summary in py-spy's output: {text[-300:]!r}")
    return {"samples": int(match[1]), "errors": int(match[2])}


def start_profiler(procs: Procs, tool: str, pid: int, rate: float, out: Path, *,
                   cpus: str | None = None, idle: bool = False, rt: int | None = None,
                   nice: int | None = None) -> Child:  # fmt: skip
    """Attaches a profiler CLI to ``pid`` until stopped; returns once it samples.

    tool: ``sidecar`` (default, non-blocking), ``sidecar-blocking`` (``--blocking``), ``py-spy``
    (its default mode: it pauses the whole process for every sample) or ``py-spy-nonblocking``.
    ``idle``: py-spy keeps off-CPU samples too (sidecar always does), so every sample counts.
    ``rt``: run the profiler at that real-time priority (``chrt -f``); ``nice``: at that nice.
    """
    common = ["--pid", str(pid), "--rate", f"{rate:g}", "-o", str(out)]
    if tool.startswith("sidecar"):
        argv = [PYTHON, "-m", "sidecar", "record", *common, "--format", "folded", "--force"]
        ready, stream = r"sampling PID \d+", "err"
        argv += ["--blocking"] * (tool == "sidecar-blocking")
    elif tool.startswith("py-spy"):
        argv = [PYSPY, "record", *common, "--format", "raw"]
        ready, stream = r"Sampling process", "out"
        argv += ["--nonblocking"] * (tool == "py-spy-nonblocking") + ["--idle"] * idle
    else:
        raise ValueError(f"unknown profiler {tool!r}")
    child = procs.start(argv, cpus=cpus, rt=rt, nice=nice)
    child.wait_for(ready, stream=stream)
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
