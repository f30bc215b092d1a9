"""The comparison of "Tornado vs Aiohttp" (Avito), reproduced: aiohttp against Tornado (new and old
school coroutines), each on asyncio and on uvloop, under the same fixed request rates, with sidecar
attached; and, beside them, a route whose work runs in the loop's thread pool
(``run_in_executor``), whose threads hold the GIL the loop needs.

Per variant, scenario and rate: achieved requests per second, p50/p99 latency (locust via
``targets/load.py``), and from a live sidecar recording of the same window the event loop's
busy / idle / blocked / gil shares, who held the GIL while the loop waited for it, and the stack
depth of its busy samples; and the task level, from the same recording's asyncio task scans:
tasks and requests in flight, and the share of the requests' time they sat ready to run, queued
behind other work (the article's "many coroutines in the scheduler").

A fresh target per run; of the interleaved rounds the least disturbed run of a point is shown
(the asked rate kept, the least busy loop). In the report, *CPU ms/req*: the target's CPU per
request, the figure other work moves least; shares are of the loop thread's samples (*busy*:
running or runnable, so waiting for a core counts); depth: Python frames of busy samples (*above
loop*: above the frame that entered the loop); *gil*: off-CPU samples of the loop waiting for the
GIL another thread held, and *GIL held by* the thread (a pool's threads as one) and function that
held it most; *busy in framework+loop*: busy samples whose innermost non-stdlib frame is the
framework or the loop; *tasks in flight*, *request tasks*: means per scan; *ready (requests)*:
the share of the request tasks' time in flight spent ready to run, behind other work.

    python -m benchmarks.frameworks
        [--rates "sleep=300,600,900 hard=150,350,550 executor=50,100,150"]
        [--duration 4] [--rounds 2] [--rate-hz 200]

Writes benchmarks/REPORT-frameworks.md and REPORT-frameworks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from benchmarks.common import cpu_seconds, main
from benchmarks.table import Col, Report, med
from sidecar.analyze.threads import analyze
from sidecar.classify.tasks import in_flight, task_rows
from sidecar.discover import describe
from sidecar.rules.frames import STATES
from sidecar.sample.record import record
from tests.support.procs import Child, Procs

WARMUP = 1.5
#: Task scans per second during a recording (a rate the handlers' 50 ms cycles do not divide).
TASK_HZ = 23.0
#: Rounds of the classifier a request of the executor route runs (about 3 ms here, 6.5 ms of
#: the target's CPU a request in all): at the asked rates the GIL is held a third of the time
#: to nearly all of it.
EXECUTOR_REPEAT = 1000
NEW = {"sleep": "/sleep", "hard": "/hard", "executor": f"/executor?repeat={EXECUTOR_REPEAT}"}
#: (the old-school handlers have no executor route)
OLD = {"sleep": "/sleep-old", "hard": "/hard-old"}
#: name → (module, uvloop, scenario → path)
VARIANTS = {
    "aiohttp": ("aiohttp_app", False, NEW),
    "aiohttp + uvloop": ("aiohttp_app", True, NEW),
    "tornado async": ("tornado_app", False, NEW),
    "tornado async + uvloop": ("tornado_app", True, NEW),
    "tornado gen.coroutine": ("tornado_app", False, OLD),
    "tornado gen.coroutine + uvloop": ("tornado_app", True, OLD),
}
SCENARIOS = {
    "sleep": "one awaited 50 ms sleep per request",
    "hard": "50 ms sleep, then two concurrent ones, then one cut off by a 25 ms timeout (~125 ms)",
    "executor": "a pure-Python classifier run in the loop's thread pool (`run_in_executor`), "
    f"{EXECUTOR_REPEAT} rounds",
}
#: The handler's own time, for `saturation` (the executor's: its work, measured by the run).
FLOOR_MS = {"sleep": 50.0, "hard": 125.0}
Row = dict[str, Any]


def drive(procs: Procs, url: str, rate: float, duration: float) -> Child:
    """``targets/load.py`` driving ``url`` at ``rate`` for ``duration`` after the warm-up (its
    result printed as JSON), once it measures."""
    argv = [sys.executable, "-m", "targets.load", url, "--rate", str(rate), "--duration",
            str(duration), "--warmup", str(WARMUP), "--json"]  # fmt: skip
    load = procs.start(argv)
    load.wait_for(r"(?m)^measuring ", stream="err", timeout=60)
    return load


def result(procs: Procs, load: Child, duration: float) -> dict[str, Any]:
    if load.popen.wait(duration + 60) != 0:
        raise RuntimeError(f"the load tool failed: {load.stderr()[-300:]}")
    procs.stop(load)
    measured: dict[str, Any] = json.loads(load.stdout())
    return measured


def floor_ms(scenario: str) -> float:
    """The handler's own time: its sleeps, or for the executor its work measured here."""
    if scenario in FLOOR_MS:
        return FLOOR_MS[scenario]
    from targets.handlers import classify_path

    began = time.perf_counter()
    for _ in range(20):
        classify_path("/x", EXECUTOR_REPEAT)
    return 1000 * (time.perf_counter() - began) / 20


