"""The sections of benchmarks/REPORT.md, one per part of ``benchmarks/bench.py``, and the
figures they and the goals table share."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from benchmarks import cost, rates
from benchmarks.overhead import LEGS, paired

LABELS = {
    "none": "no profiler",
    "sidecar": "sidecar (default)",
    "sidecar-blocking": "sidecar --blocking",
    "py-spy": "py-spy (default: blocking)",
    "py-spy-nonblocking": "py-spy --nonblocking",
    "floor": "sleep loop (the machine's floor)",
}
GOALS = {"sidecar": 0.995, "sidecar-blocking": 0.98}
LATENCY_GOALS = {"sidecar": 1.02, "sidecar-blocking": 1.05}
#: serve's CPU per target, everything included, at most; and what that leaves per sample at 100 Hz.
CPU_GOAL = 0.0025
BUDGET_US = CPU_GOAL * 1e6 / 100


def med(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def span(values: Iterable[float], fmt: str = "{:.3f}", scale: float = 1.0) -> str:
    """``min–max`` of the values."""
    values = [v * scale for v in values]
    if not values:
        return "–"
    return f"{fmt.format(min(values))}–{fmt.format(max(values))}"


def met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def judged(ratios: list[float], goal: float, *, at_least: bool, noise: float | None = None) -> str:
    """Met when the median and every round meet the goal; a median that meets it while some
    round does not is not shown to be met (the spread is wider than the margin). When the
    reference leg alone varies (``noise``, relative) by more than the goal's margin, only a
    goal missed in every round is a verdict; anything else cannot be told."""
    if not ratios:
        return "–"

    def good(value: float) -> bool:
        return value >= goal if at_least else value <= goal

    if len(ratios) < 3:
        return "**not resolved**: fewer than 3 rounds"
    margin = abs(1.0 - goal)
    if noise is not None and noise > margin:
        if not any(good(value) for value in ratios):
            return "**not met** (in every round, beyond the noise)"
        return (
            f"**not resolved**: the reference alone varied {noise * 100:.0f}% "
            f"against a margin of {margin * 100:g}%"
        )
    if not good(med(ratios)):
        return "**not met**"
    if all(good(value) for value in ratios):
        return "**met**"
    return "**not shown** (median meets it, the spread crosses it)"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


# -- parts ---------------------------------------------------------------------------------


def per_cpu(leg: dict[str, Any]) -> float:
    """Requests per second of CPU time the target's thread got."""
    return float(leg["rps"]) / max(1e-9, float(leg["cpu_share"]))


def spread(values: list[float]) -> float:
    """(max - min) / median: how much a leg varied between rounds."""
    return (max(values) - min(values)) / med(values) if values else 0.0


