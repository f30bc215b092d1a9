"""``sidecar diff`` of two ~20 MB flamegraph SVGs against ``sidecar render`` of one of them.

Two synthetic but py-spy-shaped profiles (asyncio loop, request handlers, deep call chains;
AFTER has one handler 3x slower and some stacks of its own) are rendered by our inferno renderer
with no minimum width, which gives SVGs of about 20 MB each. Then, as separate processes, each
timed end to end (start-up included), in interleaved rounds:

- render: ``sidecar render BEFORE.folded --min-width 0`` (what wrote the 20 MB SVG);
- diff:   ``sidecar diff BEFORE.svg AFTER.svg -o D.svg`` (default options);
- diff --min-width 0: the same, drawing every frame of the differential graph too.

The goal: diff takes no more than 2x the time of render (medians). In-process figures split
the diff into reading each SVG, comparing, and drawing.

    python -m benchmarks.diff [--rounds 5] [--stacks 7500]

Writes benchmarks/REPORT-diff.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sidecar.analyze.diff import diff_profiles, render_diff
from sidecar.formats.inputs import load_profile
from sidecar.formats.render import RenderOptions, render_svg

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "benchmarks" / "REPORT-diff.md"
GOAL = 2.0

LOOP = [
    "<module> (app.py:90)",
    "run_app (aiohttp/web.py:530)",
    "run_until_complete (asyncio/base_events.py:640)",
    "run_forever (asyncio/base_events.py:607)",
    "_run_once (asyncio/base_events.py:1922)",
    "_run (asyncio/events.py:80)",
]


def profiles(stacks: int, seed: int = 1) -> tuple[dict[str, int], dict[str, int]]:
    """BEFORE and AFTER: the same service, AFTER with handler_7 3x slower and new stacks."""
    rng = random.Random(seed)
    functions = [f"fn_{i} (/srv/app/mod{i % 41}.py:{(i * 7) % 900})" for i in range(4000)]
    before: dict[str, int] = {}
    while len(before) < stacks:
        handler = f"handler_{rng.randrange(40)} (/srv/app/handlers.py:{rng.randrange(500)})"
        depth = rng.randint(2, 24)
        chain = [rng.choice(functions[: 150 * (k + 1)]) for k in range(depth)]
        before[";".join([*LOOP, handler, *chain])] = rng.randint(1, 50)
    after = {}
    for stack, count in before.items():
        factor = 3 if "handler_7 " in stack else 1
        after[stack] = max(1, round(count * factor * rng.uniform(0.8, 1.2)))
    for stack in list(before)[: stacks // 20]:
        after[stack + ";fn_new (/srv/app/new.py:1)"] = rng.randint(1, 20)
    return before, after


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (the process and its workers) of one command."""
    cpu = _children_cpu()
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result.stderr}")
    return elapsed, _children_cpu() - cpu


