"""The comparison of "Tornado vs Aiohttp" (Avito), reproduced: aiohttp against Tornado (new and old
school coroutines), each on asyncio and on uvloop, under the same fixed request rates, with sidecar
attached.

Per variant, scenario and rate: achieved requests per second, p50/p99 latency (locust via
``targets/load.py``), and from a live sidecar recording of the same window the event loop's
busy / idle / blocked shares and the stack depth of its busy samples; and the task level, from
the same recording's asyncio task scans: tasks and requests in flight, and the share of the
requests' time they sat ready to run, queued behind other work (the article's "many coroutines
in the scheduler").

    python -m benchmarks.frameworks [--rates sleep=300,600,900 hard=150,350,550]
                                    [--duration 4] [--rounds 2] [--rate-hz 200]

Writes benchmarks/REPORT-frameworks.md and benchmarks/frameworks.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from sidecar.analyze.threads import Analysis, analyze
from sidecar.classify.tasks import in_flight, task_rows
from sidecar.discover import describe
from sidecar.sample.record import record

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "benchmarks" / "REPORT-frameworks.md"
CHART = ROOT / "benchmarks" / "frameworks.png"
WARMUP = 1.5
#: Task scans per second during a recording (a rate the handlers' 50 ms cycles do not divide).
TASK_HZ = 23.0
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Variant:
    name: str
    module: str
    uvloop: bool
    #: scenario -> path
    paths: dict[str, str]

    @property
    def framework(self) -> str:
        return "aiohttp" if self.module == "aiohttp_app" else "tornado"


NEW = {"sleep": "/sleep", "hard": "/hard"}
OLD = {"sleep": "/sleep-old", "hard": "/hard-old"}
VARIANTS = (
    Variant("aiohttp", "aiohttp_app", False, NEW),
    Variant("aiohttp + uvloop", "aiohttp_app", True, NEW),
    Variant("tornado async", "tornado_app", False, NEW),
    Variant("tornado async + uvloop", "tornado_app", True, NEW),
    Variant("tornado gen.coroutine", "tornado_app", False, OLD),
    Variant("tornado gen.coroutine + uvloop", "tornado_app", True, OLD),
)
SCENARIOS = {
    "sleep": "one awaited 50 ms sleep per request",
    "hard": "50 ms sleep, then two concurrent ones, then one cut off by a 25 ms timeout (~125 ms)",
}


@dataclass
class Result:
    variant: Variant
    scenario: str
    rate: float
    load: dict[str, Any]
    analysis: Analysis
    python: str
    #: the target's CPU time (user + system) per request in the recorded window, in ms.
    cpu_ms: float
    #: the machine's 1-minute load average when the run started.
    loadavg: float
    #: mean tasks in flight per scan, by (state, ``request`` / ``background``).
    tasks: dict[tuple[str, str], float]

    @property
    def in_flight(self) -> float:
        return sum(self.tasks.values())

    @property
    def requests(self) -> float:
        return sum(n for (_, kind), n in self.tasks.items() if kind == "request")

    @property
    def ready(self) -> float:
        """The share of the requests' time in flight that they sat ready to run."""
        return self.tasks.get(("ready", "request"), 0.0) / self.requests if self.requests else 0.0

    @property
    def held(self) -> bool:
        """The load tool kept the asked rate (within 5%)."""
        return abs(float(self.load["rps"]) - self.rate) <= 0.05 * self.rate

    @property
    def disturbed(self) -> tuple[bool, float, float]:
        """Orders runs from least to most disturbed: runs that kept the asked rate first, then
        the least busy loop (other work on the machine can only add to the busy share: a loop
        waiting for a core is runnable, and counts as busy), then the lowest p99."""
        return (not self.held, self.analysis.share("busy"), float(self.load["p99_ms"]))


def start_target(variant: Variant) -> tuple[subprocess.Popen[str], str]:
    args = [sys.executable, "-m", f"targets.{variant.module}"]
    if variant.uvloop:
        args.append("--uvloop")
    popen = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert popen.stdout is not None
    line = popen.stdout.readline()
    if "listening on " not in line:
        popen.kill()
        raise RuntimeError(f"{variant.name} did not start: {line!r}")
    return popen, line.split("listening on ", 1)[1].strip()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def stop(popen: subprocess.Popen[str]) -> None:
    popen.terminate()
    try:
        popen.wait(timeout=5)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