def run_one(
    procs: Procs, name: str, scenario: str, rate: float, duration: float, rate_hz: float
) -> Row:
    """One fixed-rate run with sidecar recording the measured window: the row of its figures."""
    loadavg = os.getloadavg()[0]
    module, uvloop, paths = VARIANTS[name]
    target, url = procs.target(module, *["--uvloop"] * uvloop)
    load = drive(procs, f"{url}{paths[scenario]}", rate, duration)
    cpu = cpu_seconds(target.pid)
    rec = record(target.pid, duration=duration - 0.6, rate_hz=rate_hz, tasks_hz=TASK_HZ)
    cpu = cpu_seconds(target.pid) - cpu
    measured = result(procs, load, duration)
    profile = rec.counts.to_profile()
    info = describe(target.pid, profile.stacks)  # while the target lives
    a = analyze(profile, info, holders=rec.counts.holders())
    holder = a.top_holders(1)
    tasks = in_flight(task_rows(list(rec.counts.tasks.items())), max(1, rec.counts.task_scans))
    requests = sum(n for (_, kind), n in tasks.items() if kind == "request")
    d, loop = a.depth, a.loop_depth
    return {
        "variant": name, "uvloop": uvloop, "scenario": scenario, "rate": rate,
        **{k: measured[k] for k in ("rps", "p50_ms", "p99_ms", "failures")},
        "cpu_ms": round(1000 * cpu / max(1.0, float(measured["rps"]) * rec.elapsed), 3),
        **{state: a.share(state) for state in STATES}, "gc": a.gc_share,
        "holder": f"{holder[0][0]} at {holder[0][1]} {holder[0][3]:.0%}" if holder else "-",
        "depth_mean": d.mean, "depth_p50": d.p50, "depth_p95": d.p95, "depth_max": d.max,
        "loop_depth_mean": loop.mean, "loop_busy": sum(a.loop_depth_histogram.values()),
        "busy_samples": a.states["busy"],
        "fw": a.layer_share("framework") + a.layer_share("event_loop"),
        "framework": f"{a.framework}/{a.loop}",
        "in_flight": sum(tasks.values()), "requests": requests,
        "ready": tasks.get(("ready", "request"), 0.0) / requests if requests else 0.0,
        "loadavg": loadavg, "python": rec.target.python_version,
    }  # fmt: skip