def best_of(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Median wall time and median CPU time of a call."""
    times, cpus = [], []
    for _ in range(rounds):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(times), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stacks", type=int, default=7500)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-diff-") as tmp:
        work = Path(tmp)
        before, after = profiles(args.stacks)
        paths = {}
        for name, stacks in (("before", before), ("after", after)):
            lines = [f"{s} {c}" for s, c in stacks.items()]
            (work / f"{name}.folded").write_text("\n".join(lines) + "\n")
            svg = render_svg(lines, RenderOptions(min_width=0))
            (work / f"{name}.svg").write_text(svg)
            paths[name] = work / f"{name}.svg"
        sizes = {n: p.stat().st_size for n, p in paths.items()}

        cli = [sys.executable, "-m", "sidecar"]
        render_argv = [*cli, "render", str(work / "before.folded"), "--min-width", "0"]
        render_argv += ["-o", str(work / "r.svg")]
        diff_argv = [*cli, "diff", str(paths["before"]), str(paths["after"])]
        diff0_argv = [*diff_argv, "-o", str(work / "d0.svg"), "--min-width", "0"]
        diff_argv += ["-o", str(work / "d.svg")]
        runs: dict[str, list[float]] = {"render": [], "diff": [], "diff0": []}
        cpus: dict[str, list[float]] = {"render": [], "diff": [], "diff0": []}
        for _ in range(args.rounds):
            for key, argv in (("render", render_argv), ("diff", diff_argv), ("diff0", diff0_argv)):
                wall, cpu = timed(argv)
                runs[key].append(wall)
                cpus[key].append(cpu)
        median = {k: statistics.median(v) for k, v in runs.items()}
        cpu_median = {k: statistics.median(v) for k, v in cpus.items()}
        diff_svg_size = (work / "d.svg").stat().st_size
        diff0_svg_size = (work / "d0.svg").stat().st_size

        # In process: where the diff's time goes.
        lines = [f"{s} {c}" for s, c in before.items()]
        parts = {
            "render BEFORE (in process, min width 0)": best_of(
                lambda: render_svg(lines, RenderOptions(min_width=0)), args.rounds
            ),
            "read BEFORE.svg": best_of(lambda: load_profile(str(paths["before"])), args.rounds),
            "read AFTER.svg": best_of(lambda: load_profile(str(paths["after"])), args.rounds),
        }
        a, b = load_profile(str(paths["before"])), load_profile(str(paths["after"]))
        parts["compare (diff_profiles)"] = best_of(lambda: diff_profiles(a, b), args.rounds)
        d = diff_profiles(a, b)
        parts["draw the diff (min width 0.1)"] = best_of(lambda: render_diff(d), args.rounds)
        parts["draw the diff (min width 0)"] = best_of(
            lambda: render_diff(d, RenderOptions(min_width=0)), args.rounds
        )
        top = d.total_changes[0].frame if d.total_changes else "-"
    load_after = os.getloadavg()

    ratio = median["diff"] / median["render"]
    ratio0 = median["diff0"] / median["render"]
    verdict = "met" if ratio <= GOAL else "not met"
    mb = 1024 * 1024

    def size(n: int) -> str:
        return f"{n / mb:.1f} MB" if n >= mb / 10 else f"{n / 1024:.0f} KB"

    report = [
        "# `sidecar diff` of two 20 MB SVGs vs rendering one",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after (other work on the machine shows up in the figures).",
        "",
        f"Inputs: {args.stacks:,} unique stacks, BEFORE.svg {sizes['before'] / mb:.1f} MB, "
        f"AFTER.svg {sizes['after'] / mb:.1f} MB (inferno, min width 0; AFTER has handler_7 3x "
        f"slower). Top total-share change found: `{top}`.",
        "",
        f"End to end, separate processes, median of {args.rounds} interleaved rounds:",
        "",
        "| command | median wall s | median CPU s | wall runs (s) |",
        "|---|---:|---:|---|",
        *(
            f"| {label} | {median[key]:.3f} | {cpu_median[key]:.3f} | "
            + ", ".join(f"{t:.3f}" for t in runs[key])
            + " |"
            for key, label in (
                ("render", "`sidecar render BEFORE.folded --min-width 0`"),
                ("diff", f"`sidecar diff BEFORE.svg AFTER.svg` (graph {size(diff_svg_size)})"),
                ("diff0", f"`sidecar diff ... --min-width 0` (graph {size(diff0_svg_size)})"),
            )
        ),
        "",
        f"**diff / render = {ratio:.2f}x** in wall time (goal <= {GOAL:.0f}x: **{verdict}**); "
        f"with --min-width 0: {ratio0:.2f}x. In CPU time: "
        f"{cpu_median['diff'] / cpu_median['render']:.2f}x.",
        "",
        "In process (median):",
        "",
        "| step | wall s | CPU s |",
        "|---|---:|---:|",
        *(f"| {name} | {wall:.3f} | {cpu:.3f} |" for name, (wall, cpu) in parts.items()),
        "",
        "How the diff runs: SVGs are read natively (native/src/svgread.rs: quick-xml, the "
        "whole document checked, the GIL released; inferno's frames folded into stacks in Rust, "
        "other layouts' frames put together in Python), two inferno SVGs in parallel in two "
        "threads when together they are above 8 MB. The comparison counts self / total / "
        "caller-callee time per function "
        "natively for both profiles at once (native/src/shares.rs) and ranks the changes in "
        "Python. Both diff and render pay the same start-up (Python, the package); CPU time "
        "adds up the two reading threads.",
        "",
    ]
    REPORT.write_text("\n".join(report))
    print("\n".join(report))


if __name__ == "__main__":
    main()
