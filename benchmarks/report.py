"""benchmarks/REPORT.md from the figures of ``benchmarks/bench.py``: the goals table, a section
per part (how each part measures is in its module's docstring) and what bounds the unmet goals;
every verdict and sentence follows from the figures."""

from __future__ import annotations

from typing import Any

from benchmarks import cost, rates
from benchmarks.overhead import LEGS, paired
from benchmarks.table import Col, Report, cols, med, met, span
from sidecar.store.file import WAL_PAGES
from sidecar.store.retention import DOWNSAMPLE_TIERS

LABELS = {"none": "no profiler", "sidecar": "sidecar (default)",
          "sidecar-blocking": "sidecar --blocking", "py-spy": "py-spy (default: blocking)",
          "py-spy-nonblocking": "py-spy --nonblocking",
          "floor": "sleep loop (the machine's floor)"}  # fmt: skip
GOALS = {"sidecar": 0.995, "sidecar-blocking": 0.98}
LATENCY_GOALS = {"sidecar": 1.02, "sidecar-blocking": 1.05}
#: serve's CPU per target, everything included, at most; and what that leaves per sample at 100 Hz.
CPU_GOAL = 0.0025
BUDGET_US = CPU_GOAL * 1e6 / 100
PROFILERS = ("sidecar", "sidecar-blocking", "py-spy")
REFERENCE = ("none (reference)", None)  # the goal and verdict cells of a leg without a goal

#: What REPORT.json keeps of a run (table.keep): the figures this report reads.
_STATS = {"thread_cpu_per_sample", "read_mean", "fold_mean", "reader", "late_share_all"}
_STATS |= {"targets", "read_calls", "read_pieces", "read_bytes", "pause_mean", "pause_p99"}
SUMMARY = {
    "machine": True, "run": True, "store": True,
    "overhead": {"*": 1, "phase": True, "legs": {
        "leg": 1, "round": 1, "load": 1, "rps": 1, "cpu_share": 1, "wait_share": 1,
        "stopped_share": 1, "paced": {"p50_us", "p99_us", "p999_us", "rps"}, "profiler": True}},
    "pauses": {"*": 1, "modes": True, "phase": True, "floors": True, "runs": {
        "mode": 1, "threads": 1, "round": 1,
        "blocking": {"pause_p99", "pause_mean", "pause_max"}, "nonblocking": {"read_mean"}}},
    "cost": {"*": 1, "sampler": _STATS, "sampler_blocking": _STATS,
             "readers": {"auto": _STATS, "py-spy": _STATS},
             "clocks": {"own": _STATS, "shared": _STATS},
             **dict.fromkeys(("phase", "load", "cpu", "cpu_per_target_rounds", "syscalls", "perf",
                              "timing", "floor", "wake", "discovery"), True)},
    "rates": {"*": 1, "rates": True, "tools": True, "modes": True, "phase": True, "runs": {
        "mode", "tool", "rate", "load", "late_share", "short_share", "ok", "ok_achieved"}},
}  # fmt: skip


def judged(ratios: list[float], goal: float, *, at_least: bool, noise: float | None = None) -> str:
    """Met when the median and every round meet the goal; a median that meets it while some
    round does not is not shown to be met (the spread is wider than the margin). When the
    reference leg alone varies (``noise``, relative) by more than the goal's margin, only a
    goal missed in every round is a verdict; anything else cannot be told."""
    good = [value >= goal if at_least else value <= goal for value in [*ratios, med(ratios)]]
    margin = abs(1.0 - goal)
    if not ratios:
        return "–"
    if len(ratios) < 3:
        return "**not resolved**: fewer than 3 rounds"
    if noise is not None and noise > margin:
        if not any(good[:-1]):
            return "**not met** (in every round, beyond the noise)"
        return (
            f"**not resolved**: the reference alone varied {noise:.0%} "
            f"against a margin of {margin * 100:g}%"
        )
    if not good[-1]:
        return "**not met**"
    return "**met**" if all(good) else "**not shown** (median meets it, the spread crosses it)"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def hz(rate: float | None, ladder: list[float]) -> str:
    return f"{rate:g} Hz" if rate else f"below {min(ladder):g} Hz"


def ratio(a: float | None, b: float | None) -> float:
    return 0.0 if not a else float("inf") if not b else a / b


def per_cpu(leg: dict[str, Any]) -> float:
    """Requests per second of CPU time the target's thread got."""
    return float(leg["rps"]) / max(1e-9, float(leg["cpu_share"]))


def modeled(leg: dict[str, Any]) -> float:
    """Requests per CPU-second × (1 − the share of time stopped)."""
    return per_cpu(leg) * (1 - leg.get("stopped_share", 0.0))


def spread(values: list[float]) -> float:
    """(max - min) / median: how much a leg varied between rounds."""
    return (max(values) - min(values)) / med(values) if values else 0.0


def paired_cell(values: list[float], fmt: str = "{:.3f}") -> str:
    """median (min–max) of a leg's ratios to the no-profiler leg; that leg's own is 1."""
    return f"{fmt.format(med(values))} ({span(values, fmt)})" if values else "1"


# -- 1, 2: throughput and latency ----------------------------------------------------------


