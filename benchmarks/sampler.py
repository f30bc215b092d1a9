"""Our sampler against the ``py-spy`` CLI on the same target at the same rate.

For each rate, the two profilers record the same busy target in turn (interleaved, several
rounds). Measured per run, in steady state (start-up excluded): samples achieved per second and
the profiler's own CPU time per second (utime + stime from /proc, between two readings).

    python -m benchmarks.sampler [--rates 100,500,1000] [--rounds 3] [--seconds 8]

Writes benchmarks/REPORT-sampler.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "benchmarks" / "REPORT-sampler.md"
WARMUP = 2.0


def folded_total(path: Path) -> int:
    total = 0
    for line in path.read_text().splitlines():
        if line.strip():
            total += int(line.rsplit(" ", 1)[1])
    return total


@dataclass
class Run:
    tool: str
    rate: int
    samples_per_s: float
    cpu_per_s: float


def measure(tool: str, target: int, rate: int, seconds: float, out: Path) -> Run:
    """Runs one recording; CPU is read after the warm-up and just before the end."""
    duration = int(seconds + WARMUP + 1)
    if tool == "sidecar":
        argv = [
            sys.executable,
            "-m",
            "sidecar",
            "record",
            "--pid",
            str(target),
            "--rate",
            str(rate),
            "--duration",
            str(duration),
            "--format",
            "folded",
            "-q",
            "-o",
            str(out),
        ]
    else:
        pyspy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
        argv = [
            pyspy,
            "record",
            "--pid",
            str(target),
            "--rate",
            str(rate),
            "--duration",
            str(duration),
            "--format",
            "raw",
            "--nonblocking",
            "--idle",
            "-o",
            str(out),
        ]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(WARMUP)
    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(seconds)
    cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
    if proc.wait(timeout=duration + 30) != 0:
        raise RuntimeError(f"{tool} failed at {rate} Hz")
    total = folded_total(out)
    return Run(tool, rate, total / duration, (cpu1 - cpu0) / (t1 - t0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,500,1000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    target = subprocess.Popen(
        [sys.executable, "-m", "targets.spin"], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    runs: list[Run] = []
    try:
        assert target.stdout is not None
        target.stdout.readline()
        with tempfile.TemporaryDirectory() as tmp:
            for round_ in range(args.rounds):
                for rate in rates:
                    order = ("sidecar", "py-spy") if round_ % 2 == 0 else ("py-spy", "sidecar")
                    for tool in order:
                        run = measure(tool, target.pid, rate, args.seconds, Path(tmp) / "out")
                        print(
                            f"round {round_ + 1} {tool:8} {rate:5} Hz: "
                            f"{run.samples_per_s:7.1f} samples/s, "
                            f"{run.cpu_per_s * 100:6.2f}% CPU",
                            flush=True,
                        )
                        runs.append(run)
    finally:
        target.kill()
        target.wait()
    write_report(runs, args)
    print(f"wrote {REPORT.relative_to(ROOT)}")
    return 0


def write_report(runs: list[Run], args: argparse.Namespace) -> None:
    lines = [
        "# Sampler: sidecar against the py-spy CLI",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, "
        f"Python {platform.python_version()}. Target: `targets/spin.py` (one busy Python thread). "
        f"{args.rounds} interleaved rounds of {args.seconds:g} s steady state per run; medians "
        "(min–max). py-spy runs `record --nonblocking --idle --format raw`, sidecar runs "
        "`record --format folded` (non-blocking, off-CPU samples kept): the same work.",
        "",
        "CPU is the profiler process's utime + stime per wall second after a "
        f"{WARMUP:g} s warm-up, so start-up costs are excluded.",
        "",
        "| rate (Hz) | sidecar samples/s | py-spy samples/s | sidecar CPU | py-spy CPU "
        "| CPU ratio (sidecar / py-spy) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for rate in sorted({r.rate for r in runs}):
        ours = [r for r in runs if r.rate == rate and r.tool == "sidecar"]
        theirs = [r for r in runs if r.rate == rate and r.tool == "py-spy"]

        def cell(values: list[float], scale: float = 1.0, unit: str = "") -> str:
            med = statistics.median(values) * scale
            return f"{med:.2f}{unit} ({min(values) * scale:.2f}–{max(values) * scale:.2f})"

        ratio = statistics.median(r.cpu_per_s for r in ours) / max(
            statistics.median(r.cpu_per_s for r in theirs), 1e-9
        )
        lines.append(
            f"| {rate} | {cell([r.samples_per_s for r in ours])} "
            f"| {cell([r.samples_per_s for r in theirs])} "
            f"| {cell([r.cpu_per_s for r in ours], 100, '%')} "
            f"| {cell([r.cpu_per_s for r in theirs], 100, '%')} | {ratio:.2f} |"
        )
    lines += [
        "",
        f"Generated by `python -m benchmarks.sampler` on {time.strftime('%Y-%m-%d')}.",
        "",
    ]
    REPORT.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