def disturbed(r: Row) -> tuple[bool, float, float]:
    """Orders runs from least to most disturbed: runs that kept the asked rate (within 5%)
    first, then the least busy loop (other work on the machine can only add to the busy share:
    a loop waiting for a core is runnable, and counts as busy), then the lowest p99."""
    return (abs(float(r["rps"]) - r["rate"]) > 0.05 * r["rate"], r["busy"], float(r["p99_ms"]))


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    rates: dict[str, list[float]] = {}
    for item in args.rates.split():
        scenario, _, values = item.partition("=")
        if scenario not in SCENARIOS or not values:
            raise SystemExit(f"--rates: expected SCENARIO=R1,R2,... with SCENARIO in {SCENARIOS}")
        rates[scenario] = [float(v) for v in values.split(",")]
    variants = args.variants.split(",") if args.variants else list(VARIANTS)
    began, load_before = time.monotonic(), os.getloadavg()[0]
    lowest = min(rate for values in rates.values() for rate in values)
    with Procs(workdir) as procs:
        _, url = procs.target("aiohttp_app")  # the load tool's own latency: an instant route
        load = drive(procs, f"{url}/health", lowest, args.duration)
        baseline = result(procs, load, args.duration)
    print(f"baseline /health at {lowest:g} req/s: p50 {baseline['p50_ms']:g} ms", flush=True)
    runs: dict[tuple[str, str, float], list[Row]] = {}
    # Interleaved: a burst of other work on the machine hits several variants, not one.
    for _ in range(args.rounds):
        for scenario, values in rates.items():
            for rate in values:
                for name in (n for n in variants if scenario in VARIANTS[n][2]):
                    with Procs(workdir) as procs:
                        r = run_one(procs, name, scenario, rate, args.duration, args.rate_hz)
                    runs.setdefault((name, scenario, rate), []).append(r)
                    print(f"{scenario:5} {name:31} {rate:5g} req/s -> {r['rps']:5.0f} p50 "
                          f"{r['p50_ms']:5g} p99 {r['p99_ms']:5g} ms · cpu {r['cpu_ms']:.2f} "
                          f"ms/req · busy {r['busy']:.1%} idle {r['idle']:.1%} gil "
                          f"{r['gil']:.1%} · depth "
                          f"{r['depth_mean']} · {r['framework']} · tasks {r['in_flight']:.1f} "
                          f"(ready {r['ready']:.1%}) · load {r['loadavg']:.1f}",
                          flush=True)  # fmt: skip
    points = [(n, s, rate) for s, values in rates.items() for n in variants for rate in values
              if s in VARIANTS[n][2]]  # fmt: skip
    results = [min(runs[point], key=disturbed) for point in points]
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
        "cores": os.cpu_count() or 1,
        "packages": ", ".join(f"{p} {version(p)}" for p in ("aiohttp", "tornado", "uvloop",
                                                            "locust")),
        "duration": args.duration, "rate_hz": args.rate_hz, "rounds": args.rounds,
        "loadavg": [load_before, os.getloadavg()[0]], "baseline": baseline,
        "floor_ms": {scenario: floor_ms(scenario) for scenario in rates},
        "minutes": (time.monotonic() - began) / 60, "date": time.strftime("%Y-%m-%d"),
        "results": results,
    }  # fmt: skip


# -- the report ---------------------------------------------------------------------------------


def by(results: list[Row], name: str, scenario: str) -> list[Row]:
    return [r for r in results if r["variant"] == name and r["scenario"] == scenario]


def weighted(results: list[Row], key: str, weight: str) -> float:
    """The mean of ``key`` over the runs weighted by ``weight`` (busy samples: the mean depth
    over all busy samples of the runs; requests per second: CPU per request over all)."""
    pairs = [(float(r[key]), float(r[weight])) for r in results if r[key] is not None]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else float("nan")


def saturation(results: list[Row], floor: float) -> str:
    """The first asked rate the variant did not hold: achieved below 95% of it, or a median
    latency above twice the handler's own time (``floor``, ms)."""
    for r in results:
        if r["rps"] < 0.95 * r["rate"] or r["p50_ms"] > 2 * floor:
            return f"{r['rate']:g}"
    return f"> {results[-1]['rate']:g}" if results else "-"


def gives_up_verdict(aiohttp: str, *tornados: str) -> str:
    """Whether the Tornado variants gave up at a lower asked rate than aiohttp, from
    ``saturation``'s values ("R": the first rate not held; "> R": every rate held)."""

    def rank(value: str) -> float:
        return float(value[2:]) + 0.5 if value.startswith("> ") else float(value)

    lower = [rank(t) < rank(aiohttp) for t in tornados]
    return "agrees" if all(lower) else "partly agrees" if any(lower) else "does not agree"


