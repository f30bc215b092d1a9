"""What pushing to Grafana Pyroscope adds to ``sidecar serve``'s CPU per target.

``sidecar serve`` samples N targets with ~30-frame stacks (``targets/deep.py``: an event loop
10 % on CPU, the rest in ``time.sleep``) at 100 Hz with 10 s windows, once storing only and once
also pushing every window (``--push``) to a real Pyroscope (v1.21.1, built by
tests/pyroscope.sh, one process on 127.0.0.1), in interleaved rounds. Measured per run after a
warm-up: the serve process's CPU (the scheduler's nanosecond run time of all its threads) over
``--seconds``, divided by N; for the push runs also the windows and bytes pushed (its
``/metrics``). Per mode the median round counts.

    python -m benchmarks.push [--targets 4] [--rounds 3] [--seconds 30]

Writes benchmarks/REPORT-push.md and REPORT-push.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.cost import thread_cpu
from benchmarks.procs import load_average, machine
from tests.support.procs import PYTHON, Procs, free_port
from tests.support.pyroscope import Pyroscope, build

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "benchmarks" / "REPORT-push.md"
RESULTS = ROOT / "benchmarks" / "REPORT-push.json"
RATE = 100.0
WINDOW = 10
WARMUP = 12.0


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def one_run(procs: Procs, pids: list[int], workdir: Path, push: str | None, seconds: float) -> Any:
    """serve over ``pids`` for a warm-up and ``seconds``: its CPU per target, and what it pushed."""
    port = free_port()
    db = workdir / f"serve-{time.monotonic_ns()}.db"
    argv = [PYTHON, "-m", "sidecar", "serve", "--db", str(db), "--port", str(port)]
    argv += ["--rate", f"{RATE:g}", "--window", str(WINDOW), "--log-level", "warning"]
    for pid in pids:
        argv += ["--pid", str(pid)]
    if push:
        argv += ["--push", push, "--service-name", "bench"]
    serve = procs.start(argv)
    serve.wait_for(r"serving http", stream="err")
    time.sleep(WARMUP)
    before, cpu0, t0 = metrics(port), thread_cpu(serve.pid), time.monotonic()
    time.sleep(seconds)
    cpu1, t1, after = thread_cpu(serve.pid), time.monotonic(), metrics(port)
    procs.stop(serve)
    cpu = sum(cpu1.values()) - sum(cpu0.values())
    pushed = after.get("sidecar_push_windows_pushed_total", 0.0) - before.get(
        "sidecar_push_windows_pushed_total", 0.0
    )
    sent = after.get("sidecar_push_bytes_total", 0.0) - before.get("sidecar_push_bytes_total", 0.0)
    return {
        "cpu_per_target": cpu / (t1 - t0) / len(pids),
        "windows_pushed": pushed,
        "bytes_pushed": sent,
        "seconds": t1 - t0,
        "retries": after.get("sidecar_push_retries_total", 0.0),
    }


def run(targets: int, rounds: int, seconds: float, workdir: Path) -> dict[str, Any]:
    pyroscope = Pyroscope(build(), workdir / "pyroscope")
    pyroscope.start()
    try:
        with Procs(workdir) as procs:
            lifetime = str((WARMUP + seconds + 30) * rounds * 2 + 60)
            pids = [procs.target("deep", "--seconds", lifetime)[0].pid for _ in range(targets)]
            load0 = load_average()
            runs: dict[str, list[dict[str, Any]]] = {"store": [], "push": []}
            for number in range(rounds):
                for mode in runs:
                    url = pyroscope.url if mode == "push" else None
                    result = one_run(procs, pids, workdir, url, seconds)
                    runs[mode].append(result)
                    print(
                        f"round {number + 1} {mode}: "
                        f"{result['cpu_per_target'] * 100:.3f}% of a core per target",
                        flush=True,
                    )
            load1 = load_average()
    finally:
        pyroscope.stop()
    return {
        "machine": machine(),
        "targets": targets,
        "rounds": rounds,
        "seconds": seconds,
        "rate": RATE,
        "window": WINDOW,
        "load": [load0, load1],
        "runs": runs,
    }


def write_report(data: dict[str, Any]) -> None:
    runs = data["runs"]
    store = statistics.median(r["cpu_per_target"] for r in runs["store"])
    push = statistics.median(r["cpu_per_target"] for r in runs["push"])
    windows = sum(r["windows_pushed"] for r in runs["push"])
    sent = sum(r["bytes_pushed"] for r in runs["push"])
    per_window = sent / windows if windows else 0.0
    spread = max(r["cpu_per_target"] for r in runs["store"]) - min(
        r["cpu_per_target"] for r in runs["store"]
    )
    lines = [
        "# Pushing to Pyroscope: serve's CPU per target",
        "",
        f"`python -m benchmarks.push --targets {data['targets']} --rounds {data['rounds']} "
        f"--seconds {data['seconds']:g}`: `sidecar serve` on {data['targets']} targets "
        f"(`targets/deep.py`, ~30-frame stacks) at {data['rate']:g} Hz with "
        f"{data['window']}-second windows, storing only and also pushing to a real Pyroscope "
        f"(v1.21.1 on 127.0.0.1), in {data['rounds']} interleaved rounds of "
        f"{data['seconds']:g} s each after a {WARMUP:g} s warm-up. Machine: "
        f"{data['machine'].get('cpu', '?')}, {data['machine'].get('cores', '?')} cores; "
        f"load average {data['load'][0]:.1f} at the start, {data['load'][1]:.1f} at the end "
        "(other work shares the machine).",
        "",
        "| mode | CPU per target, median | rounds |",
        "|---|---|---|",
        f"| store only | {store * 100:.3f}% of a core | "
        + ", ".join(f"{r['cpu_per_target'] * 100:.3f}%" for r in runs["store"])
        + " |",
        f"| store and push | {push * 100:.3f}% of a core | "
        + ", ".join(f"{r['cpu_per_target'] * 100:.3f}%" for r in runs["push"])
        + " |",
        "",
        f"Pushing adds {(push - store) * 100:+.3f} points of a core per target "
        f"({(push / store - 1) * 100 if store else 0:+.0f}% of serve's cost); "
        + (
            f"the store-only rounds alone spread over {spread * 100:.3f} points, so the "
            "difference is within this run's noise. "
            if abs(push - store) <= spread
            else f"beyond the {spread * 100:.3f} points the store-only rounds spread over. "
        )
        + f"The push runs sent "
        f"{windows:.0f} windows in {sent / 1024:.0f} KiB, {per_window / 1024:.1f} KiB per window "
        "(two gzipped pprof profiles each).",
    ]
    REPORT.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = run(args.targets, args.rounds, args.seconds, Path(tmp))
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    write_report(data)
    print(REPORT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
