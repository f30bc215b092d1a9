"""What the asyncio task scan costs, side by side in one run: per task and per scan, and what
it adds to the thread sampler.

For each CPython version and each count of live tasks (``targets/tasks_many.py --tasks N``:
every task parked two coroutines deep on a known await), one ``Sampler`` at 100 Hz reads the
target for ``--seconds`` after a warm-up, in interleaved legs: without task scans, with task
scans at 10 Hz, and with task scans at 10 Hz that re-read every chain (the scanner's cache of
unchanged chains off, ``SIDECAR_TASK_CACHE=off``). Measured: the sampling thread's CPU (the
scheduler's nanosecond run time), the scans and task-samples counted, and the thread samples'
figures (samples, late and missed ticks, the lag of a tick). The scan's cost is the CPU of the
leg with scans minus the CPU of the leg without, per scan and per task.

Then a target with 100,000 tasks, past the scan's bound: how many tasks a scan reads, how many
it leaves unread and counts, what a scan costs, and how much this process's peak memory grew.

    python -m benchmarks.tasks [--rounds 1] [--seconds 4] [--versions 3.11,3.12,3.13,3.14]

Writes benchmarks/REPORT-tasks.md and REPORT-tasks.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.pauses import sampler_thread_seconds
from benchmarks.procs import load_average, machine
from sidecar import _native
from tests.support.procs import Procs
from tests.support.pythons import find_pythons

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "benchmarks" / "REPORT-tasks.md"
RESULTS = ROOT / "benchmarks" / "REPORT-tasks.json"
VERSIONS = ("3.11", "3.12", "3.13", "3.14")
COUNTS = (100, 1_000, 10_000)
BIG = 100_000
#: Seconds of each leg on the big target: its scans, held to the budget, come about 1.5 s apart.
BIG_SECONDS = 15.0
RATE = 100.0
TASK_RATE = 10.0
WARMUP = 1.5
#: The goal: task scans of 1,000 tasks at 10 Hz cost at most this share of one core.
GOAL_SHARE = 0.01
GOAL_TASKS = 1_000
#: Legs: (name, task rate, the cache's switch).
LEGS = (
    ("threads only", 0.0, "on"),
    ("tasks", TASK_RATE, "on"),
    ("tasks, no cache", TASK_RATE, "off"),
)


def leg(pid: int, tasks_hz: float, cache: str, seconds: float) -> dict[str, Any]:
    """One sampler on ``pid`` for ``seconds`` after the warm-up: its CPU, and what it counted."""
    # set for the whole leg: the sampler makes its task scanner, which reads it, at its first
    # tick, after the sampler is made
    os.environ["SIDECAR_TASK_CACHE"] = cache
    try:
        with _native.Sampler(pid, rate_hz=RATE, tasks_hz=tasks_hz) as sampler:
            time.sleep(WARMUP)
            cpu0, scan0 = sampler_thread_seconds(), scan_thread_seconds()
            stats0 = sampler.stats()
            time.sleep(seconds)
            cpu1, scan1 = sampler_thread_seconds(), scan_thread_seconds()
            stats1 = sampler.stats()
    finally:
        del os.environ["SIDECAR_TASK_CACHE"]

    def delta(key: str) -> int:
        return int(stats1[key] - stats0[key])  # type: ignore[literal-required]

    return {
        "seconds": seconds,
        "cpu": cpu1 - cpu0,
        "scan_cpu": scan1 - scan0,
        "samples": delta("samples"),
        "errors": delta("errors"),
        "late": delta("late"),
        "missed": delta("missed"),
        "lag_mean_ms": stats1["lag_mean"] * 1e3,
        "task_scans": delta("task_scans"),
        "task_samples": delta("task_samples"),
        "task_torn": delta("task_torn"),
        "task_unread": delta("task_unread"),
        "task_errors": delta("task_errors"),
        "task_last_error": stats1["task_last_error"],
    }


def scan_thread_seconds() -> float:
    """CPU seconds of this process's task scan threads so far: the scans themselves."""
    return sampler_thread_seconds(("sidecar-tasks",))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(
    versions: list[str], counts: list[int], rounds: int, seconds: float, workdir: Path
) -> dict[str, Any]:
    pythons = find_pythons()
    missing = [v for v in versions if v not in pythons]
    if missing:
        raise SystemExit(f"no interpreter for {', '.join(missing)}: run `make pythons` first")
    legs: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {
        v: {str(n): {name: [] for name, _, _ in LEGS} for n in counts} for v in versions
    }
    big: dict[str, Any] = {}
    with Procs(workdir) as procs:
        for version in versions:
            for count in counts:
                child, _ = procs.target(
                    "tasks_many", "--tasks", str(count), python=str(pythons[version])
                )
                for round_ in range(rounds):
                    for name, hz, cache in LEGS:
                        result = leg(child.pid, hz, cache, seconds)
                        legs[version][str(count)][name].append(result)
                        print(
                            f"round {round_ + 1} {version} {count:,} tasks, {name}: "
                            f"{result['cpu'] / seconds * 100:.2f}% of a core, "
                            f"{result['task_scans']} scans",
                            flush=True,
                        )
                procs.stop(child)
        for version in [v for v in ("3.11", "3.14") if v in versions]:
            child, _ = procs.target("tasks_many", "--tasks", str(BIG), python=str(pythons[version]))
            before = peak_rss_mb()
            off = leg(child.pid, 0.0, "on", max(seconds, BIG_SECONDS))
            on = leg(child.pid, TASK_RATE, "on", max(seconds, BIG_SECONDS))
            big[version] = {
                "off": off,
                "on": on,
                "rss_before_mb": before,
                "rss_after_mb": peak_rss_mb(),
            }
            print(f"{version} {BIG:,} tasks: {on['task_samples']} task-samples", flush=True)
            procs.stop(child)
    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine(),
        "load_average": load_average(),
        "rounds": rounds,
        "seconds": seconds,
        "versions": versions,
        "counts": counts,
        "legs": legs,
        "big": big,
    }