def load_argv(url: str, rate: float, duration: float) -> list[str]:
    """``targets/load.py`` driving ``url`` at ``rate`` for ``duration`` after the warm-up,
    its result printed as JSON."""
    argv = [sys.executable, "-m", "targets.load", url, "--rate", str(rate)]
    return [*argv, "--duration", str(duration), "--warmup", str(WARMUP), "--json"]


def drive(url: str, rate: float, duration: float) -> dict[str, Any]:
    """One fixed-rate run of ``targets/load.py``; its JSON result."""
    out = subprocess.run(
        load_argv(url, rate, duration),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=duration + 60,
        check=True,
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def calibrate(rate: float, duration: float) -> dict[str, Any]:
    """The load generator's own share of latency: an instant route at ``rate``."""
    target, url = start_target(VARIANTS[0])
    try:
        return drive(url + "/health", rate, duration)
    finally:
        stop(target)


def run_one(
    variant: Variant, scenario: str, rate: float, duration: float, rate_hz: float
) -> Result:
    loadavg = os.getloadavg()[0]
    target, url = start_target(variant)
    try:
        load = subprocess.Popen(
            load_argv(url + variant.paths[scenario], rate, duration),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Record the measured window: from the load tool's "measuring" line on.
        assert load.stderr is not None
        line = load.stderr.readline()
        if not line.startswith("measuring "):
            raise RuntimeError(f"the load tool did not start: {line!r}")
        cpu = cpu_seconds(target.pid)
        rec = record(target.pid, duration=duration - 0.6, rate_hz=rate_hz, tasks_hz=TASK_HZ)
        cpu = cpu_seconds(target.pid) - cpu
        out, _ = load.communicate(timeout=duration + 60)
        measured = json.loads(out)
        profile = rec.counts.to_profile()
        info = describe(target.pid, profile.stacks)
        analysis = analyze(profile, info)
        requests = max(1.0, float(measured["rps"]) * rec.elapsed)
        scans = max(1, rec.counts.task_scans)
        tasks = in_flight(task_rows(list(rec.counts.tasks.items())), scans)
        return Result(
            variant,
            scenario,
            rate,
            measured,
            analysis,
            rec.target.python_version,
            cpu_ms=round(1000 * cpu / requests, 3),
            loadavg=loadavg,
            tasks=tasks,
        )
    finally:
        stop(target)


# -- the report ---------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _table(results: list[Result], scenario: str) -> list[str]:
    lines = [
        "| variant | asked req/s | achieved req/s | p50 ms | p99 ms | failed | CPU ms/req | busy |"
        " idle | blocked | depth mean | p50 | p95 | max | above loop mean |"
        " busy in framework+loop | tasks in flight | request tasks | ready (requests) |"
        " load avg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|---:|",
    ]
    for r in results:
        if r.scenario != scenario:
            continue
        a, d = r.analysis, r.analysis.depth
        fw = a.layer_share("framework") + a.layer_share("event_loop")
        lines.append(
            f"| {r.variant.name} | {r.rate:g} | {r.load['rps']:.0f} | {r.load['p50_ms']:g} | "
            f"{r.load['p99_ms']:g} | {r.load['failures']} | {r.cpu_ms:.2f} | "
            f"{_pct(a.share('busy'))} | "
            f"{_pct(a.share('idle'))} | {_pct(a.share('blocked'))} | "
            f"{d.mean if d.mean is not None else '-'} | {d.p50 or '-'} | {d.p95 or '-'} | "
            f"{d.max or '-'} | {a.loop_depth.mean if a.loop_depth.mean is not None else '-'} | "
            f"{_pct(fw)} | {r.in_flight:.1f} | {r.requests:.1f} | {_pct(r.ready)} | "
            f"{r.loadavg:.1f} |"
        )
    return lines


def _by(results: list[Result], name: str, scenario: str) -> list[Result]:
    return [r for r in results if r.variant.name == name and r.scenario == scenario]


def _depth_of(results: list[Result]) -> float:
    """Mean depth over all busy samples of the given runs."""
    total = weight = 0.0
    for r in results:
        busy = r.analysis.states["busy"]
        if r.analysis.depth.mean is not None:
            total += r.analysis.depth.mean * busy
            weight += busy
    return total / weight if weight else float("nan")


def _loop_depth_of(results: list[Result]) -> float:
    """Mean depth above the loop entry over all busy samples of the given runs."""
    total = weight = 0.0
    for r in results:
        mean = r.analysis.loop_depth.mean
        if mean is not None:
            busy = sum(r.analysis.loop_depth_histogram.values())
            total += mean * busy
            weight += busy
    return total / weight if weight else float("nan")


def _p95_of(results: list[Result]) -> float:
    values = [r.analysis.depth.p95 for r in results if r.analysis.depth.p95 is not None]
    return sorted(values)[len(values) // 2] if values else float("nan")


def _saturation(results: list[Result]) -> str:
    """The first asked rate the variant did not hold: achieved below 95% of it, or a median
    latency above twice the handler's own time."""
    for r in results:
        floor_ms = 50 if r.scenario == "sleep" else 125
        if r.load["rps"] < 0.95 * r.rate or r.load["p50_ms"] > 2 * floor_ms:
            return f"{r.rate:g}"
    return f"> {results[-1].rate:g}" if results else "-"


def _gives_up_verdict(aiohttp: str, *tornados: str) -> str:
    """Whether the Tornado variants gave up at a lower asked rate than aiohttp, from
    ``_saturation``'s values ("R": the first rate not held; "> R": every rate held)."""

    def rank(value: str) -> float:
        return float(value[2:]) + 0.5 if value.startswith("> ") else float(value)

    lower = [rank(t) < rank(aiohttp) for t in tornados]
    if all(lower):
        return "agrees"
    return "partly agrees" if any(lower) else "does not agree"


def comparison(results: list[Result]) -> list[str]:
    """The article's observations, each checked against the measured figures."""
    lines: list[str] = []
    for scenario in SCENARIOS:
        rates = sorted({r.rate for r in results if r.scenario == scenario})
        aio = _by(results, "aiohttp", scenario)
        new = _by(results, "tornado async", scenario)
        old = _by(results, "tornado gen.coroutine", scenario)
        if not (aio and new and old):
            continue
        idle_wins = [
            a.analysis.share("idle") > max(n.analysis.share("idle"), o.analysis.share("idle"))
            for a, n, o in zip(aio, new, old, strict=True)
        ]
        lines.append(f"**{scenario}** ({SCENARIOS[scenario]}), asked rates {rates}:")
        lines.append("")
        held = sum(idle_wins)
        verdict = (
            "agrees" if held == len(idle_wins) else "partly agrees" if held else "does not agree"
        )
        idle_text = ", ".join(
            f"{a.rate:g}: {_pct(a.analysis.share('idle'))} vs {_pct(n.analysis.share('idle'))}"
            f" / {_pct(o.analysis.share('idle'))}"
            for a, n, o in zip(aio, new, old, strict=True)
        )
        lines.append(
            f"- *aiohttp mostly idle, Tornado much less idle*: {verdict} — aiohttp's loop is "
            f"more idle than both Tornado variants at {held} of {len(idle_wins)} rates "
            f"(idle share aiohttp vs Tornado async / gen.coroutine at {idle_text})."
        )
        da, dn, do = _depth_of(aio), _depth_of(new), _depth_of(old)
        ha, hn, ho = (_loop_depth_of(runs) for runs in (aio, new, old))
        pa, pn, po = _p95_of(aio), _p95_of(new), _p95_of(old)
        ma, mn, mo = (
            _median([float(r.analysis.depth.max or 0) for r in rs]) for rs in (aio, new, old)
        )
        lines.append(
            f"- *stack depth about 15 (aiohttp) vs about 30 (Tornado)*: "
            f"{'agrees in direction' if do > da and ho > ha else 'does not agree'} — mean Python "
            f"frames of busy samples: aiohttp {da:.1f}, Tornado async {dn:.1f}, Tornado "
            f"gen.coroutine {do:.1f} (median p95: {pa:g}, {pn:g}, {po:g}; median of the deepest "
            f"stack, the height of a flamegraph: {ma:g}, {mn:g}, {mo:g}); the whole stack holds "
            f"the start-up chain (runpy, main, run_app / IOLoop.start) of every process, and the "
            f"ratio is {do / da:.2f}x. Above the frame that entered the loop, where the "
            f"framework and the handler stack up, it is aiohttp {ha:.1f}, Tornado async {hn:.1f}, "
            f"Tornado gen.coroutine {ho:.1f}: {ho / ha:.1f}x."
        )
        sat = {v.name: _saturation(_by(results, v.name, scenario)) for v in VARIANTS}
        lines.append(
            "- *Tornado gives up at a lower rate than aiohttp*: "
            + _gives_up_verdict(sat["aiohttp"], sat["tornado async"], sat["tornado gen.coroutine"])
            + " — first asked rate not held "
            "(achieved < 95%, or median latency > 2x the handler's time): "
            + ", ".join(f"{name} {value}" for name, value in sat.items())
            + "."
        )
        ca, cn, co = (_cpu_of(runs) for runs in (aio, new, old))
        cheaper = min(cn, co)
        cpu_verdict = (
            "agrees" if cheaper > 2 * ca else "agrees in direction" if cheaper > ca else "differs"
        )
        lines.append(
            f"- *Tornado costs more CPU per request; moving to aiohttp cut CPU by more than 2x*: "
            f"{cpu_verdict}"
            f" — CPU per request over all rates: aiohttp {ca:.2f} ms, Tornado async {cn:.2f} ms "
            f"({cn / ca:.1f}x), Tornado gen.coroutine {co:.2f} ms ({co / ca:.1f}x)."
        )
        uv_a = _by(results, "aiohttp + uvloop", scenario)
        uv_t = _by(results, "tornado async + uvloop", scenario)
        if uv_a and uv_t:
            gain_a = 1 - _cpu_of(uv_a) / ca
            gain_t = 1 - _cpu_of(uv_t) / cn
            lines.append(
                f"- *uvloop helps aiohttp more than Tornado*: "
                f"{'agrees' if gain_a > gain_t else 'does not agree'} — uvloop cuts the "
                f"CPU per request (over all rates) by {_pct(gain_a)} for aiohttp and by "
                f"{_pct(gain_t)} for Tornado async."
            )
        lines.append(_scheduler(results, scenario))
        lines.append("")
    return lines


def _scheduler(results: list[Result], scenario: str) -> str:
    """The article's "many coroutines in the scheduler", as the task scans measured it: at the
    highest asked rate, how long each variant's requests sat ready to run."""
    top = max(r.rate for r in results if r.scenario == scenario)
    at_top = sorted(
        (r for r in results if r.scenario == scenario and r.rate == top), key=lambda r: r.ready
    )
    if not any(r.requests for r in at_top):
        return "- *many coroutines in the scheduler*: no request task was scanned."
    listed = ", ".join(
        f"{r.variant.name} {_pct(r.ready)} ({r.requests:.1f} request tasks in flight)"
        for r in at_top
    )
    return (
        f"- *many coroutines in the scheduler*: at {top:g} req/s the requests of "
        f"{at_top[-1].variant.name} sat ready to run, queued behind other work, for the largest "
        f"share of their time in flight and those of {at_top[0].variant.name} for the smallest: "
        f"{listed}."
    )


def _cpu_of(results: list[Result]) -> float:
    """CPU per request over all the given runs: total CPU time over total requests."""
    requests = sum(float(r.load["rps"]) for r in results)
    return sum(r.cpu_ms * float(r.load["rps"]) for r in results) / requests if requests else 0.0


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def chart(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = [s for s in SCENARIOS if any(r.scenario == s for r in results)]
    fig, axes = plt.subplots(len(scenarios), 5, figsize=(22, 4.2 * len(scenarios)), squeeze=False)
    for row, scenario in enumerate(scenarios):
        for variant in VARIANTS:
            runs = _by(results, variant.name, scenario)
            if not runs:
                continue
            style = "--" if variant.uvloop else "-"
            xs = [r.rate for r in runs]
            kw: dict[str, Any] = {"linestyle": style, "marker": "o", "label": variant.name}
            axes[row][0].plot(xs, [r.load["rps"] for r in runs], **kw)
            axes[row][1].plot(xs, [r.load["p99_ms"] for r in runs], **kw)
            axes[row][2].plot(xs, [100 * r.analysis.share("idle") for r in runs], **kw)
            axes[row][3].plot(xs, [r.cpu_ms for r in runs], **kw)
            axes[row][4].plot(xs, [r.analysis.depth.mean or 0 for r in runs], **kw)
        titles = (
            "achieved req/s",
            "p99 latency (ms)",
            "event loop idle (%)",
            "target CPU ms / request",
            "mean stack depth (busy)",
        )
        for col, title in enumerate(titles):
            ax = axes[row][col]
            ax.set_title(f"{scenario}: {title}")
            ax.set_xlabel("asked req/s")
            ax.grid(alpha=0.3)
        axes[row][1].set_yscale("log")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _reading(results: list[Result]) -> str:
    """How far the shares can be trusted on this run's machine."""
    loads = [r.loadavg for r in results]
    cores = os.cpu_count() or 1
    text = (
        f"Reading the figures: the machine's 1-minute load average was {min(loads):.1f} to "
        f"{max(loads):.1f} during the runs, on {cores} cores. A loop that waits for a core "
        "counts as busy; CPU per request does not include that wait."
    )
    if max(loads) >= cores:
        text += (
            " At a load of the machine's core count or more, the busy shares of every variant "
            "grow with the wait: CPU per request is the figure to compare first."
        )
    return text


def write_report(
    results: list[Result],
    args: argparse.Namespace,
    elapsed: float,
    loadavg: tuple[float, float],
    baseline: dict[str, Any],
) -> None:
    python = next((r.python for r in results if r.python), platform.python_version())
    versions = ", ".join(f"{p} {version(p)}" for p in ("aiohttp", "tornado", "uvloop", "locust"))
    lines = [
        '# Frameworks: aiohttp against Tornado, as in "Tornado vs Aiohttp" (Avito)',
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, "
        f"Python {python}; {versions}. The target, the load generator and the sampler share "
        f"the {os.cpu_count()} cores; compare the variants with each other. Load average of "
        "the machine (other work included): "
        f"{loadavg[0]:.1f} at the start, {loadavg[1]:.1f} at the end.",
        "",
        "Method: each run starts a fresh target (`targets/`), drives one route at a fixed "
        f"rate for {args.duration:g} s after a {WARMUP:g} s warm-up with `targets/load.py` "
        "(locust, keep-alive users sharing the rate), and records the target with sidecar's "
        f"sampler at {args.rate_hz:g} Hz during the measured window, its asyncio tasks "
        f"scanned at {TASK_HZ:g} Hz (*tasks in flight* and *request tasks* are means per scan; "
        "a request's tasks are its handler's and those it gathers, the rest are connections' "
        "and background tasks; *ready (requests)* is the share of the request tasks' time in "
        "flight that they sat ready to run, queued behind other work). Runs are interleaved "
        f"(every variant at one rate, then the next rate), {args.rounds} round(s); of the runs "
        "of one point the least disturbed is shown: of those that kept the asked rate, the one "
        "whose loop was least busy (other work on the machine only adds to busy). "
        "*CPU ms/req* is the target's user + system CPU time per request in the recorded "
        "window: the figure least affected by other work on the machine. Shares are of the "
        "event-loop thread's samples; *busy* is the OS's running-or-runnable state, so a loop "
        "waiting for a core counts as busy. Depth counts the Python frames of busy samples "
        "(*above loop*: only those above the frame that entered the event loop); *busy in "
        "framework+loop* is the share of busy samples whose innermost non-stdlib frame is "
        "aiohttp/Tornado or asyncio/uvloop rather than the application.",
        "",
        f"Latencies include the load generator's own share: locust (Python, gevent) shares the "
        f"cores with the target, and an instant route (aiohttp's `/health`) driven the same way "
        f"at {baseline['rate']:g} req/s measured p50 {baseline['p50_ms']:g} ms, p99 "
        f"{baseline['p99_ms']:g} ms. The highest asked rate is "
        f"{max(r.rate for r in results):g} req/s.",
        "",
        _reading(results),
        "",
        "![achieved rate, p99 latency, idle share and depth per variant](frameworks.png)",
        "",
    ]
    for scenario, text in SCENARIOS.items():
        if any(r.scenario == scenario for r in results):
            lines += [f"## {scenario}: {text}", "", *_table(results, scenario), ""]
    lines += [
        "## Against the article",
        "",
        "The article (aiohttp 3.4, Tornado 5.1, uvloop 0.11, Python 3.6, Pyflame): aiohttp mostly "
        "idle with stacks about 15 frames deep; Tornado much less idle at the same load with "
        "stacks about 30 deep; Tornado (old school first) gives up at lower rates; uvloop helps "
        "aiohttp more than Tornado; in production, CPU use fell by more than 2x after the move "
        "to aiohttp. Each point checked against the figures above:",
        "",
        *comparison(results),
        f"Generated by `python -m benchmarks.frameworks` in {elapsed / 60:.1f} min on "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
    ]
    REPORT.write_text("\n".join(lines))


def parse_rates(items: list[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for item in items:
        scenario, _, values = item.partition("=")
        if scenario not in SCENARIOS or not values:
            raise SystemExit(f"--rates: expected SCENARIO=R1,R2,... with SCENARIO in {SCENARIOS}")
        out[scenario] = [float(v) for v in values.split(",")]
    return out


def row(result: Result) -> str:
    a, load = result.analysis, result.load
    return (
        f"{result.scenario:5} {result.variant.name:31} {result.rate:5g} req/s -> "
        f"{load['rps']:5.0f} p50 {load['p50_ms']:5g} p99 {load['p99_ms']:5g} ms · "
        f"cpu {result.cpu_ms:.2f} ms/req · busy {_pct(a.share('busy')):>6} idle "
        f"{_pct(a.share('idle')):>6} blocked {_pct(a.share('blocked')):>5} · depth "
        f"{a.depth.mean} (above loop {a.loop_depth.mean}) · {a.framework}/{a.loop} · "
        f"tasks {result.in_flight:.1f} (of requests {result.requests:.1f}, ready "
        f"{_pct(result.ready)}) · load {result.loadavg:.1f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", nargs="+", default=["sleep=300,600,900", "hard=150,350,550"])
    parser.add_argument("--duration", type=float, default=4.0, help="measured seconds per run")
    parser.add_argument("--rate-hz", type=float, default=200.0, help="sampling rate")
    parser.add_argument("--variants", help="comma-separated variant names (default: all)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="runs per point; the least disturbed is kept"
    )
    parser.add_argument("--no-report", action="store_true", help="print rows only")
    args = parser.parse_args()
    rates = parse_rates(args.rates)
    wanted = set(args.variants.split(",")) if args.variants else None
    variants = [v for v in VARIANTS if wanted is None or v.name in wanted]
    began = time.monotonic()
    load_before = os.getloadavg()[0]
    lowest = min(rate for scenario_rates in rates.values() for rate in scenario_rates)
    baseline = calibrate(lowest, args.duration)
    print(f"baseline /health at {lowest:g} req/s: p50 {baseline['p50_ms']:g} ms", flush=True)
    runs: dict[tuple[str, str, float], list[Result]] = {}
    # Interleaved: a burst of other work on the machine hits several variants, not one.
    for _ in range(args.rounds):
        for scenario, scenario_rates in rates.items():
            for rate in scenario_rates:
                for variant in variants:
                    result = run_one(variant, scenario, rate, args.duration, args.rate_hz)
                    runs.setdefault((variant.name, scenario, rate), []).append(result)
                    print(row(result), flush=True)
    results = [
        min(runs[(variant.name, scenario, rate)], key=lambda r: r.disturbed)
        for scenario, scenario_rates in rates.items()
        for variant in variants
        for rate in scenario_rates
    ]
    if not args.no_report:
        chart(results, CHART)
        loadavg = (load_before, os.getloadavg()[0])
        write_report(results, args, time.monotonic() - began, loadavg, baseline)
        print(f"wrote {REPORT.relative_to(ROOT)} and {CHART.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