def overhead_figures(o: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    legs = o["legs"]
    for leg in LEGS:
        mine = [r for r in legs if r["leg"] == leg]
        out[leg] = {
            "rps": [r["rps"] for r in mine],
            "adjusted": [r["rps_adjusted"] for r in mine],
            "cpu": [r["cpu_share"] for r in mine],
            "wait": [r["wait_share"] for r in mine],
            "p50": [r["paced"]["p50_us"] for r in mine],
            "p99": [r["paced"]["p99_us"] for r in mine],
            "p999": [r["paced"]["p999_us"] for r in mine],
            "paced_rps": [r["paced"]["rps"] for r in mine],
            "load": [r["load"] for r in mine],
            "sampled": [r["profiler"].get("rate", 0.0) for r in mine],
            "errors": sum(int(r["profiler"].get("errors", 0)) for r in mine),
            "samples": sum(int(r["profiler"].get("samples", 0)) for r in mine),
            "ratio": paired(legs, leg, lambda r: r["rps"]),
            "ratio_adjusted": paired(legs, leg, lambda r: r["rps_adjusted"]),
            "ratio_per_cpu": paired(legs, leg, per_cpu),
            "stopped": [r.get("stopped_share", 0.0) for r in mine],
            "ratio_model": paired(
                legs, leg, lambda r: per_cpu(r) * (1 - r.get("stopped_share", 0.0))
            ),
            "p99_ratio": paired(legs, leg, lambda r: r["paced"]["p99_us"]),
        }
    return out


def throughput_section(o: dict[str, Any]) -> list[str]:
    f = overhead_figures(o)
    lines = [
        "## 1. Target throughput at saturation",
        "",
        f"`targets/aiohttp_app.py --uvloop` pinned to CPU 0 (`taskset -c 0`), route `{o['path']}`;"
        f" wrk (1 thread, 32 connections) and the profilers pinned to CPU 1; target, wrk and "
        f"profilers at nice {o.get('nice', 0)} so that the other work on the machine takes less "
        f"of their CPUs. {o['rounds']} rounds; in each, every leg attaches its profiler at "
        f"{o['rate_hz']:g} Hz, drives the target saturated for {o['seconds']:g} s (then the "
        "latency run of part 2) and detaches; the order of the legs rotates every round. Ratios "
        "are paired per round (a leg against the no-profiler leg of the same round); the table "
        "gives their median and min–max. py-spy runs `py-spy record --rate 100` in its "
        "**default mode, which pauses the whole process (every thread) with ptrace for each "
        "sample**.",
        "",
        "Besides requests per second (the goal's figure), two figures that other work on the "
        "machine cannot move: *per CPU-second*, requests per second of CPU time the target's "
        "thread got (`/proc/PID/task/TID/schedstat`): what a request costs the target, so any "
        "slowdown of its code by a profiler reading it shows, its stops do not; and *stopped*, "
        "the share of the saturated run the target's thread spent in ptrace stop (state `t`, "
        "polled from `/proc/PID/task/TID/stat` about every 0.6 ms). *Modeled* is their product "
        "against the no-profiler leg, per CPU-second × (1 − stopped): the throughput ratio of a "
        "target that owns its core, what the goal asks about.",
        "",
        "| leg | req/s median (min–max) | ratio to none | goal | per CPU-second ratio "
        "| stopped | modeled ratio | on CPU / waiting for it "
        "| profiler samples/s (py-spy: stacks/s) | load avg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def paired_cell(values: list[float]) -> str:
        return f"{med(values):.3f} ({span(values)})"

    for leg in LEGS:
        x = f[leg]
        none = leg == "none"
        goal = f"≥ {GOALS[leg]:g}" if leg in GOALS else ""
        sampled = "" if none else f"{med(x['sampled']):.1f}"
        lines.append(
            f"| {LABELS[leg]} | {med(x['rps']):,.0f} ({span(x['rps'], '{:,.0f}')}) "
            f"| {'1' if none else paired_cell(x['ratio'])} | {goal} "
            f"| {'1' if none else paired_cell(x['ratio_per_cpu'])} "
            f"| {med(x['stopped']) * 100:.2f}% ({span(x['stopped'], '{:.2f}', 100)}) "
            f"| {'1' if none else paired_cell(x['ratio_model'])} "
            f"| {med(x['cpu']) * 100:.0f}% / {med(x['wait']) * 100:.0f}% "
            f"| {sampled} | {span(x['load'], '{:.1f}')} |"
        )
    none_rps = f["none"]["rps"]
    noise = (max(none_rps) - min(none_rps)) / med(none_rps) if none_rps else 0
    lines += [
        "",
        f"Resolution: the no-profiler leg alone varied by {noise * 100:.0f}% between rounds "
        f"(its req/s min–max over the median), against goals of 0.5% and 2%. Saturation "
        f"measured first without a profiler: {o['saturation']:,.0f} req/s.",
    ]
    errors = f["sidecar"]["errors"]
    if errors:
        lines.append(
            f"sidecar's non-blocking reads failed on {errors} of "
            f"{errors + f['sidecar']['samples']} ticks (the target changed its frames mid-read; "
            "counted as errors, never stored)."
        )
    return [*lines, ""]


def latency_section(o: dict[str, Any]) -> list[str]:
    f = overhead_figures(o)
    lines = [
        "## 2. Target latency at half the saturation rate",
        "",
        f"The same legs, right after the saturated run: wrk at a fixed {o['paced_rate']:,} req/s "
        "(half of the saturation rate; `benchmarks/wrk_report.lua` gives every request a slot "
        "on one schedule, 50 connections), latency per request as wrk measures it (µs). The "
        "p99 ratio is paired per round like the throughput.",
        "",
        "| leg | achieved req/s | p50 | p99 median (min–max) | p99 ratio to none | goal | p99.9 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for leg in LEGS:
        x = f[leg]
        ratio = (
            "1"
            if leg == "none"
            else f"{med(x['p99_ratio']):.2f} ({span(x['p99_ratio'], '{:.2f}')})"
        )
        goal = f"≤ {LATENCY_GOALS[leg]:g}" if leg in LATENCY_GOALS else ""
        lines.append(
            f"| {LABELS[leg]} | {med(x['paced_rps']):,.0f} | {med(x['p50']) / 1000:.2f} ms "
            f"| {med(x['p99']) / 1000:.2f} ms ({span(x['p99'], '{:.2f}', 1e-3)}) | {ratio} "
            f"| {goal} | {med(x['p999']) / 1000:.1f} ms |"
        )
    return [*lines, ""]


def pause_figures(p: dict[str, Any]) -> dict[tuple[str, int], dict[str, list[float]]]:
    out: dict[tuple[str, int], dict[str, list[float]]] = {}
    for run in p["runs"]:
        entry = out.setdefault(
            (run["mode"], run["threads"]), {"p99": [], "mean": [], "max": [], "read": []}
        )
        entry["p99"].append(run["blocking"]["pause_p99"])
        entry["mean"].append(run["blocking"]["pause_mean"])
        entry["max"].append(run["blocking"]["pause_max"])
        entry["read"].append(run["nonblocking"]["read_mean"])
    return out


def paired_pauses(p: dict[str, Any], mode: str) -> list[float]:
    """Per round: pause p99 with the 150 native threads over the p99 without."""
    by_round: dict[int, dict[int, float]] = {}
    for run in p["runs"]:
        if run["mode"] == mode:
            by_round.setdefault(run["round"], {})[run["threads"]] = run["blocking"]["pause_p99"]
    return [r[150] / r[0] for r in by_round.values() if 0 in r and 150 in r and r[0] > 0]


def pauses_section(
    p: dict[str, Any],
) -> tuple[list[str], dict[str, tuple[float, float, str]]]:
    f = pause_figures(p)
    lines = [
        "## 3. Pause per sample in blocking mode",
        "",
        "`targets/native_threads.py`: one Python thread (20 frames deep, on CPU 20% of the "
        "time), once alone and once with 150 extra threads made by `pthread_create` (ctypes) "
        "that sit in libc's `pause()` with all signals blocked, never running Python. Each is "
        f"sampled by the native `Sampler` in blocking mode at {p['rate_hz']:g} Hz for "
        f"{p['seconds']:g} s ({p['rounds']} rounds, alternating), reading its own counters "
        "(`pause_p99` over the run's pauses), then non-blocking for half as long (its "
        "`read_mean`: the same read without any stop). *normal*: as the machine is; *rt*: "
        "targets and sampler at real-time priority (`chrt -f`), so other work on the machine "
        "cannot preempt them in the middle of a pause.",
        "",
        "| mode | target | pause p99 median (min–max) | pause mean | pause max "
        "| non-blocking read mean |",
        "|---|---|---:|---:|---:|---:|",
    ]
    verdicts: dict[str, tuple[float, float, str]] = {}
    for mode in p["modes"]:
        for threads in (0, 150):
            x = f.get((mode, threads))
            if not x:
                continue
            name = "1 Python thread" + (" + 150 native threads" if threads else "")
            lines.append(
                f"| {mode} | {name} | {us(med(x['p99']))} ({span(x['p99'], '{:,.0f}', 1e6)}) "
                f"| {us(med(x['mean']))} | {us(med(x['max']))} | {us(med(x['read']))} |"
            )
        one, many = f.get((mode, 0)), f.get((mode, 150))
        if one and many:
            ratios = paired_pauses(p, mode)
            verdict = judged(ratios, 1.1, at_least=False, noise=spread(one["p99"]))
            verdicts[mode] = (med(one["p99"]), med(many["p99"]) / med(one["p99"]), verdict)
    lines.append("")
    for mode, (p99, ratio, verdict) in verdicts.items():
        one, many = f[(mode, 0)], f[(mode, 150)]
        grow = med(many["read"]) - med(one["read"])
        lines.append(
            f"- {mode}: p99 {us(p99)} with one Python thread (goal ≤ 50 µs: "
            f"{met(p99 <= 50e-6)}); with 150 idle native threads {ratio:.2f}x that (goal ≤ 1.1x: "
            f"{verdict}). The non-blocking read alone grows by {us(grow)} with the 150 "
            f"threads, {grow / 150 * 1e6:.1f} µs per thread. With one thread, the mean pause "
            f"({us(med(one['mean']))}) is the read ({us(med(one['read']))}) plus "
            f"{us(med(one['mean']) - med(one['read']))} of stopping and resuming."
        )
    for mode, fl in p.get("floors", {}).items():
        bare = fl["pause"]
        lines.append(
            f"- the machine's floor ({mode}): a bare ptrace stop and resume of the same "
            f"thread with nothing read (`native/examples/floor.rs`, remoteprocess as blocking "
            f"mode uses it, {bare['ticks']} ticks at {fl['rate_hz']:g} Hz) takes "
            f"{bare['mean_us']:.0f} µs on average and {bare['p99_us']:,.0f} µs at p99 "
            f"(max {bare['max_us']:,.0f} µs)"
            + (
                ": the stop and resume alone exceed the goal's 50 µs, before anything is read."
                if bare["p99_us"] > 50
                else "."
            )
        )
    text = (
        "What the pause holds: blocking mode reads the on-CPU state of the Python threads "
        "first, then seizes and interrupts only them, reads their stacks, and resumes them; "
        "native threads are never touched."
    )
    normal, rt = f.get(("normal", 0)), f.get(("rt", 0))
    if normal and rt:
        slower = med(normal["p99"]) > med(rt["p99"])
        text += (
            f" With one Python thread the p99 is {us(med(normal['p99']))} as the machine is "
            f"(*normal*) and {us(med(rt['p99']))} at real-time priority (*rt*)"
            + (
                ": on the machine as it is, the stopped thread also waits for a CPU to be "
                "stopped and resumed."
                if slower
                else "."
            )
        )
    lines += ["", text, ""]
    return lines, verdicts


def cost_figures(c: dict[str, Any]) -> dict[str, Any]:
    targets = c["targets"]
    timing = c["timing"]
    rate = timing["ticks_median"] / c["window"] if timing["ticks_median"] else c["rate_hz"]
    per_second = targets * rate
    sampler_us = c["cpu"]["sampler"] / per_second
    python_us = c["cpu"]["python"] / per_second
    perf = c["perf"]
    native_keys = [k for k, _ in cost.CATEGORIES if not k.startswith(("python", "sqlite"))]
    native_total = sum(perf.get(k, 0) for k in native_keys)
    ticks = max(1.0, timing["ticks_median"])
    classify = med(timing["classify_warm"]) / ticks
    classify_cold = med(timing["classify_cold"]) / ticks
    write = med(timing["write"] or timing["write_first"]) / ticks
    discovery = med(c["discovery"]) / 2.0 / targets / rate
    calls = {
        name: count / (per_second * c["syscall_seconds"]) for name, count in c["syscalls"].items()
    }
    return {
        "rate": rate,
        "sampler": sampler_us,
        "python": python_us,
        "perf": perf,
        "native_total": native_total,
        "all_total": sum(perf.values()),
        "classify": classify,
        "classify_cold": classify_cold,
        "write": write,
        "discovery": discovery,
        "calls": calls,
    }


def cpu_range(c: dict[str, Any]) -> tuple[int, float, float] | None:
    """Serve's CPU per target over the cost part's rounds: (rounds, lowest, highest), when it
    was taken in rounds."""
    rounds = c.get("cpu_per_target_rounds")
    return (len(rounds), min(rounds), max(rounds)) if rounds else None


def cpu_rounds(c: dict[str, Any]) -> str:
    """How the CPU figure was taken, when in rounds: their count and spread."""
    spread = cpu_range(c)
    if spread is None:
        return ""
    count, low, high = spread
    return (
        f" in {count} rounds: the median round counts, the rounds ranged "
        f"{low * 100:.3f}–{high * 100:.3f}% per target"
    )


def cost_section(c: dict[str, Any]) -> list[str]:
    f = cost_figures(c)
    per_target = c["cpu_per_target"]
    rate = f["rate"]
    perf, native_total = f["perf"], max(1, f["native_total"])

    def share(*keys: str) -> float:
        return sum(perf.get(k, 0) for k in keys) / native_total

    lines = [
        "## 4. Sidecar CPU per target",
        "",
        f"`sidecar serve` (100 Hz, 10 s windows, SQLite) on {c['targets']} `targets/deep.py` "
        "processes: an event loop whose stacks are ~30 frames deep (29–31 Python frames), "
        "10% on CPU, the rest in `time.sleep` at the same depth, stacks varying by call chain, "
        f"leaf and line. After a {c['warmup']:g} s warm-up, the serve process's CPU time "
        f"(`/proc/PID/task/*/schedstat`) over {c['seconds']:g} s{cpu_rounds(c)}, load average "
        f"{c['load'][0]:.1f}–{c['load'][1]:.1f}.",
        "",
        "| measure | figure | goal | met |",
        "|---|---:|---:|---|",
        f"| CPU per target, everything included | {per_target * 100:.2f}% of a core | ≤ 0.25% "
        f"| {met(per_target <= CPU_GOAL)} |",
        f"| of which the native sampler threads | {c['cpu']['sampler'] / c['targets'] * 100:.2f}%"
        " | | |",
        f"| of which the Python threads (classify, store, discovery, HTTP server) "
        f"| {c['cpu']['python'] / c['targets'] * 100:.3f}% | | |",
        "",
        f"### Per sample (one target, {rate:.1f} samples/s achieved)",
        "",
        "| part | per sample | % of a core at 100 Hz | how measured |",
        "|---|---:|---:|---|",
        f"| sampler thread, all of it | {f['sampler'] * 1e6:.1f} µs CPU "
        f"| {f['sampler'] * 100 * 100:.2f}% | serve's sampler threads, /proc |",
    ]
    for key, label in cost.CATEGORIES:
        if key.startswith(("python", "sqlite")) or not perf.get(key):
            continue
        part = perf[key] / native_total * f["sampler"]
        lines.append(
            f"| &nbsp;&nbsp;{label} | {part * 1e6:.1f} µs | {part * 100 * 100:.3f}% "
            f"| perf: {perf[key] / native_total * 100:.1f}% of the sampler's samples |"
        )
    sampler = c["sampler"]
    lines += [
        f"| read, wall time (memory reads and the run state of the Python threads) "
        f"| {sampler['read_mean'] * 1e6:.1f} µs | | `Sampler` counter `read_mean` |",
        f"| fold, wall time | {sampler['fold_mean'] * 1e6:.1f} µs | | `Sampler` counter "
        "`fold_mean` |",
        f"| pause (blocking mode only; the target stands, not sidecar CPU) "
        f"| {c['sampler_blocking']['pause_mean'] * 1e6:.1f} µs mean, "
        f"{c['sampler_blocking']['pause_p99'] * 1e6:.0f} µs p99 | | `Sampler` counters |",
        f"| Python threads, all of it | {f['python'] * 1e6:.2f} µs CPU "
        f"| {f['python'] * 100 * 100:.3f}% | serve's other threads, /proc |",
        f"| &nbsp;&nbsp;classification per window (warm cache), per sample "
        f"| {f['classify'] * 1e6:.3f} µs | {f['classify'] * 1e4:.4f}% "
        f"| `Sessions._batch` over {c['timing']['windows']} stored windows; cold cache "
        f"{f['classify_cold'] * 1e6:.2f} µs |",
        f"| &nbsp;&nbsp;`Store.write` per window, per sample | {f['write'] * 1e6:.2f} µs "
        f"| {f['write'] * 1e4:.4f}% | the same windows, one write each (median "
        f"{med(c['timing']['write'] or c['timing']['write_first']) * 1e3:.2f} ms per window "
        f"of {c['timing']['rows_median']:.0f} rows) |",
        f"| &nbsp;&nbsp;discovery scan every 2 s, per target and sample "
        f"| {f['discovery'] * 1e6:.2f} µs | {f['discovery'] * 1e4:.4f}% "
        f"| `sessions.scan` {med(c['discovery']) * 1e3:.2f} ms per scan of /proc |",
        "",
        *readers_table(c),
        *clocks_table(c),
        *floor_lines(c),
        "System calls per sample (`perf stat` on the syscall tracepoints, "
        f"{c['syscall_seconds']:g} s): "
        + ", ".join(f"`{name}` {count:.1f}" for name, count in f["calls"].items() if count)
        + ".",
        "",
    ]
    vm = share("vm_copy", "vm_pages", "vm_call")
    calls = f["calls"].get("process_vm_readv", 0)
    lines += [
        "### Where the sampler's CPU goes",
        "",
        f"perf (`perf record -e cpu-clock -g -p SERVE`, {c['perf_seconds']:g} s, "
        f"{f['all_total']:,} samples, {f['native_total']:,} of them on sampler threads), with "
        f"stacks read by {c['sampler'].get('reader', 'the sampler')}:",
        "",
        f"- `process_vm_readv` is {vm * 100:.0f}% of the sampler's CPU: copying the bytes "
        f"{share('vm_copy') * 100:.0f}%, finding and pinning the target's pages for each "
        f"remote piece (VMA lookup, get_user_pages, mm and ptrace access checks) "
        f"{share('vm_pages') * 100:.0f}%, syscall entry, iovec copy-in and the machine's "
        f"syscall tracing hooks {share('vm_call') * 100:.0f}%: {calls:.1f} calls per sample "
        f"of a ~30-frame stack{pieces_per_sample(c)}.",
        f"- /proc reads (run state of the Python threads, the target's identity) "
        f"{share('proc_io', 'proc_regex') * 100:.1f}%, "
        f"{f['calls'].get('openat', 0):.1f} `openat` and {f['calls'].get('pread64', 0):.1f} "
        "`pread64` per sample.",
        f"- the frame walker itself {share('walker') * 100:.1f}%, py-spy "
        f"{share('pyspy', 'line_numbers') * 100:.1f}%, malloc/free {share('alloc') * 100:.1f}%, "
        f"sidecar's loop (windows, identity check) {share('fold') * 100:.1f}%; sleeping and "
        f"waking {share('sleep') * 100:.1f}%, other kernel work "
        f"{share('kernel_other') * 100:.1f}%.",
        "",
    ]
    return lines


def rates_section(r: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    runs = r["runs"]
    lines = [
        "## 5. Sampling rate",
        "",
        "`targets/deep.py` (one event-loop thread, ~30-frame stacks). At each rate of the "
        f"ladder, each profiler CLI samples for {r['seconds']:g} s; the order rotates per rate. "
        "sidecar: `sidecar record`, its own counters: share of ticks late (> ¼ period after "
        "their deadline) or missed (skipped after falling a period behind). py-spy: `py-spy "
        "record --idle`, which never skips or counts late samples (its timer draws exponential "
        "intervals and samples back to back to catch up; it only prints a warning past 1 s "
        "behind), so its figure is the share of asked samples it did not take (over the time "
        "from its start line to the SIGINT), a shortfall counting only beyond 2 standard "
        "deviations of its random schedule. Cells: share, ✓ under 1%. *normal*: as the machine "
        "is; *rt*: the profilers at real-time priority (`chrt -f 1`). A profiler that lost over "
        "10% at two rates in a row is not run higher. *sleep loop*: not a profiler but a loop "
        "that only sleeps to the same schedule under sidecar's rules (`benchmarks/floor.py`): "
        "what this machine's timers and scheduler allow any sampler.",
        "",
    ]
    tools = r["tools"]
    summary: dict[str, Any] = {}
    for mode in r["modes"]:
        lines += [
            f"**{mode}**",
            "",
            "| rate (Hz) | " + " | ".join(LABELS[t] for t in tools) + " | load avg |",
            "|---:|" + "---:|" * len(tools) + "---:|",
        ]
        for rate in r["rates"]:
            cells = []
            loads = []
            for tool in tools:
                mine = [
                    x for x in runs if x["mode"] == mode and x["tool"] == tool and x["rate"] == rate
                ]
                if not mine:
                    cells.append("–")
                    continue
                loads += [x["load"] for x in mine]
                shares = [x.get("late_share", x["short_share"]) for x in mine]
                ok = all(x["ok"] for x in mine)
                extra = ""
                if tool.startswith("sidecar") or tool == "floor":
                    extra = f" (missed {med(x['short_share'] for x in mine) * 100:.1f}%)"
                cells.append(f"{med(shares) * 100:.1f}%{extra} {'✓' if ok else '✗'}")
            lines.append(f"| {rate:g} | " + " | ".join(cells) + f" | {med(loads):.1f} |")
        best = {t: rates.highest(runs, t, mode) for t in tools}
        achieved = rates.highest(runs, "sidecar", mode, "ok_achieved")
        summary[mode] = {"best": best, "achieved": achieved}
        lines += [
            "",
            "Highest rate under 1%: "
            + ", ".join(f"{LABELS[t]} {_hz(best[t], r['rates'])}" for t in tools)
            + f"; sidecar counting only missed samples (like py-spy's figure) "
            f"{_hz(achieved, r['rates'])}.",
            "",
        ]
    return lines, summary


def _hz(rate: float | None, ladder: list[float]) -> str:
    return f"{rate:g} Hz" if rate else f"below {min(ladder):g} Hz"


def _ratio(a: float | None, b: float | None) -> float:
    if not a:
        return 0.0
    if not b:
        return float("inf")
    return a / b


def store_section(s: dict[str, Any]) -> list[str]:
    live = s["live"]
    return [
        "## 6. Storage and queries",
        "",
        f"`benchmarks/store.py` (its own report: REPORT-store.md): `sidecar serve` at 100 Hz on "
        f"the demo's aiohttp and Tornado services under the demo's wrk load for "
        f"{s['minutes']:g} min (growth over the second half), then a 24 h database replayed "
        "from those windows and downsampled as the service does; profile queries of the last "
        "1 h and 24 h, median of 7.",
        "",
        "| measure | figure | goal | met |",
        "|---|---:|---:|---|",
        f"| database per target-hour | {s['mb_per_target_hour']:.3f} MB | ≤ 1 MB "
        f"| {met(s['mb_per_target_hour'] <= 1)} |",
        f"| query, last 1 h | {s['query_1h'] * 1000:.1f} ms "
        f"({span(s['times']['1h'], '{:.1f}', 1e3)}) | | |",
        f"| query, last 24 h | {s['query_24h'] * 1000:.1f} ms "
        f"({span(s['times']['24h'], '{:.1f}', 1e3)}) | | |",
        f"| 24 h / 1 h | {s['ratio']:.2f}x | ≤ 2x | {met(s['ratio'] <= 2)} |",
        f"| serve CPU per target under the demo load (2 targets) "
        f"| {live['cpu_per_target'] * 100:.2f}% | (the CPU goal) | |",
        "",
        "The store keeps stacks once, as a prefix tree of frames, and each window of each "
        "process as one row: its (stack, thread, state) counts packed column by column and "
        "deflated (`sidecar/store/counts.py`, schema 4); the windows table carries the "
        "per-state sums the timeline reads.",
        *store_parts(live),
        f"Over the second half ({live['seconds'] / 120:g} min) the database grew by "
        f"{grown_pages(live):.0f} pages of 4 KiB, so the per-hour figure moves in steps of "
        f"{4096 / (live['seconds'] / 2 / 3600) / 2 / 1e6:.3f} MB. "
        f"The 24 h database holds {s['day_bytes'] / 1e6:.2f} MB for two targets: "
        f"{s['day_bytes'] / 48 / 1e6:.3f} MB per target-hour kept, after downsampling.",
        "",
    ]


def grown_pages(live: dict[str, Any]) -> float:
    """Pages the recorded database grew by over the measured half (two targets)."""
    return float(live["bytes_per_target_hour"] * 2 * live["seconds"] / 2 / 3600 / 4096)


def store_parts(live: dict[str, Any]) -> list[str]:
    """What the recorded database's pages hold, when the run measured it."""
    parts = live.get("parts")
    if not parts:
        return [""]
    total = sum(parts.values()) or 1
    return [
        f" At the end of the run its {total / 1e3:,.0f} kB held: "
        + ", ".join(f"{name} {size / total:.0%}" for name, size in parts.items())
        + ".",
        "",
    ]


def leg_medians(
    legs: dict[str, list[dict[str, Any]]] | None, fields: dict[str, str], first: str
) -> dict[str, dict[str, Any]] | None:
    """Per leg of a side-by-side comparison in part 4: the median over its rounds of each
    field (name → key of a round's figures), and ``first``: that key of its first round."""
    if not legs or not all(legs.values()):
        return None
    return {
        name: {
            **{field: med([r[key] for r in runs]) for field, key in fields.items()},
            first: runs[0].get(first, name),
        }
        for name, runs in legs.items()
    }


def readers_figures(c: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """Median CPU and read time per sample of each reader, and which reader it was."""
    return leg_medians(
        c.get("readers"), {"cpu": "thread_cpu_per_sample", "read": "read_mean"}, "reader"
    )


def floor_lines(c: dict[str, Any]) -> list[str]:
    """The machine's floor for the CPU goal, when the run measured it."""
    fl = c.get("floor")
    if not fl:
        return []
    sleep, read = fl["sleep"], fl["read"]
    return [
        "",
        f"The machine's floor (`native/examples/floor.rs`, {read['ticks']} ticks at "
        f"{fl['rate_hz']:g} Hz): a native thread that only wakes up to the schedule uses "
        f"{sleep['cpu_per_tick_us']:.1f} µs of CPU per tick; one that also reads 64 bytes of "
        f"the target per tick (one `process_vm_readv`, the least a sampler reads) "
        f"{read['cpu_per_tick_us']:.1f} µs, {read['cpu_per_tick_us'] / 100:.2f}% of a core at "
        f"{fl['rate_hz']:g} Hz, against the goal's 25 µs (0.25%) for everything.",
        *shape_lines(c),
        "",
    ]


def pieces_per_sample(c: dict[str, Any]) -> str:
    """ ", naming N pieces" from the shared-clock leg, when the run counted them."""
    reads = shared_reads(c)
    if reads is None:
        return ""
    return f", naming {reads['read_pieces']:.1f} remote pieces (a page each to pin)"


def shared_reads(c: dict[str, Any]) -> dict[str, Any] | None:
    """The last shared-clock leg's sampler stats, when they count the walker's reads."""
    legs = c.get("clocks", {}).get("shared")
    return legs[-1] if legs and "read_pieces" in legs[-1] else None


def shape_lines(c: dict[str, Any]) -> list[str]:
    """The floor of a read shaped like the walker's, when the run measured it."""
    shape, last = c.get("floor", {}).get("shape"), shared_reads(c)
    if not shape or not shape.get("ticks") or last is None:
        return []
    return [
        "",
        f"Sidecar's reads on the shared clock took {last['read_calls']:.2f} `process_vm_readv` "
        f"calls per sample, naming {last['read_pieces']:.1f} remote pieces (the current frame "
        f"and the top of the data stack, thread states, frames outside it, and the header of "
        f"every code object on the stack, checked each sample so that a freed and reused "
        f"address is noticed at once) and copying {last['read_bytes']:,.0f} bytes. A bare "
        f"read of that shape ({shape['pieces']} pieces, each on a page of its own, "
        f"{shape['bytes']:,} bytes) costs the floor program {shape['cpu_per_tick_us']:.1f} µs "
        f"of CPU per tick, waking included.",
    ]


def wake_lines(c: dict[str, Any]) -> list[str]:
    w = c.get("wake")
    if not w:
        return []
    return [
        "What one `process_vm_readv` of 64 bytes costs on this machine (median over 300 ticks, "
        "`benchmarks/cost.py:wake_penalty`): the first of a tick that follows a 10 ms sleep "
        f"{w['first_after_sleep'] / 1e3:.1f} µs, the later ones of the same tick "
        f"{w['later_after_sleep'] / 1e3:.1f} µs, back to back without sleeping "
        f"{w['back_to_back'] / 1e3:.1f} µs (a trivial system call right after waking: "
        f"{w['syscall_after_sleep'] / 1e3:.1f} µs)"
        + (
            ": a sampler at 100 Hz pays the first price once per target and tick, whatever "
            "it reads."
            if w["first_after_sleep"] > w["later_after_sleep"]
            else "."
        ),
        "",
    ]


def clocks_figures(c: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """Median CPU per sample and late share with every target on its own sampling thread
    and with all on the shared clock, and how many targets."""
    return leg_medians(
        c.get("clocks"), {"cpu": "thread_cpu_per_sample", "late": "late_share_all"}, "targets"
    )


def clocks_table(c: dict[str, Any]) -> list[str]:
    f = clocks_figures(c)
    if f is None:
        return []
    own, shared = f["own"], f["shared"]
    return [
        "",
        f"One sampling thread per target against the shared clock (how `serve` samples): "
        f"the same {own['targets']:g} `targets/deep.py` processes "
        f"sampled at 100 Hz, {len(c['clocks']['own'])} alternating rounds of 5 s each, CPU "
        "of the sampling threads per sample (median of rounds):",
        "",
        "| sampling threads | CPU per sample | % of a core per target at 100 Hz | late or missed |",
        "|---|---:|---:|---:|",
        f"| one per target | {own['cpu'] * 1e6:.1f} µs | {own['cpu'] * 1e4:.2f}% "
        f"| {own['late']:.2%} |",
        f"| one for all (shared clock) | {shared['cpu'] * 1e6:.1f} µs "
        f"| {shared['cpu'] * 1e4:.2f}% | {shared['late']:.2%} |",
        f"| ratio | {shared['cpu'] / max(1e-12, own['cpu']):.2f}x | | |",
    ]


def readers_table(c: dict[str, Any]) -> list[str]:
    f = readers_figures(c)
    if f is None:
        return wake_lines(c)
    auto, pyspy = f["auto"], f["py-spy"]
    rounds = len(c["readers"]["auto"])
    return [
        "",
        f"The two readers side by side: one `targets/deep.py` process sampled at 100 Hz "
        f"without stopping it, {rounds} alternating rounds of 5 s each, CPU of the sampling "
        "thread from its scheduler statistics (median of rounds):",
        "",
        "| reader | sampling thread CPU per sample | read, wall time | % of a core at 100 Hz |",
        "|---|---:|---:|---:|",
        f"| {auto['reader']} | {auto['cpu'] * 1e6:.1f} µs | {auto['read'] * 1e6:.1f} µs "
        f"| {auto['cpu'] * 1e4:.2f}% |",
        f"| {pyspy['reader']} | {pyspy['cpu'] * 1e6:.1f} µs | {pyspy['read'] * 1e6:.1f} µs "
        f"| {pyspy['cpu'] * 1e4:.2f}% |",
        f"| ratio | {auto['cpu'] / max(1e-12, pyspy['cpu']):.2f}x "
        f"| {auto['read'] / max(1e-12, pyspy['read']):.2f}x | |",
        "",
        *wake_lines(c),
    ]