def scan_cost(with_tasks: dict[str, Any], without: dict[str, Any]) -> tuple[float, float]:
    """(µs of the sampling thread's CPU per scan, share of a core) the scans added."""
    extra = with_tasks["cpu"] / with_tasks["seconds"] - without["cpu"] / without["seconds"]
    scans_per_s = with_tasks["task_scans"] / with_tasks["seconds"]
    return (extra / scans_per_s * 1e6 if scans_per_s else float("nan")), extra


def medians(results: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in results)


def write_report(data: dict[str, Any]) -> None:
    lines = [
        "# What the asyncio task scan costs",
        "",
        f"Measured {data['when']} ({data['machine'].get('cpu', 'this machine')}), load average "
        f"{data['load_average']:.2f}; {data['rounds']} round(s) of {data['seconds']:g} s per leg, "
        f"the legs of a target interleaved. The sampler reads threads at {RATE:g} Hz and, in the "
        f"legs with tasks, scans the tasks at {TASK_RATE:g} Hz. Targets: "
        "`targets/tasks_many.py --tasks N`, every task parked two coroutines deep "
        "(`request` → `handler` → `sleeper` in `asyncio.sleep`, or `waiter` on a pending "
        "future). CPU is the sampling threads' (the thread sampler's and the scan thread's); "
        "the scan's cost is the leg with scans minus the leg without, over the scans and the "
        "tasks each read, and the scan thread's own CPU over its scans and tasks (the median "
        "round counts).",
        "",
        "| version | tasks | leg | CPU (% of a core) | scans | task-samples per scan "
        "| µs per scan | µs per task per scan | scan thread, µs per task per scan "
        "| thread samples | late | missed | torn | unread |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    goal: list[tuple[str, float, float, float]] = []
    unchanged: list[str] = []
    gains: list[tuple[str, int, float, float]] = []
    for version in data["versions"]:
        for count in data.get("counts", COUNTS):
            per_leg = data["legs"][version][str(count)]
            base = per_leg["threads only"]
            for name, _, _ in LEGS:
                results = per_leg[name]
                cpu = statistics.median(r["cpu"] / r["seconds"] for r in results)
                scans = medians(results, "task_scans")
                per_scan = medians(results, "task_samples") / scans if scans else 0.0
                cost = "|"
                if name != "threads only":
                    costs = [scan_cost(r, b) for r, b in zip(results, base, strict=True)]
                    us = statistics.median(c[0] for c in costs)
                    per_task = us / per_scan if per_scan else float("nan")
                    # reports of runs before the scan thread was measured have no scan_cpu
                    own = statistics.median(
                        r.get("scan_cpu", math.nan) / r["seconds"] for r in results
                    )
                    own_per_task = (
                        own * 1e6 / (scans / results[0]["seconds"]) / per_scan
                        if scans and per_scan
                        else float("nan")
                    )
                    cost = f"{us:.0f} | {per_task:.2f} | {own_per_task:.2f} |"
                    share = statistics.median(c[1] for c in costs)
                    if name == "tasks" and count == GOAL_TASKS:
                        goal.append((version, own, own_per_task, share))
                    if name == "tasks" and "tasks, no cache" in per_leg:
                        uncached = [
                            scan_cost(r, b)[0]
                            for r, b in zip(per_leg["tasks, no cache"], base, strict=True)
                        ]
                        gains.append((version, count, statistics.median(uncached), us))
                else:
                    cost = "– | – | – |"
                lines.append(
                    f"| {version} | {count:,} | {name} | {cpu * 100:.2f} | {scans:.0f} "
                    f"| {per_scan:.0f} | {cost} {medians(results, 'samples'):.0f} "
                    f"| {medians(results, 'late'):.0f} | {medians(results, 'missed'):.0f} "
                    f"| {sum(r['task_torn'] for r in results)} "
                    f"| {sum(r['task_unread'] for r in results)} |"
                )
            for r, b in zip(per_leg["tasks"], base, strict=True):
                if r["samples"] < b["samples"] * 0.98 or r["missed"] > b["missed"] + 2:
                    unchanged.append(f"{version} at {count:,} tasks")
    lines += ["", "## Against the goal", ""]
    for version, own, own_per_task, share in goal:
        verdict = (
            "not measured against"
            if math.isnan(own)
            else "within"
            if own <= GOAL_SHARE
            else "above"
        )
        lines.append(
            f"- {version}: scans of {GOAL_TASKS:,} tasks at {TASK_RATE:g} Hz take "
            f"{own * 100:.2f}% of a core on their thread ({own_per_task:.2f} µs per task per "
            f"scan), {verdict} the goal of {GOAL_SHARE * 100:g}%; the sampling threads in all "
            f"used {share * 100:.2f}% of a core more than without scans (that difference also "
            "holds the runner's adding of each scan's lines to its window, and the spread "
            "between legs)."
        )
    lines.append(
        "- The thread sampler's figures with scans on: "
        + (
            "its samples within 2% of the leg without scans and no more than 2 more missed "
            "ticks, at every version and count."
            if not unchanged
            else "fewer samples or more missed ticks than without scans at "
            + ", ".join(sorted(set(unchanged)))
            + "."
        )
    )
    lines += (
        []
        if not gains
        else [
            "",
            "## The cache of unchanged chains",
            "",
            "A parked task whose coroutine, frame position and awaited object are the ones of the "
            "last scan is not walked again: the scanner keeps its chain. The same scans with the "
            "cache off, in the same run:",
            "",
            "| version | tasks | µs per scan, no cache | µs per scan, cache | ratio |",
            "|---|---:|---:|---:|---:|",
        ]
    )
    lines += (
        []
        if gains
        else [
            "",
            "Every chain is read again at every scan (this run predates the cache of unchanged "
            "chains).",
        ]
    )
    for version, count, before, after in gains:
        # a leg's CPU within the noise of the leg without scans leaves no ratio
        ratio = f"{before / after:.1f}x" if after > 0 and before > 0 else "–"
        lines.append(f"| {version} | {count:,} | {before:.0f} | {after:.0f} | {ratio} |")
    noisy = sum(1 for _, _, b, a in gains if a <= 0 or b <= 0)
    if noisy:
        lines += [
            "",
            f"{noisy} of the targets had a leg with scans that measured no more CPU than the "
            "leg without: within this run's noise, no ratio.",
        ]
    ratios = [b / a for _, _, b, a in gains if a > 0 and b > 0]
    if ratios:
        median = statistics.median(ratios)
        faster = sum(r > 1.1 for r in ratios)
        slower = sum(r < 1 / 1.1 for r in ratios)
        lines += [
            "",
            f"Median ratio {median:.2f}x over {len(ratios)} targets: the cache saved more than "
            f"10% on {faster}, cost more than 10% on {slower}, and {len(ratios) - faster - slower} "
            "were within 10%.",
        ]
        if 1 / 1.1 <= median <= 1.1:
            lines[-1] += (
                " Without the cache a chain is walked one level of all tasks at a time, each "
                "step one batch of reads, pieces of the same pages read as one: in this run a "
                "walk cost about what the cache's check of each coroutine did."
            )
    lines += [
        "",
        f"## {BIG:,} tasks: past the scan's bound",
        "",
        "A scan reads a bounded number of tasks. Past that bound it reads a slice of "
        "them, a different slice each scan, and counts the others as unread (`task_unread` in "
        "the sampler's stats, a line of `record`'s summary with the share read). The task "
        "profile's counts are not scaled: each task-sample is a task that was read. Scans "
        f"are held to {_native.TASK_SCAN_BUDGET:.0%} of the sampling thread's time, so these "
        "come far apart: the scans column counts them.",
        "",
        "| version | scans | task-samples per scan | unread per scan | µs per scan | "
        "CPU with scans (% of a core) | without | thread samples with / without "
        "| peak RSS of this process before → after (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for version, b in data["big"].items():
        on, off = b["on"], b["off"]
        scans = max(on["task_scans"], 1)
        us, _ = scan_cost(on, off)
        lines.append(
            f"| {version} | {on['task_scans']} | {on['task_samples'] / scans:,.0f} "
            f"| {on['task_unread'] / scans:,.0f} "
            f"| {'–' if math.isnan(us) else f'{us:,.0f}'} | {on['cpu'] / on['seconds'] * 100:.2f} "
            f"| {off['cpu'] / off['seconds'] * 100:.2f} | {on['samples']} / {off['samples']} "
            f"| {b['rss_before_mb']:.0f} → {b['rss_after_mb']:.0f} |"
        )
        if on["task_errors"]:
            lines.append(
                f"|   | failed scans: {on['task_errors']} ({on['task_last_error']}) ||||||||"
            )
    REPORT.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--versions", default=",".join(VERSIONS))
    parser.add_argument("--counts", default=",".join(str(n) for n in COUNTS))
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the report from the JSON"
    )
    args = parser.parse_args()
    if args.report_only:
        data = json.loads(RESULTS.read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            counts = [int(n) for n in args.counts.split(",")]
            data = run(args.versions.split(","), counts, args.rounds, args.seconds, Path(tmp))
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    write_report(data)
    print(REPORT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