def comparison(results: list[Row], scenario: str, floor: float) -> list[str]:
    """The article's observations, each checked against the measured figures."""
    aio, new, old = (by(results, n, scenario) for n in ("aiohttp", "tornado async",
                                                         "tornado gen.coroutine"))  # fmt: skip
    if not (aio and new and old):
        return []
    three = list(zip(aio, new, old, strict=True))
    wins = sum(a["idle"] > max(n["idle"], o["idle"]) for a, n, o in three)
    verdict = "agrees" if wins == len(three) else "partly agrees" if wins else "does not agree"
    idle = ", ".join(f"{a['rate']:g}: {a['idle']:.1%} vs {n['idle']:.1%} / {o['idle']:.1%}"
                     for a, n, o in three)  # fmt: skip
    da, dn, do = (weighted(rs, "depth_mean", "busy_samples") for rs in (aio, new, old))
    ha, hn, ho = (weighted(rs, "loop_depth_mean", "loop_busy") for rs in (aio, new, old))
    pa, pn, po = (med(r["depth_p95"] for r in rs if r["depth_p95"] is not None)
                  for rs in (aio, new, old))  # fmt: skip
    ma, mn, mo = (med(float(r["depth_max"] or 0) for r in rs) for rs in (aio, new, old))
    sat = {name: saturation(by(results, name, scenario), floor) for name in VARIANTS}
    ca, cn, co = (weighted(rs, "cpu_ms", "rps") for rs in (aio, new, old))
    cheaper = min(cn, co)
    cpu_verdict = ("agrees" if cheaper > 2 * ca else "agrees in direction" if cheaper > ca
                   else "differs")  # fmt: skip
    lines = [
        f"**{scenario}** ({SCENARIOS[scenario]}), asked rates "
        f"{sorted({r['rate'] for r in results if r['scenario'] == scenario})}:",
        "",
        f"- *aiohttp mostly idle, Tornado much less idle*: {verdict} — aiohttp's loop is more "
        f"idle than both Tornado variants at {wins} of {len(three)} rates (idle share aiohttp "
        f"vs Tornado async / gen.coroutine at {idle}).",
        "- *stack depth about 15 (aiohttp) vs about 30 (Tornado)*: "
        f"{'agrees in direction' if do > da and ho > ha else 'does not agree'} — mean Python "
        f"frames of busy samples: aiohttp {da:.1f}, Tornado async {dn:.1f}, Tornado "
        f"gen.coroutine {do:.1f} (median p95: {pa:g}, {pn:g}, {po:g}; median of the deepest "
        f"stack, the height of a flamegraph: {ma:g}, {mn:g}, {mo:g}); the whole stack holds "
        "the start-up chain (runpy, main, run_app / IOLoop.start) of every process, and the "
        f"ratio is {do / da:.2f}x. Above the frame that entered the loop, where the framework "
        f"and the handler stack up, it is aiohttp {ha:.1f}, Tornado async {hn:.1f}, Tornado "
        f"gen.coroutine {ho:.1f}: {ho / ha:.1f}x.",
        "- *Tornado gives up at a lower rate than aiohttp*: "
        + gives_up_verdict(sat["aiohttp"], sat["tornado async"], sat["tornado gen.coroutine"])
        + " — first asked rate not held (achieved < 95%, or median latency > 2x the handler's "
        "time): " + ", ".join(f"{name} {value}" for name, value in sat.items()) + ".",
        "- *Tornado costs more CPU per request; moving to aiohttp cut CPU by more than 2x*: "
        f"{cpu_verdict} — CPU per request over all rates: aiohttp {ca:.2f} ms, Tornado async "
        f"{cn:.2f} ms ({cn / ca:.1f}x), Tornado gen.coroutine {co:.2f} ms ({co / ca:.1f}x).",
    ]  # fmt: skip
    uv_a, uv_t = by(results, "aiohttp + uvloop", scenario), by(results, "tornado async + uvloop",
                                                                 scenario)  # fmt: skip
    if uv_a and uv_t:
        gain_a, gain_t = 1 - weighted(uv_a, "cpu_ms", "rps") / ca, 1 - weighted(
            uv_t, "cpu_ms", "rps") / cn  # fmt: skip
        lines.append(
            f"- *uvloop helps aiohttp more than Tornado*: "
            f"{'agrees' if gain_a > gain_t else 'does not agree'} — uvloop cuts the CPU per "
            f"request (over all rates) by {gain_a:.1%} for aiohttp and by {gain_t:.1%} for "
            "Tornado async."
        )
    # the article's "many coroutines in the scheduler": how long requests sat ready to run
    top = max(r["rate"] for r in results if r["scenario"] == scenario)
    at_top = sorted((r for r in results if r["scenario"] == scenario and r["rate"] == top),
                    key=lambda r: r["ready"])  # fmt: skip
    if not any(r["requests"] for r in at_top):
        lines.append("- *many coroutines in the scheduler*: no request task was scanned.")
    else:
        lines.append(
            f"- *many coroutines in the scheduler*: at {top:g} req/s the requests of "
            f"{at_top[-1]['variant']} sat ready to run, queued behind other work, for the "
            f"largest share of their time in flight and those of {at_top[0]['variant']} for the "
            "smallest: " + ", ".join(f"{r['variant']} {r['ready']:.1%} ({r['requests']:.1f} "
                                     "request tasks in flight)" for r in at_top) + "."
        )  # fmt: skip
    return lines


