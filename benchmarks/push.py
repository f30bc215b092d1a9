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

import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import main, serve, thread_cpu
from benchmarks.procs import load_average, machine
from benchmarks.table import Col, Report, med
from tests.support.procs import Procs, free_port
from tests.support.pyroscope import Pyroscope, build

RATE = 100.0
WINDOW = 10
WARMUP = 12.0


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if not sample.labels}  # fmt: skip


def one_run(procs: Procs, pids: list[int], workdir: Path, push: str | None, seconds: float) -> Any:
    """serve over ``pids`` for a warm-up and ``seconds``: its CPU per target, and what it pushed."""
    port, db = free_port(), workdir / f"serve-{time.monotonic_ns()}.db"
    pushing = ("--push", push, "--service-name", "bench") if push else ()
    server = serve(procs, pids, db, RATE, WINDOW, "--port", str(port), *pushing)
    time.sleep(WARMUP)
    before, cpu0, t0 = metrics(port), thread_cpu(server.pid), time.monotonic()
    time.sleep(seconds)
    cpu1, t1, after = thread_cpu(server.pid), time.monotonic(), metrics(port)
    procs.stop(server)

    def grew(name: str) -> float:
        return after.get(f"sidecar_push_{name}_total", 0.0) - before.get(
            f"sidecar_push_{name}_total", 0.0)  # fmt: skip

    return {
        "cpu_per_target": (sum(cpu1.values()) - sum(cpu0.values())) / (t1 - t0) / len(pids),
        "windows_pushed": grew("windows_pushed"),
        "bytes_pushed": grew("bytes"),
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
                for mode, results in runs.items():
                    url = pyroscope.url if mode == "push" else None
                    results.append(one_run(procs, pids, workdir, url, seconds))
                    print(f"round {number + 1} {mode}: {results[-1]['cpu_per_target']:.3%} of a "
                          "core per target", flush=True)  # fmt: skip
            load1 = load_average()
    finally:
        pyroscope.stop()
    return {"machine": machine(), "targets": targets, "rounds": rounds, "seconds": seconds,
            "rate": RATE, "window": WINDOW, "load": [load0, load1], "runs": runs}  # fmt: skip


def write_report(data: dict[str, Any], report: Report) -> None:
    runs = data["runs"]
    cpu = {mode: med(r["cpu_per_target"] for r in runs[mode]) for mode in runs}
    store, push = cpu["store"], cpu["push"]
    windows = sum(r["windows_pushed"] for r in runs["push"])
    sent = sum(r["bytes_pushed"] for r in runs["push"])
    spread = max(r["cpu_per_target"] for r in runs["store"]) - min(
        r["cpu_per_target"] for r in runs["store"])  # fmt: skip
    m = data["machine"]
    report.add(
        "# Pushing to Pyroscope: serve's CPU per target",
        f"`python -m benchmarks.push --targets {data['targets']} --rounds {data['rounds']} "
        f"--seconds {data['seconds']:g}` ({data['rate']:g} Hz, {data['window']}-second windows, "
        f"{WARMUP:g} s warm-up; how: the module's docstring). Machine: {m.get('cpu', '?')}, "
        f"{m.get('cores', '?')} cores; load average {data['load'][0]:.1f} at the start, "
        f"{data['load'][1]:.1f} at the end (other work shares the machine).",
    )
    pct = "{:.3%} of a core".format
    report.table([("store only", "store"), ("store and push", "push")], [
        Col("mode", lambda r: r[0], left=True),
        Col("CPU per target, median", lambda r: cpu[r[1]], pct, left=True),
        Col("rounds", lambda r: ", ".join(f"{x['cpu_per_target']:.3%}" for x in runs[r[1]]),
            left=True),
    ])  # fmt: skip
    noise = (f"the store-only rounds alone spread over {spread * 100:.3f} points, so the "
             "difference is within this run's noise. " if abs(push - store) <= spread
             else f"beyond the {spread * 100:.3f} points the store-only rounds spread over. "
             )  # fmt: skip
    report.add(
        f"Pushing adds {(push - store) * 100:+.3f} points of a core per target "
        f"({(push / store - 1) * 100 if store else 0:+.0f}% of serve's cost); {noise}"
        f"The push runs sent {windows:.0f} windows in {sent / 1024:.0f} KiB, "
        f"{(sent / windows if windows else 0) / 1024:.1f} KiB per window "
        "(two gzipped pprof profiles each)."
    )


if __name__ == "__main__":
    sys.exit(
        main(__doc__, "REPORT-push", lambda a, w: run(a.targets, a.rounds, a.seconds, w),
             write_report, {"--targets": 4, "--rounds": 3, "--seconds": 30.0})
    )  # fmt: skip
