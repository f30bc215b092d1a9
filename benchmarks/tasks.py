"""What the asyncio task scan costs, per task and per scan, and what it adds to the thread sampler.

For each CPython version and count of live tasks (``targets/tasks_many.py --tasks N``, every task
parked two coroutines deep), one ``Sampler`` at 100 Hz reads the target for ``--seconds`` after a
warm-up, in interleaved legs: without task scans, with scans at 10 Hz, and with scans that re-read
every chain (``task_cache=False``). Measured: the sampling threads' CPU (schedstat), the scan
thread's, the scans and task-samples, the thread samples' figures. A scan's cost is the CPU of the
leg with scans minus the leg without, over the scans and the tasks each read; the scan thread's
own CPU likewise. The targets' tasks: ``request`` → ``handler`` → ``sleeper`` in
``asyncio.sleep``, or ``waiter`` on a pending future. Then 100,000 tasks, past the scan's bound:
tasks read and left unread per scan, a scan's cost, and this process's peak memory.

    python -m benchmarks.tasks [--rounds 1] [--seconds 4] [--versions 3.11,3.12,3.13,3.14]

Writes benchmarks/REPORT-tasks.md and REPORT-tasks.json.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import main, measured, pythons, sampled, sampler_thread_seconds, stamp
from benchmarks.table import Col, Report, med
from sidecar import _native
from tests.support.procs import Procs

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
    with _native.Sampler(pid, rate_hz=RATE, tasks_hz=tasks_hz, task_cache=cache == "on") as sampler:
        time.sleep(WARMUP)
        scan0 = sampler_thread_seconds(("sidecar-tasks",))
        cpu, ((a, b),) = sampled([sampler], 0.0, seconds)
        scan = sampler_thread_seconds(("sidecar-tasks",)) - scan0
    counted = ("samples", "errors", "late", "missed", "task_scans", "task_samples", "task_torn",
               "task_unread", "task_errors")  # fmt: skip
    return {
        "seconds": seconds,
        "cpu": cpu,
        "scan_cpu": scan,
        "lag_mean_ms": b["lag_mean"] * 1e3,
        **{k: int(b[k] - a[k]) for k in counted},
        "task_last_error": b["task_last_error"],
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(
    versions: list[str], counts: list[int], rounds: int, seconds: float, workdir: Path
) -> dict[str, Any]:
    interpreters = pythons(versions)
    legs: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {
        v: {str(n): {name: [] for name, _, _ in LEGS} for n in counts} for v in versions
    }
    big: dict[str, Any] = {}
    with Procs(workdir) as procs:
        for version in versions:
            for count in counts:
                child, _ = procs.target("tasks_many", "--tasks", str(count),
                                        python=interpreters[version])  # fmt: skip
                for round_ in range(rounds):
                    for name, hz, cache in LEGS:
                        r = leg(child.pid, hz, cache, seconds)
                        legs[version][str(count)][name].append(r)
                        print(f"round {round_ + 1} {version} {count:,} tasks, {name}: "
                              f"{r['cpu'] / seconds:.2%} of a core, {r['task_scans']} scans",
                              flush=True)  # fmt: skip
                procs.stop(child)
        for version in [v for v in ("3.11", "3.14") if v in versions]:
            child, _ = procs.target("tasks_many", "--tasks", str(BIG), python=interpreters[version])
            before, length = peak_rss_mb(), max(seconds, BIG_SECONDS)
            off, on = leg(child.pid, 0.0, "on", length), leg(child.pid, TASK_RATE, "on", length)
            big[version] = {"off": off, "on": on, "rss_before_mb": before,
                            "rss_after_mb": peak_rss_mb()}  # fmt: skip
            print(f"{version} {BIG:,} tasks: {on['task_samples']} task-samples", flush=True)
            procs.stop(child)
    return {**stamp(), "rounds": rounds, "seconds": seconds,
            "versions": versions, "counts": counts, "legs": legs, "big": big}  # fmt: skip


def scan_cost(with_tasks: dict[str, Any], without: dict[str, Any]) -> tuple[float, float]:
    """(µs of the sampling thread's CPU per scan, share of a core) the scans added."""
    extra = with_tasks["cpu"] / with_tasks["seconds"] - without["cpu"] / without["seconds"]
    scans_per_s = with_tasks["task_scans"] / with_tasks["seconds"]
    return (extra / scans_per_s * 1e6 if scans_per_s else float("nan")), extra


def leg_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per version, task count and leg: its medians, and the scans' cost against the
    leg without scans of the same rounds."""
    rows = []
    for version in data["versions"]:
        for count in data.get("counts", COUNTS):
            per_leg = data["legs"][version][str(count)]
            base = per_leg["threads only"]
            for name, _, _ in LEGS:
                runs = per_leg[name]
                row = {"version": version, "tasks": count, "leg": name, "runs": runs}
                row |= {k: med(float(r[k]) for r in runs) for k in ("task_scans", "task_samples",
                        "samples", "late", "missed")}  # fmt: skip
                row |= {"torn": sum(r["task_torn"] for r in runs),
                        "unread": sum(r["task_unread"] for r in runs),
                        "cpu": med(r["cpu"] / r["seconds"] for r in runs)}  # fmt: skip
                scans = row["task_scans"]
                row["per_scan"] = row["task_samples"] / scans if scans else 0.0
                if name != "threads only":
                    costs = [scan_cost(r, b) for r, b in zip(runs, base, strict=True)]
                    row["us"], row["share"] = med(c[0] for c in costs), med(c[1] for c in costs)
                    row["per_task"] = row["us"] / row["per_scan"] if row["per_scan"] else math.nan
                    # reports of runs before the scan thread was measured have no scan_cpu
                    row["own"] = med(r.get("scan_cpu", math.nan) / r["seconds"] for r in runs)
                    per_s = scans / runs[0]["seconds"]
                    row["own_per_task"] = (row["own"] * 1e6 / per_s / row["per_scan"]
                                           if row["per_scan"] else math.nan)  # fmt: skip
                rows.append(row)
    return rows


def write_report(data: dict[str, Any], report: Report) -> None:
    report.add(
        "# What the asyncio task scan costs",
        f"{measured(data)}; {data['rounds']} round(s) of {data['seconds']:g} s per leg, "
        f"threads read at {RATE:g} Hz, tasks scanned at {TASK_RATE:g} Hz; the median round counts. "
        "How: `benchmarks/tasks.py`'s docstring.",
    )
    rows = leg_rows(data)
    report.table(rows, [
        Col("version", left=True), Col("tasks", fmt="{:,}"), Col("leg", left=True),
        Col("CPU (% of a core)", lambda r: r["cpu"] * 100, "{:.2f}"),
        Col("scans", "task_scans", "{:.0f}"), Col("task-samples per scan", "per_scan", "{:.0f}"),
        Col("µs per scan", lambda r: r.get("us", "–"), "{:.0f}"),
        Col("µs per task per scan", lambda r: r.get("per_task", "–"), "{:.2f}"),
        Col("scan thread, µs per task per scan", lambda r: r.get("own_per_task", "–"), "{:.2f}"),
        Col("thread samples", "samples", "{:.0f}"), Col("late", fmt="{:.0f}"),
        Col("missed", fmt="{:.0f}"), Col("torn"), Col("unread"),
    ])  # fmt: skip
    points = [
        f"- {r['version']}: scans of {GOAL_TASKS:,} tasks at {TASK_RATE:g} Hz take "
        f"{r['own'] * 100:.2f}% of a core on their thread ({r['own_per_task']:.2f} µs per task per "
        "scan), " + ("not measured against" if math.isnan(r["own"]) else "within" if r["own"] <=
                     GOAL_SHARE else "above") + f" the goal of {GOAL_SHARE * 100:g}%; the sampling "
        f"threads in all used {r['share'] * 100:.2f}% of a core more than without scans (that "
        "difference also holds the runner's adding of each scan's lines to its window, and the "
        "spread between legs)." for r in rows if r["leg"] == "tasks" and r["tasks"] == GOAL_TASKS
    ]  # fmt: skip
    unchanged = sorted(
        {
            f"{r['version']} at {r['tasks']:,} tasks"
            for r, b in zip(rows[1::3], rows[::3], strict=True)
            for x, y in zip(r["runs"], b["runs"], strict=True)
            if x["samples"] < y["samples"] * 0.98 or x["missed"] > y["missed"] + 2
        }
    )
    points.append(
        "- The thread sampler's figures with scans on: "
        + ("its samples within 2% of the leg without scans and no more than 2 more missed "
           "ticks, at every version and count." if not unchanged else
           "fewer samples or more missed ticks than without scans at " + ", ".join(unchanged) + ".")
    )  # fmt: skip
    gains = [
        (r["version"], r["tasks"], n["us"], r["us"])
        for r, n in zip(rows[1::3], rows[2::3], strict=True)
    ]
    ratios = [b / a for _, _, b, a in gains if a > 0 and b > 0]
    noisy, median = len(gains) - len(ratios), med(ratios)
    faster, slower = sum(r > 1.1 for r in ratios), sum(r < 1 / 1.1 for r in ratios)
    report.add("## Against the goal", points, "## The cache of unchanged chains",
        "A parked task whose coroutine, frame position and awaited object are the ones of the "
        "last scan is not walked again: the scanner keeps its chain. The same scans with the "
        "cache off, in the same run (a leg's CPU within the noise of the leg without scans "
        "leaves no ratio):")  # fmt: skip
    report.table(gains, [
        Col("version", lambda g: g[0], left=True), Col("tasks", lambda g: g[1], "{:,}"),
        Col("µs per scan, no cache", lambda g: g[2], "{:.0f}"),
        Col("µs per scan, cache", lambda g: g[3], "{:.0f}"),
        Col("ratio", lambda g: f"{g[2] / g[3]:.1f}x" if g[3] > 0 and g[2] > 0 else "–"),
    ])  # fmt: skip
    report.add(
        f"{noisy} of the targets had a leg with scans that measured no more CPU than the "
        "leg without: within this run's noise, no ratio." * bool(noisy),
        f"Median ratio {median:.2f}x over {len(ratios)} targets: the cache saved more than "
        f"10% on {faster}, cost more than 10% on {slower}, and {len(ratios) - faster - slower} "
        "were within 10%." + (" Without the cache a chain is walked one level of all tasks at a "
        "time, each step one batch of reads: in this run a walk cost about what the cache's "
        "check of each coroutine did." if 1 / 1.1 <= median <= 1.1 else "") if ratios else "",
    )  # fmt: skip
    report.add(
        f"## {BIG:,} tasks: past the scan's bound",
        "A scan reads a bounded number of tasks. Past that bound it reads a slice of them, a "
        "different slice each scan, and counts the others as unread (`task_unread` in the "
        "sampler's stats, a line of `record`'s summary with the share read). The task profile's "
        "counts are not scaled: each task-sample is a task that was read. Scans are held to "
        f"{_native.TASK_SCAN_BUDGET:.0%} of the sampling thread's time, so these come far apart: "
        "the scans column counts them.",
    )
    big = [{"version": v, **b, "scans": max(b["on"]["task_scans"], 1)}
           for v, b in data["big"].items()]  # fmt: skip
    report.table(big, [
        Col("version", left=True), Col("scans", lambda b: b["on"]["task_scans"]),
        Col("task-samples per scan", lambda b: b["on"]["task_samples"] / b["scans"], "{:,.0f}"),
        Col("unread per scan", lambda b: b["on"]["task_unread"] / b["scans"], "{:,.0f}"),
        Col("µs per scan", lambda b: scan_cost(b["on"], b["off"])[0],
            lambda us: "–" if math.isnan(us) else f"{us:,.0f}"),
        Col("CPU with scans (% of a core)", lambda b: b["on"]["cpu"] / b["on"]["seconds"] * 100,
            "{:.2f}"),
        Col("without", lambda b: b["off"]["cpu"] / b["off"]["seconds"] * 100, "{:.2f}"),
        Col("thread samples with / without",
            lambda b: f"{b['on']['samples']} / {b['off']['samples']}"),
        Col("peak RSS of this process before → after (MB)",
            lambda b: f"{b['rss_before_mb']:.0f} → {b['rss_after_mb']:.0f}"),
    ])  # fmt: skip
    failed = [b for b in big if b["on"]["task_errors"]]
    report.add([f"Failed scans on {b['version']}: {b['on']['task_errors']} "
                f"({b['on']['task_last_error']})." for b in failed])  # fmt: skip


if __name__ == "__main__":
    sys.exit(
        main(__doc__, "REPORT-tasks",
             lambda a, w: run(a.versions.split(","), [int(n) for n in a.counts.split(",")],
                              a.rounds, a.seconds, w),
             write_report, {"--rounds": 1, "--seconds": 4.0, "--versions": ",".join(VERSIONS),
                            "--counts": ",".join(str(n) for n in COUNTS)})
    )  # fmt: skip