def gil_lines(results: list[Row]) -> list[str]:
    """What the gil share says of each variant, from the figures: on the executor route the
    loop waits for the GIL its pool's threads hold; on the others no thread holds it long."""
    pool = [r for r in results if r["scenario"] == "executor"]
    rest = [r for r in results if r["scenario"] != "executor"]
    lines = []
    if pool:
        low, high = min(pool, key=lambda r: r["gil"]), max(pool, key=lambda r: r["gil"])
        above = sum(r["gil"] > r["idle"] for r in pool)
        lines.append(
            f"- **executor**: the loop waited for the GIL in {low['gil']:.1%} ({low['variant']} "
            f"at {low['rate']:g} req/s) to {high['gil']:.1%} ({high['variant']} at "
            f"{high['rate']:g} req/s) of its samples; more than it sat idle in {above} of "
            f"{len(pool)} runs. Without the GIL's reads these off-CPU samples count as idle or "
            "blocked, and the loop looks free while its requests queue. Held most by: "
            + "; ".join(f"{r['variant']} at {r['rate']:g} req/s {r['holder']}" for r in pool
                        if r["rate"] == high["rate"]) + "."
        )  # fmt: skip
    if rest:
        top = max(rest, key=lambda r: r["gil"])
        lines.append(
            f"- **sleep** and **hard** (no thread of the service runs Python beside the loop): "
            f"a gil share of {top['gil']:.1%} at most ({top['variant']}, {top['scenario']} at "
            f"{top['rate']:g} req/s)."
        )
    return lines


COLS = [
    Col("variant", left=True), Col("asked req/s", "rate", "{:g}"),
    Col("achieved req/s", "rps", "{:.0f}"), Col("p50 ms", "p50_ms", "{:g}"),
    Col("p99 ms", "p99_ms", "{:g}"), Col("failed", "failures"),
    Col("CPU ms/req", "cpu_ms", "{:.2f}"),
    *(Col(s, s, "{:.1%}") for s in STATES), Col("GIL held by", "holder", left=True),
    *(Col(h, lambda r, k=k: "-" if not r[k] else r[k]) for h, k in (("depth mean", "depth_mean"),
      ("p50", "depth_p50"), ("p95", "depth_p95"), ("max", "depth_max"),
      ("above loop mean", "loop_depth_mean"))),
    Col("busy in framework+loop", "fw", "{:.1%}"), Col("tasks in flight", "in_flight", "{:.1f}"),
    Col("request tasks", "requests", "{:.1f}"), Col("ready (requests)", "ready", "{:.1%}"),
    Col("load avg", "loadavg", "{:.1f}"),
]  # fmt: skip