def overhead_figures(o: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    legs = o["legs"]
    ratios = {"ratio": lambda r: r["rps"], "ratio_per_cpu": per_cpu, "ratio_model": modeled,
              "p99_ratio": lambda r: r["paced"]["p99_us"]}  # fmt: skip
    for leg in LEGS:
        mine = [r for r in legs if r["leg"] == leg]
        out[leg] = {
            **{k: [r[key] for r in mine] for k, key in (("rps", "rps"), ("cpu", "cpu_share"),
               ("wait", "wait_share"), ("load", "load"), ("stopped", "stopped_share"))},
            **{k: [r["paced"][k] for r in mine] for k in ("p50_us", "p99_us", "p999_us")},
            "paced_rps": [r["paced"]["rps"] for r in mine],
            **{k: paired(legs, leg, value) if leg != "none" else [] for k, value in ratios.items()},
            **{k: [r["profiler"].get(k, 0) for r in mine] for k in ("rate", "errors", "samples")},
        }  # fmt: skip
    return out


def overhead_part(o: dict[str, Any], report: Report) -> list[tuple[Any, ...]]:
    """Parts 1 and 2 of the report; their rows of the goals table."""
    f = overhead_figures(o)
    errors, samples = sum(f["sidecar"]["errors"]), sum(f["sidecar"]["samples"])
    report.add(
        "## 1. Target throughput at saturation",
        f"`benchmarks/overhead.py`: {o['rounds']} rounds, each leg's profiler at "
        f"{o['rate_hz']:g} Hz on `targets/aiohttp_app.py --uvloop` (CPU 0, `{o['path']}`; wrk "
        f"and the profilers on CPU 1, nice {o.get('nice', 0)}), saturated for {o['seconds']:g} "
        f"s (saturation without a profiler: {o['saturation']:,.0f} req/s); ratios, *per "
        "CPU-second*, *stopped* and *modeled* as the module's docstring says. The "
        f"no-profiler leg alone varied by {spread(f['none']['rps']):.0%} between rounds, against "
        "goals of 0.5% and 2%."
        + (f" sidecar's non-blocking reads failed on {errors} of {errors + samples} ticks (the "
           "target changed its frames mid-read; counted as errors, never stored)." if errors
           else ""),
    )  # fmt: skip
    report.table(LEGS, [
        Col("leg", LABELS.get, left=True),
        Col("req/s median (min–max)", lambda g: f"{med(f[g]['rps']):,.0f} "
            f"({span(f[g]['rps'], '{:,.0f}')})"),
        Col("ratio to none", lambda g: paired_cell(f[g]["ratio"])),
        Col("per CPU-second ratio", lambda g: paired_cell(f[g]["ratio_per_cpu"])),
        Col("stopped", lambda g: f"{med(f[g]['stopped']):.2%} "
            f"({span(f[g]['stopped'], '{:.2f}', 100)})"),
        Col("modeled ratio", lambda g: paired_cell(f[g]["ratio_model"])),
        Col("on CPU / waiting for it", lambda g: f"{med(f[g]['cpu']):.0%} / "
            f"{med(f[g]['wait']):.0%}"),
        Col("profiler samples/s (py-spy: stacks/s)",
            lambda g: None if g == "none" else med(f[g]["rate"]), "{:.1f}"),
        Col("load avg", lambda g: span(f[g]["load"], "{:.1f}")),
    ])  # fmt: skip
    report.add(
        "## 2. Target latency at half the saturation rate",
        f"The same legs, right after: wrk at a fixed {o['paced_rate']:,} req/s.",
    )
    report.table(LEGS, [
        Col("leg", LABELS.get, left=True),
        Col("achieved req/s", lambda g: med(f[g]["paced_rps"]), "{:,.0f}"),
        Col("p50", lambda g: med(f[g]["p50_us"]) / 1000, "{:.2f} ms"),
        Col("p99 median (min–max)", lambda g: f"{med(f[g]['p99_us']) / 1000:.2f} ms "
            f"({span(f[g]['p99_us'], '{:.2f}', 1e-3)})"),
        Col("p99 ratio to none", lambda g: paired_cell(f[g]["p99_ratio"], "{:.2f}")),
        Col("p99.9", lambda g: med(f[g]["p999_us"]) / 1000, "{:.1f} ms"),
    ])  # fmt: skip
    noise = {"rps": spread(f["none"]["rps"]), "p99": spread(f["none"]["p99_us"]),
             "model": spread([modeled(r) for r in o["legs"] if r["leg"] == "none"])}  # fmt: skip
    rows: list[tuple[Any, ...]] = []
    for kind, what, key, fmt in (
        ("rps", "throughput", "ratio", lambda x: f"{med(x['rps']):,.0f} req/s"),
        ("model", "throughput modeled: per CPU-second × (1 − stopped)", "ratio_model",
         lambda x: f"stopped {med(x['stopped']):.2%}"),
    ):  # fmt: skip
        for leg in PROFILERS:
            x, goal = f[leg], GOALS.get(leg)
            verdict = goal and judged(x[key], goal, at_least=True, noise=noise[kind])
            rows.append((1, f"{what}, {LABELS[leg]}", fmt(x), paired_cell(x[key]),
                         *((f"≥ {goal:g}", f"{verdict}{' (estimate)' * (kind == 'model')}")
                           if goal else REFERENCE)))  # fmt: skip
    for leg in PROFILERS:
        stopped, goal = med(f[leg]["stopped"]), GOALS.get(leg)
        rows.append((1, f"share of time the target stood stopped, {LABELS[leg]}",
                     f"{stopped:.2%} ({span(f[leg]['stopped'], '{:.2f}', 100)})", None,
                     *((f"≤ {(1 - goal) * 100:g}% (the goal's whole margin)",
                        f"{met(stopped <= 1 - goal)} (necessary, not sufficient)") if goal
                       else REFERENCE)))  # fmt: skip
    for leg in PROFILERS:
        x, goal = f[leg], LATENCY_GOALS.get(leg)
        verdict = goal and judged(x["p99_ratio"], goal, at_least=False, noise=noise["p99"])
        rows.append((2, f"p99 latency at half rate, {LABELS[leg]}",
                     f"{med(x['p99_us']) / 1000:.2f} ms", paired_cell(x["p99_ratio"], "{:.2f}"),
                     *((f"≤ {goal:g}", verdict) if goal else REFERENCE)))  # fmt: skip
    return rows


def overhead_bound(o: dict[str, Any]) -> str:
    """Whether the service's own figures resolve the goals, and what the target lived."""
    f = overhead_figures(o)
    cpu_noise = spread([per_cpu(r) for r in o["legs"] if r["leg"] == "none"])
    noise = min(spread(f["none"]["rps"]), spread(f["none"]["p99_us"]))
    margins = [1 - g for g in GOALS.values()] + [g - 1 for g in LATENCY_GOALS.values()]
    moved = {leg: med(f[leg]["ratio_per_cpu"]) - 1 for leg in ("sidecar", "sidecar-blocking")}
    within = all(abs(m) <= cpu_noise for m in moved.values())
    stopped = {leg: med(f[leg]["stopped"]) for leg in PROFILERS}
    return (
        f"- **Throughput and latency (goals 1, 2)**: between rounds the no-profiler leg alone "
        f"varied {spread(f['none']['rps']):.0%} in req/s and {spread(f['none']['p99_us']):.0%} "
        f"in p99 latency, against margins of {min(margins) * 100:g}% to {max(margins) * 100:g}%"
        + (": on this machine, at this load, the service's own figures cannot resolve the goals. "
           if noise > min(margins) else ". ")
        + "What the target lives can be measured: sidecar --blocking kept it stopped "
        f"{stopped['sidecar-blocking']:.2%} of the time (the blocking goal allows a "
        f"{(1 - GOALS['sidecar-blocking']) * 100:g}% loss in all), py-spy's default mode "
        f"{stopped['py-spy']:.2%}, and sidecar's default mode {stopped['sidecar']:.2%}. Requests "
        f"per CPU-second moved by {moved['sidecar'] * 100:+.1f}% with sidecar (default) and "
        f"{moved['sidecar-blocking'] * 100:+.1f}% with --blocking, "
        + ("within the" if within else "against")
        + f" {cpu_noise:.0%} that figure alone varied in the no-profiler leg."
    )  # fmt: skip


# -- 3: pauses -----------------------------------------------------------------------------


def pause_figures(p: dict[str, Any]) -> dict[tuple[str, int], dict[str, list[float]]]:
    out: dict[tuple[str, int], dict[str, list[float]]] = {}
    for run in p["runs"]:
        entry = out.setdefault((run["mode"], run["threads"]), {})
        for name in ("p99", "mean", "max"):
            entry.setdefault(name, []).append(run["blocking"][f"pause_{name}"])
        entry.setdefault("read", []).append(run["nonblocking"]["read_mean"])
    return out


def pause_verdicts(p: dict[str, Any]) -> dict[str, tuple[float, float, str]]:
    """Per mode: pause p99 with one Python thread, the ratio with 150 native threads beside it,
    and the verdict on that ratio from the rounds paired."""
    f, out = pause_figures(p), {}
    for mode in p["modes"]:
        one, many = f.get((mode, 0)), f.get((mode, 150))
        if one and many:
            by_round: dict[int, dict[int, float]] = {}
            for r in p["runs"]:
                if r["mode"] == mode:
                    by_round.setdefault(r["round"], {})[r["threads"]] = r["blocking"]["pause_p99"]
            ratios = [r[150] / r[0] for r in by_round.values() if 0 in r and 150 in r and r[0] > 0]
            verdict = judged(ratios, 1.1, at_least=False, noise=spread(one["p99"]))
            out[mode] = (med(one["p99"]), med(many["p99"]) / med(one["p99"]), verdict)
    return out


def pauses_part(p: dict[str, Any], report: Report) -> list[tuple[Any, ...]]:
    """Part 3 of the report; its rows of the goals table."""
    f, verdicts, floors = pause_figures(p), pause_verdicts(p), p.get("floors", {})
    report.add(
        "## 3. Pause per sample in blocking mode",
        "`benchmarks/pauses.py`: one Python thread (`targets/native_threads.py`), alone and with "
        f"150 idle native threads, blocking at {p['rate_hz']:g} Hz for {p['seconds']:g} s "
        f"({p['rounds']} rounds), then non-blocking; *normal* and *rt* and the floor as the "
        "module's docstring says.",
    )
    rows = [(mode, "1 Python thread" + " + 150 native threads" * bool(n),
             f"{us(med(x['p99']))} ({span(x['p99'], '{:,.0f}', 1e6)})", us(med(x["mean"])),
             us(med(x["max"])), us(med(x["read"])), us(med(x["mean"]) - med(x["read"])))
            for mode in p["modes"] for n in (0, 150) if (x := f.get((mode, n)))]  # fmt: skip
    rows += [(mode, f"the floor ({fl['pause']['ticks']} ticks)", f"{fl['pause']['p99_us']:,.0f} µs",
              f"{fl['pause']['mean_us']:,.0f} µs", f"{fl['pause']['max_us']:,.0f} µs")
             for mode, fl in floors.items()]  # fmt: skip
    head = ("pause p99 median (min–max)", "pause mean", "pause max", "non-blocking read mean")
    report.table(rows, cols("mode<", "target<", *head, "mean pause − read"))
    goals, growth = [], []
    for mode, (p99, times, verdict) in verdicts.items():
        grow = med(f[(mode, 150)]["read"]) - med(f[(mode, 0)]["read"])
        growth.append(f"{us(grow)} ({grow / 150 * 1e6:.1f} µs per thread, {mode})")
        goals += [
            (3, f"pause p99, blocking, 1 Python thread ({mode})", us(p99), None, "≤ 50 µs",
             met(p99 <= 50e-6)),
            (3, f"pause p99 with 150 native threads / without ({mode})", None, f"{times:.2f}x",
             "≤ 1.1x", verdict),
        ]  # fmt: skip
        if (fl := floors.get(mode)) is not None:
            goals.append((3, "pause p99 of a bare ptrace stop and resume, nothing read "
                          f"({mode}): the machine's floor", f"{fl['pause']['p99_us']:,.0f} µs",
                          None, "(reference)"))  # fmt: skip
    text = f"With the 150 threads the non-blocking read alone grows by {'; '.join(growth)}."
    if (normal := f.get(("normal", 0))) and (rt := f.get(("rt", 0))):
        text += (
            f" With one Python thread the p99 is {us(med(normal['p99']))} as the machine is "
            f"and {us(med(rt['p99']))} at real-time priority"
            + (": on the machine as it is, the stopped thread also waits for a CPU to be "
               "stopped and resumed." if med(normal["p99"]) > med(rt["p99"]) else ".")
        )  # fmt: skip
    report.add(text)
    return goals


def pause_bound(p: dict[str, Any]) -> str:
    """The pause against its goal and against the machine's bare ptrace round trip."""
    verdicts, figures, floors = pause_verdicts(p), pause_figures(p), p.get("floors", {})
    over = [mode for mode, (_, r, _) in verdicts.items() if r > 1.1]
    text = "- **Pause**: " + (
        "with 150 idle native threads beside the Python thread, the pause p99 was "
        + "; ".join(f"{r:.2f}x ({mode})" for mode, (_, r, _) in verdicts.items())
        + " that without them"
        + (f": beyond the goal's 1.1x ({', '.join(over)}). " if over else
           ": the native threads add no work to the pause beyond the goal's 1.1x. ")
        if verdicts else "")  # fmt: skip
    if not floors:
        return text + "see part 3 for the figures."
    means = {
        mode: med(figures[(mode, 0)]["mean"]) if (mode, 0) in figures else 0 for mode in floors
    }
    text += "The machine's floor, a ptrace stop and resume with nothing read: " + "; ".join(
        f"{fl['pause']['mean_us']:.0f} µs on average and {fl['pause']['p99_us']:,.0f} µs at p99 "
        f"({mode})" + (f", {fl['pause']['mean_us'] / 1e6 / means[mode]:.0%} of sidecar's mean "
                       "pause with one Python thread" if means[mode] > 0 else "")
        for mode, fl in floors.items())  # fmt: skip
    if not all(fl["pause"]["mean_us"] > 50 for fl in floors.values()):
        return text + "."
    return text + (f". {'Each exceeds' if len(floors) > 1 else 'It exceeds'} the goal's 50 µs "
                   "before anything is read: on this machine the goal is bound by ptrace and the "
                   "scheduler, not by the read.")  # fmt: skip


# -- 4: CPU per target ---------------------------------------------------------------------


def cost_figures(c: dict[str, Any]) -> dict[str, Any]:
    targets, timing, perf = c["targets"], c["timing"], c["perf"]
    rate = timing["ticks_median"] / c["window"] if timing["ticks_median"] else c["rate_hz"]
    per_second, ticks = targets * rate, max(1.0, timing["ticks_median"])
    native = [k for k in cost.CATEGORIES if not k.startswith(("python", "sqlite"))]
    return {
        "rate": rate,
        "sampler": c["cpu"]["sampler"] / per_second,
        "python": c["cpu"]["python"] / per_second,
        "perf": perf,
        "native_total": sum(perf.get(k, 0) for k in native),
        "classify": med(timing["classify_warm"]) / ticks,
        "classify_cold": med(timing["classify_cold"]) / ticks,
        "write": med(timing["write"] or timing["write_first"]) / ticks,
        "discovery": med(c["discovery"]) / 2.0 / targets / rate,
        "calls": {k: n / (per_second * c["syscall_seconds"]) for k, n in c["syscalls"].items()},
    }


def perf_share(f: dict[str, Any], *keys: str) -> float:
    """The share of the sampler threads' perf samples in these categories."""
    return sum(f["perf"].get(k, 0) for k in keys) / max(1, f["native_total"])


def leg_medians(c: dict[str, Any], part: str, first: str, key: str) -> dict[str, Any] | None:
    """Per leg of a side-by-side comparison in part 4 (``readers``, ``clocks``): the median over
    its rounds of the CPU per sample and of ``key``, and ``first``: that of its first round."""
    legs = c.get(part)
    if not legs or not all(legs.values()):
        return None
    return {name: {"cpu": med(r["thread_cpu_per_sample"] for r in runs),
                   key: med(r[key] for r in runs), first: runs[0].get(first, name)}
            for name, runs in legs.items()}  # fmt: skip


def cost_part(c: dict[str, Any], report: Report) -> list[tuple[Any, ...]]:
    """Part 4 of the report; its rows of the goals table."""
    f, n, per_target = cost_figures(c), c["targets"], c["cpu_per_target"]
    rounds, timing, sampler = c.get("cpu_per_target_rounds"), c["timing"], c["sampler"]
    report.add(
        "## 4. Sidecar CPU per target",
        f"`benchmarks/cost.py`: `sidecar serve` (100 Hz, 10 s windows, SQLite) on {n} "
        f"`targets/deep.py` (~30 frames, 10% on CPU); its CPU over {c['seconds']:g} s after a "
        f"{c['warmup']:g} s warm-up"
        + (f", in {len(rounds)} rounds (the median counts; they ranged {min(rounds):.3%}–"
           f"{max(rounds):.3%} per target)" if rounds else "")
        + f", load average {c['load'][0]:.1f}–{c['load'][1]:.1f}.",
    )  # fmt: skip
    report.table([
        ("CPU per target, everything included", f"{per_target:.2%} of a core", "≤ 0.25%",
         met(per_target <= CPU_GOAL)),
        ("of which the native sampler threads", f"{c['cpu']['sampler'] / n:.2%}"),
        ("of which the Python threads (classify, store, discovery, HTTP server)",
         f"{c['cpu']['python'] / n:.3%}"),
    ], cols("measure<", "figure", "goal", "met<"))  # fmt: skip
    rows = [("sampler thread, all of it", f"{f['sampler'] * 1e6:.1f} µs CPU",
             f"{f['sampler'] * 1e4:.2f}%", "serve's sampler threads, /proc")]  # fmt: skip
    py_total, py_rows = max(1, sum(f["perf"].values()) - f["native_total"]), []
    for key, label in cost.CATEGORIES.items():
        python = key.startswith(("python", "sqlite"))
        share = f["perf"].get(key, 0) / py_total if python else perf_share(f, key)
        part, whose = share * f["python" if python else "sampler"], ("Python threads'" if python
                                                                   else "sampler's")  # fmt: skip
        if share:
            (py_rows if python else rows).append((f"&nbsp;&nbsp;{label}", f"{part * 1e6:.1f} µs",
                f"{part * 1e4:.3f}%", f"perf: {share:.1%} of the {whose} samples"))  # fmt: skip
    blocking = c["sampler_blocking"]
    rows += [
        ("read, wall time (memory reads and the run state of the Python threads)",
         f"{sampler['read_mean'] * 1e6:.1f} µs", "", "`Sampler` counter `read_mean`"),
        ("fold, wall time", f"{sampler['fold_mean'] * 1e6:.1f} µs", "",
         "`Sampler` counter `fold_mean`"),
        ("pause (blocking mode only; the target stands, not sidecar CPU)",
         f"{blocking['pause_mean'] * 1e6:.1f} µs mean, {blocking['pause_p99'] * 1e6:.0f} µs p99",
         "", "`Sampler` counters"),
        ("Python threads, all of it", f"{f['python'] * 1e6:.2f} µs CPU",
         f"{f['python'] * 1e4:.3f}%", "serve's other threads, /proc"), *py_rows,
        ("&nbsp;&nbsp;classification per window (warm cache), per sample",
         f"{f['classify'] * 1e6:.3f} µs", f"{f['classify'] * 1e4:.4f}%",
         f"`Sessions._batch` over {timing['windows']} stored windows; cold cache "
         f"{f['classify_cold'] * 1e6:.2f} µs"),
        ("&nbsp;&nbsp;`Store.write` per window, per sample", f"{f['write'] * 1e6:.2f} µs",
         f"{f['write'] * 1e4:.4f}%", "the same windows, one write each (median "
         f"{med(timing['write'] or timing['write_first']) * 1e3:.2f} ms per window of "
         f"{timing['rows_median']:.0f} rows)"),
        ("&nbsp;&nbsp;discovery scan every 2 s, per target and sample",
         f"{f['discovery'] * 1e6:.2f} µs", f"{f['discovery'] * 1e4:.4f}%",
         f"`sessions.scan` {med(c['discovery']) * 1e3:.2f} ms per scan of /proc"),
    ]  # fmt: skip
    report.add(f"### Per sample (one target, {f['rate']:.1f} samples/s achieved)")
    report.table(rows, cols("part<", "per sample", "% of a core at 100 Hz", "how measured<"))
    report.add(
        f"perf: {c['perf_seconds']:g} s, {sum(f['perf'].values()):,} samples, "
        f"{f['native_total']:,} of them on sampler threads, stacks read by "
        f"{sampler.get('reader', 'the sampler')}. System calls per sample (`perf stat`, "
        f"{c['syscall_seconds']:g} s): "
        + ", ".join(f"`{name}` {count:.1f}" for name, count in f["calls"].items() if count) + "."
    )  # fmt: skip
    side = []
    if readers := leg_medians(c, "readers", "reader", "read_mean"):
        a, b = readers["auto"], readers["py-spy"]
        side += [(f"reader: {x['reader']}", f"{x['cpu'] * 1e6:.1f} µs", f"{x['cpu'] * 1e4:.2f}%",
                  f"read {x['read_mean'] * 1e6:.1f} µs wall") for x in (a, b)]  # fmt: skip
        side.append(("ratio", f"{a['cpu'] / b['cpu']:.2f}x", "",
                     f"read {a['read_mean'] / b['read_mean']:.2f}x"))  # fmt: skip
    if clocks := leg_medians(c, "clocks", "targets", "late_share_all"):
        own, shared = clocks["own"], clocks["shared"]
        side += [
            (
                f"{own['targets']:g} targets, {what}",
                f"{x['cpu'] * 1e6:.1f} µs",
                f"{x['cpu'] * 1e4:.2f}%",
                f"{x['late_share_all']:.2%} late or missed",
            )
            for what, x in (
                ("a sampling thread each", own),
                ("one for all (the shared clock, as `serve`)", shared),
            )
        ]
        side.append(("ratio", f"{shared['cpu'] / max(1e-12, own['cpu']):.2f}x"))  # fmt: skip
    report.table(side, cols("legs<", "CPU per sample", "% of a core at 100 Hz", "<"),
                 "Side by side on `targets/deep.py` at 100 Hz without stopping it, alternating "
                 "rounds of 5 s, CPU of the sampling threads (scheduler statistics, median of "
                 "rounds):")  # fmt: skip
    fl, w, last = c.get("floor") or {}, c.get("wake"), (c.get("clocks") or {}).get("shared")
    shape, last = fl.get("shape") or {}, last[-1] if last and "read_pieces" in last[-1] else None
    rows = [(f"a native thread that only wakes at {fl['rate_hz']:g} Hz", fl["sleep"]),
            ("the same reading 64 bytes of the target per tick (one `process_vm_readv`)",
             fl["read"])] if fl else []  # fmt: skip
    if shape.get("ticks") and last is not None:
        rows.append((f"the same reading the shape of sidecar's reads on the shared clock "
                     f"({shape['pieces']} pieces, each on a page, {shape['bytes']:,} bytes; "
                     f"sidecar's own: {last['read_calls']:.2f} calls naming "
                     f"{last['read_pieces']:.1f} pieces, {last['read_bytes']:,.0f} bytes)",
                     shape))  # fmt: skip
    floor_rows = [(what, f"{x['cpu_per_tick_us']:.1f} µs CPU per tick ({x['ticks']} ticks)")
                  for what, x in rows]  # fmt: skip
    read = "one `process_vm_readv` of 64 bytes (median of 300 ticks), "
    floor_rows += [(what, f"{w[key] / 1e3:.1f} µs") for key, what in (
        ("first_after_sleep", read + "the first of a tick after a 10 ms sleep"),
        ("later_after_sleep", read + "the later ones of that tick"),
        ("back_to_back", read + "back to back"),
        ("syscall_after_sleep", "a trivial system call right after waking"),
    ) if w]  # fmt: skip
    report.table(floor_rows, cols("the machine's floor<", "figure"),
                 f"The machine's floor (`native/examples/floor.rs`), against the goal's "
                 f"{BUDGET_US:g} µs per sample for everything:")  # fmt: skip
    goals = [(4, "sidecar CPU per target, 100 Hz, ~30 frames, all included",
              f"{per_target:.2%} of a core" + (f" (median of {len(rounds)} rounds, "
              f"{min(rounds) * 100:.2f}–{max(rounds):.2%})" if rounds else ""), None, "≤ 0.25%",
              met(per_target <= CPU_GOAL))]  # fmt: skip
    if fl:
        tick = fl["read"]["cpu_per_tick_us"]
        goals.append((4, "a native thread that only wakes at 100 Hz and reads 64 bytes of the "
                      "target: the machine's floor", f"{tick / 100:.2f}% of a core ({tick:.1f} "
                      "µs per tick)", None, "(reference)"))  # fmt: skip
    return goals


def cpu_bound(c: dict[str, Any]) -> str:
    """Where the sampler's CPU goes, the machine's floor under it, and its largest part."""
    f = cost_figures(c)
    unmet = c["cpu_per_target"] > CPU_GOAL
    per_sample = f["sampler"] + f["python"]
    small = (f["classify"] + f["write"]) / max(1e-12, per_sample)
    parts = {k: perf_share(f, *v) for k, v in (
        ("`process_vm_readv` (page lookup and pinning per call)",
         ("vm_copy", "vm_pages", "vm_call")),
        ("/proc reads", ("proc_io", "proc_regex")), ("sleeping and waking", ("sleep",)),
        ("other kernel work", ("kernel_other",)))}  # fmt: skip
    code = perf_share(f, "walker", "fold")
    text = (
        f"- **CPU** (goal {'not ' if unmet else ''}met): {c['cpu_per_target']:.2%} of a core "
        f"per target against {CPU_GOAL:.2%}, which is {BUDGET_US:g} µs per sample at 100 Hz, all "
        f"included. The sampler threads are "
        f"{c['cpu']['sampler'] / max(1e-12, sum(c['cpu'].values())):.0%} of serve's CPU; "
        f"classification and SQLite writes {small:.1%} of serve's {per_sample * 1e6:.1f} µs per "
        f"sample" + (", not where the time goes. " if small < 0.05 else ". ")
        + f"Of the sampler's CPU, kernel work per call and per wakeup is "
        f"{sum(parts.values()):.0%} (" + ", ".join(f"{k} {v:.0%}" for k, v in parts.items())
        + f") and sidecar's own code {code:.0%}. "
    )  # fmt: skip
    if wake := c.get("wake"):
        first = wake["first_after_sleep"] / 1e3
        text += (
            f"On this machine the first `process_vm_readv` after the thread's 10 ms sleep alone "
            f"costs {first:.0f} µs, {first / BUDGET_US:.0%} of the goal's budget. "
        )
    clocks, fl = leg_medians(c, "clocks", "targets", "late_share_all"), c.get("floor")
    if clocks and fl:
        text += floor_bound(fl, clocks["shared"], f["python"] * 1e6)
    if unmet:
        parts["sidecar's own code"] = code
        largest = max(parts, key=lambda k: parts[k])
        text += (
            f"The largest part of the sampler's CPU is {largest}, {parts[largest]:.0%}: where the "
            "next optimization has the most to gain."
        )
    return text


def floor_bound(fl: dict[str, Any], shared: dict[str, Any], python: float) -> str:
    """The machine's floor for the CPU goal against the sampler on the shared clock: a wakeup
    shared by the targets and a read of each, of the walker's shape when it was measured."""
    wake, targets, sampler = fl["sleep"]["cpu_per_tick_us"], shared["targets"], shared["cpu"] * 1e6
    shape = fl["shape"] if (fl.get("shape") or {}).get("ticks") else None
    read = (shape or fl["read"])["cpu_per_tick_us"]
    floor = wake / targets + (read - wake)
    what = (f"a read of the walker's shape ({shape['pieces']} pieces, {shape['bytes']:,} bytes)"
            if shape else "a 64-byte read")  # fmt: skip
    gap, alone = sampler - floor, fl["read"]["cpu_per_tick_us"]
    return (
        (f"A native thread that only wakes at 100 Hz and reads 64 bytes of one target uses "
         f"{alone:.1f} µs of CPU per tick: for a single target the goal is out of this machine's "
         "reach before anything is sampled. " if alone > BUDGET_US else "")
        + f"The machine's floor on the shared clock (part 4), a wakeup shared by {targets:g} "
        f"targets and {what} of each, is {floor:.1f} µs per target and tick, and with serve's "
        f"Python threads ({python:.1f} µs per sample) {floor + python:.1f} µs against the goal's "
        f"{BUDGET_US:g} µs: " + ("out of this machine's reach. " if floor + python > BUDGET_US
                                 else "within reach. ")
        + f"The sampler's own CPU on the shared clock, {sampler:.1f} µs per sample, is "
        f"{abs(gap):.1f} µs {'above' if gap >= 0 else 'below'} that floor"
        + (": sidecar's own work (walking, folding, counting) and what the floor program does "
           "not do (the /proc run state, the liveness check). " if gap >= 0 else ". ")
    )  # fmt: skip


# -- 5: sampling rates ---------------------------------------------------------------------


def rates_summary(r: dict[str, Any]) -> dict[str, Any]:
    """Per mode: the highest rate under 1% of each tool, and of sidecar counting missed only."""
    return {
        mode: {"best": {t: rates.highest(r["runs"], t, mode) for t in r["tools"]},
               "achieved": rates.highest(r["runs"], "sidecar", mode, "ok_achieved")}
        for mode in r["modes"]
    }  # fmt: skip


def rate_cell(runs: list[dict[str, Any]], tool: str) -> str:
    """A tool's share of samples lost at one rate; ✓ under 1%."""
    if not runs:
        return "–"
    shares = med(x.get("late_share", x["short_share"]) for x in runs)
    missed = f" (missed {med(x['short_share'] for x in runs):.1%})"
    return (f"{shares:.1%}{missed if tool.startswith('sidecar') or tool == 'floor' else ''} "
            f"{'✓' if all(x['ok'] for x in runs) else '✗'}")  # fmt: skip


def rates_part(r: dict[str, Any], report: Report) -> list[tuple[Any, ...]]:
    """Part 5 of the report; its rows of the goals table."""
    report.add(
        "## 5. Sampling rate",
        "`benchmarks/rates.py`: on `targets/deep.py`, each profiler CLI samples for "
        f"{r['seconds']:g} s at each rate of the ladder. Cells: sidecar's (and the sleep loop's) "
        "share of ticks late or missed (and missed alone); py-spy's share of asked samples not "
        "taken; ✓ under 1%; the rules, *normal*, *rt* and the sleep loop as the module's "
        "docstring says.",
    )
    goals, ladder, top = [], r["rates"], max(r["rates"])
    for mode, s in rates_summary(r).items():
        at: dict[tuple[str, float], list[dict[str, Any]]] = {}
        for x in r["runs"]:
            if x["mode"] == mode:
                at.setdefault((x["tool"], x["rate"]), []).append(x)
        report.add(f"**{mode}**")
        report.table(ladder, [
            Col("rate (Hz)", lambda rate: rate, "{:g}"),
            *(Col(LABELS[t], lambda rate, t=t, at=at: rate_cell(at.get((t, rate), []), t))
              for t in r["tools"]),
            Col("load avg", lambda rate, at=at: med(x["load"] for t in r["tools"]
                for x in at.get((t, rate), [])), "{:.1f}"),
        ])  # fmt: skip
        best = s["best"]
        report.add(
            "Highest rate under 1%: "
            + ", ".join(f"{LABELS[t]} {hz(best[t], ladder)}" for t in r["tools"])
            + f"; sidecar counting only missed samples (like py-spy's figure) "
            f"{hz(s['achieved'], ladder)}."
        )
        for other in ("py-spy", "py-spy-nonblocking"):
            times = ratio(best["sidecar"], best[other])
            verdict, value = met(times >= 2), f"{times:.2f}x"
            if best[other] == top:
                verdict, value = f"**not resolved**: {other} kept up at the ladder's top", "?"
            elif best["sidecar"] == top:
                verdict += " (sidecar kept up at the top: a lower bound)"
                value = "≥ " + value
            goals.append((5, f"highest rate < 1% late/missed, sidecar vs {LABELS[other]} "
                          f"({mode})", f"{hz(best['sidecar'], ladder)} vs "
                          f"{hz(best[other], ladder)}", value, "≥ 2x", verdict))  # fmt: skip
        if "floor" in best:
            goals.append((5, f"the same for a loop that only sleeps ({mode}): the machine's "
                          "floor", hz(best["floor"], ladder), None, "(reference)"))  # fmt: skip
    return goals


def rate_bound(r: dict[str, Any]) -> str:
    """The highest clean rates, and whether a loop that reads nothing did better."""
    summary, ladder = rates_summary(r), r["rates"]
    text = ("- **Sampling rate** also depends on policy: sidecar skips a tick it is a full period "
            "late for and counts it missed, and counts a tick late past a quarter period, while "
            "py-spy catches up in a burst of back-to-back samples and reports nothing below 1 s "
            "behind.")  # fmt: skip
    if rt := summary.get("rt"):
        best = rt["best"]
        text += (f" In the *rt* ladder, both at real-time priority, sidecar stays under 1% late or "
                 f"missed up to {hz(best['sidecar'], ladder)}, and counting only the samples it "
                 f"skips (py-spy's kind of figure) up to {hz(rt['achieved'], ladder)}, against "
                 f"py-spy's {hz(best['py-spy'], ladder)} (default) and "
                 f"{hz(best['py-spy-nonblocking'], ladder)} (--nonblocking).")  # fmt: skip
    floors = {mode: (s["best"].get("floor"), s["best"]["sidecar"]) for mode, s in summary.items()}
    if not all(floor is not None for floor, _ in floors.values()):
        return text
    return (text + " A loop that only sleeps to the same schedule under the same rules, reading "
            "nothing (`benchmarks/floor.py`), stayed under 1% up to "
            + " and ".join(f"{hz(fl, ladder)} ({mode})" for mode, (fl, _) in floors.items())
            + ", against sidecar's "
            + " and ".join(f"{hz(sc, ladder)} ({mode})" for mode, (_, sc) in floors.items())
            + (": reading nothing did no better, so on this machine the strict figure is bound by "
               "waking up on time, not by the read." if all((sc or 0) >= (fl or 0) for fl, sc in
               floors.values()) else ": the loop that reads nothing got further, so the read "
               "costs sidecar rate."))  # fmt: skip


# -- 6: storage, and the whole report ------------------------------------------------------


def store_part(s: dict[str, Any], report: Report) -> list[tuple[Any, ...]]:
    """Part 6 of the report; its rows of the goals table."""
    live, parts, times = s["live"], s["live"].get("parts") or {}, s["times"]
    total, cpu, mb = sum(parts.values()) or 1, live["cpu_per_target"], s["mb_per_target_hour"]
    grown = live["bytes_per_target_hour"] * 2 * live["seconds"] / 2 / 3600 / 4096
    report.add(
        "## 6. Storage and queries",
        "`benchmarks/store.py`: `sidecar serve` at 100 Hz with 10 s windows on the demo's aiohttp "
        "(uvloop) and Tornado (asyncio) services under the demo's wrk load for "
        f"{s['minutes']:g} min (growth and CPU over the second half), then a 24 h database "
        "replayed from those windows and downsampled as the service does.",
    )
    report.table([
        ("database growth per target-hour", f"{mb:.3f} MB", "≤ 1 MB", met(mb <= 1)),
        ("sidecar CPU per target (everything: sampling, classifying, writing, serving)",
         f"{cpu * 100:.2f}% of a core", f"≤ {CPU_GOAL * 100:g}%", met(cpu <= CPU_GOAL)),
        *((f"profile query, last {n[:-1]} h (median of {len(times[n])})",
           f"{s[f'query_{n}'] * 1000:.1f} ms ({span(times[n], '{:.1f}', 1e3)})")
          for n in ("1h", "24h")),
        ("24 h / 1 h query time", f"{s['ratio']:.2f}x", "≤ 2x", met(s["ratio"] <= 2)),
    ], cols("measure<", "figure", "goal", "met<"))  # fmt: skip
    report.add(
        (f"At the end of the run the database's {total / 1e3:,.0f} kB held: "
         + ", ".join(f"{name} {size / total:.0%}" for name, size in parts.items()) + ". "
         if parts else "")
        + f"Growth counts the live pages a reader sees; over the second half ("
        f"{live['seconds'] / 120:g} min) it grew by {grown:.0f} pages of 4 KiB, so the per-hour "
        f"figure moves in steps of {4096 / (live['seconds'] / 2 / 3600) / 2 / 1e6:.3f} MB. Load "
        f"average (5 min) at the end of the recording: {live['load']:.1f}"
        + (" (other work shared the machine)" if live["load"] > 1.5 else "")
        + f". The WAL file beside "
        f"it (checkpointed every {WAL_PAGES} pages): {live['wal_bytes'] / 1e6:.2f} MB at the end.",
        f"The 24 h database holds {s['day_bytes'] / 1e6:.2f} MB for two targets: "
        f"{s['day_bytes'] / 48 / 1e6:.3f} MB per target-hour kept, after downsampling ("
        + ", ".join(f"windows older than {age / 3600:g} h merged into {width // 60} min windows"
                    for age, width in DOWNSAMPLE_TIERS)
        + "; the file keeps the pages the merges freed). Query runs (ms): "
        + "; ".join(f"last {n[:-1]} h " + ", ".join(f"{t * 1000:.1f}" for t in times[n])
                    for n in ("1h", "24h")) + ".",
    )  # fmt: skip
    return [
        (6, "database per target-hour, 100 Hz, demo load", f"{mb:.3f} MB", None, "≤ 1 MB",
         met(mb <= 1)),
        (6, "24 h query / 1 h query", f"{s['query_24h'] * 1000:.0f} ms / "
         f"{s['query_1h'] * 1000:.0f} ms", f"{s['ratio']:.2f}x", "≤ 2x", met(s["ratio"] <= 2)),
    ]  # fmt: skip


def write(results: dict[str, Any], report: Report) -> None:
    m, run = results["machine"], results.get("run", {})
    report.add(
        "# Performance: sidecar against no profiler and against py-spy",
        "sidecar's performance goals, measured side by side in one run of `make bench` "
        "(`benchmarks/bench.py`), legs interleaved in rounds on one machine: "
        f"{m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, Linux {m['kernel']}, Python "
        f"{m['python']}, {m['py_spy']}, {m['wrk']}. Last run on {run.get('date', '?')} "
        f"({', '.join(run.get('parts', [])) or '?'}), {run.get('seconds', 0) / 60:.1f} min in all"
        + (" (**--quick**: short runs, figures only indicative)" if run.get("quick") else "")
        + ". Other work may share the machine: medians are given with their spread (min–max "
        "over rounds), and the load average per part (2 cores: near 2 or above, the parts "
        "competed for CPU):",
    )  # fmt: skip
    names = ("overhead", "pauses", "cost", "rates", "store")
    phases = [(n, results[n]["phase"]) for n in names if results.get(n, {}).get("phase")]
    head = cols("part<", "finished<", "minutes", "load average at start", "at end")
    report.table([(n, p.get("finished", "?"), f"{p['seconds'] / 60:.1f}", f"{p['load_start']:.1f}",
                   f"{p['load_end']:.1f}") for n, p in phases], head)  # fmt: skip
    body = Report("", report.md.parent)  # the parts, after the goals they return
    parts = (("overhead", overhead_part), ("pauses", pauses_part), ("cost", cost_part),
             ("rates", rates_part), ("store", store_part))  # fmt: skip
    goals = [row for name, part in parts if name in results for row in part(results[name], body)]
    report.table(goals, cols("#", "measure<", "figure", "ratio (min–max)", "goal", "<"),
                 "## The goals")  # fmt: skip
    report.lines += body.lines
    bounds = [(cpu_bound, "cost"), (pause_bound, "pauses"), (overhead_bound, "overhead"),
              (rate_bound, "rates")]  # fmt: skip
    report.add(
        "## What bounds the unmet goals, and the next optimization",
        [bound(results[name]) for bound, name in bounds if name in results],
        "Generated by `make bench` (`python -m benchmarks.bench`); the figures in "
        "`benchmarks/REPORT.json` (`python -m benchmarks.bench --from-json benchmarks/REPORT.json` "
        "writes this report again from them).",
    )