def write_report(data: dict[str, Any], report: Report) -> None:
    results, base, cores = data["results"], data["baseline"], data["cores"]
    floors = {**FLOOR_MS, **data.get("floor_ms", {})}
    python = next((r["python"] for r in results if r["python"]), "?")
    loads = [r["loadavg"] for r in results]
    report.add(
        '# Frameworks: aiohttp against Tornado, as in "Tornado vs Aiohttp" (Avito)',
        f"Machine: {data['machine']}, Python {python}; {data['packages']}. The target, the load "
        f"generator and the sampler share the {cores} cores; compare the variants with each "
        f"other. Load average of the machine (other work included): {data['loadavg'][0]:.1f} "
        f"at the start, {data['loadavg'][1]:.1f} at the end.",
        f"Method (`benchmarks/frameworks.py`): a fresh target per run, one route at a fixed "
        f"rate for {data['duration']:g} s after a {WARMUP:g} s warm-up (`targets/load.py`), "
        f"recorded by sidecar at {data['rate_hz']:g} Hz with task scans at {TASK_HZ:g} Hz; "
        f"{data['rounds']} interleaved round(s), of which the least disturbed run of a point "
        "is shown; the columns as the module's docstring says.",
        "Latencies include the load generator's own share: an instant route (aiohttp's "
        f"`/health`) driven the same way at {base['rate']:g} req/s measured p50 "
        f"{base['p50_ms']:g} ms, p99 {base['p99_ms']:g} ms. The highest asked rate is "
        f"{max(r['rate'] for r in results):g} req/s.",
        f"Reading the figures: the machine's 1-minute load average was {min(loads):.1f} to "
        f"{max(loads):.1f} during the runs, on {cores} cores. A loop that waits for a core "
        "counts as busy; CPU per request does not include that wait."
        + (" At a load of the machine's core count or more, the busy shares of every variant "
           "grow with the wait: CPU per request is the figure to compare first."
           if max(loads) >= cores else ""),
    )  # fmt: skip
    for scenario, text in SCENARIOS.items():
        rows = [r for r in results if r["scenario"] == scenario]
        if rows:
            report.add(f"## {scenario}: {text}").table(rows, COLS)
    report.add(
        "## Against the article",
        "The article (aiohttp 3.4, Tornado 5.1, uvloop 0.11, Python 3.6, Pyflame): aiohttp "
        "mostly idle with stacks about 15 frames deep; Tornado much less idle at the same load "
        "with stacks about 30 deep; Tornado (old school first) gives up at lower rates; uvloop "
        "helps aiohttp more than Tornado; in production, CPU use fell by more than 2x after the "
        "move to aiohttp. Each point checked against the figures above:",
        *(comparison(results, scenario, floors.get(scenario, 0.0)) for scenario in SCENARIOS),
    )
    report.add(
        "## The loop and the GIL",
        "A service that hands CPU work to its thread pool frees its loop only while the pool's "
        "threads let the GIL go; the gil column is the loop's wait for it. Per variant:",
        gil_lines(results),
        f"Generated by `python -m benchmarks.frameworks` in {data['minutes']:.1f} min on "
        f"{data['date']}.",
    )


if __name__ == "__main__":
    sys.exit(main(__doc__, "REPORT-frameworks", measure, write_report, {
        "--rates": ("sleep=300,600,900 hard=150,350,550 executor=50,100,150",
                    "SCENARIO=R1,R2,... separated by spaces"),
        "--duration": (4.0, "measured seconds per run"),
        "--rate-hz": (200.0, "sampling rate"),
        "--variants": (None, "comma-separated variant names (default: all)"),
        "--rounds": (2, "runs per point; the least disturbed is kept"),
    }))  # fmt: skip
