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

Writes benchmarks/REPORT-diff.md and REPORT-diff.json.
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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import main
from benchmarks.table import Col, Report, med, met
from sidecar.analyze.diff import diff_profiles, render_diff
from sidecar.formats.inputs import load_profile
from sidecar.formats.render import RenderOptions, render_svg

ROOT = Path(__file__).resolve().parents[1]
GOAL = 2.0

LOOP = ["<module> (app.py:90)", "run_app (aiohttp/web.py:530)",
        "run_until_complete (asyncio/base_events.py:640)",
        "run_forever (asyncio/base_events.py:607)", "_run_once (asyncio/base_events.py:1922)",
        "_run (asyncio/events.py:80)"]  # fmt: skip


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


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (the process and its workers) of one command."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    elapsed, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result.stderr}")
    return elapsed, after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime


def in_process(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Median wall time and median CPU time of a call."""
    times, cpus = [], []
    for _ in range(rounds):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(times), statistics.median(cpus)


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    before, after = profiles(args.stacks)
    for name, stacks in (("before", before), ("after", after)):
        lines = [f"{s} {c}" for s, c in stacks.items()]
        (work / f"{name}.folded").write_text("\n".join(lines) + "\n")
        (work / f"{name}.svg").write_text(render_svg(lines, RenderOptions(min_width=0)))
    svg = {name: str(work / f"{name}.svg") for name in ("before", "after")}
    cli = [sys.executable, "-m", "sidecar"]
    # each round writes over the last one's outputs
    commands = {
        "render": [*cli, "render", str(work / "before.folded"), "--min-width", "0", "-o",
                   str(work / "render.svg"), "--force"],
        "diff": [*cli, "diff", svg["before"], svg["after"], "-o", str(work / "diff.svg"),
                 "--force"],
        "diff0": [*cli, "diff", svg["before"], svg["after"], "-o", str(work / "diff0.svg"),
                  "--min-width", "0", "--force"],
    }  # fmt: skip
    runs: dict[str, list[tuple[float, float]]] = {key: [] for key in commands}
    for _ in range(args.rounds):
        for key, argv in commands.items():
            runs[key].append(timed(argv))
    # In process: where the diff's time goes.
    lines = [f"{s} {c}" for s, c in before.items()]
    a, b = load_profile(svg["before"]), load_profile(svg["after"])
    d = diff_profiles(a, b)
    every = RenderOptions(min_width=0)
    steps = {"render BEFORE (in process, min width 0)": lambda: render_svg(lines, every),
             "read BEFORE.svg": lambda: load_profile(svg["before"]),
             "read AFTER.svg": lambda: load_profile(svg["after"]),
             "compare (diff_profiles)": lambda: diff_profiles(a, b),
             "draw the diff (min width 0.1)": lambda: render_diff(d),
             "draw the diff (min width 0)": lambda: render_diff(d, every)}  # fmt: skip
    return {
        "machine": {"arch": platform.machine(), "cpus": os.cpu_count(),
                    "python": platform.python_version()},
        "load": [load_before, os.getloadavg()[0]],
        "rounds": args.rounds,
        "stacks": args.stacks,
        "sizes": {n: (work / f"{n}.svg").stat().st_size for n in ("before", "after", *commands)},
        "top": d.total_changes[0].frame if d.total_changes else "-",
        "wall": {key: [w for w, _ in r] for key, r in runs.items()},
        "cpu": {key: [c for _, c in r] for key, r in runs.items()},
        "steps": {name: in_process(fn, args.rounds) for name, fn in steps.items()},
    }  # fmt: skip


def size(n: int) -> str:
    mb = 1024 * 1024
    return f"{n / mb:.1f} MB" if n >= mb / 10 else f"{n / 1024:.0f} KB"


def write_report(data: dict[str, Any], report: Report) -> None:
    wall = {k: med(v) for k, v in data["wall"].items()}
    cpu = {k: med(v) for k, v in data["cpu"].items()}
    sizes, m, mb = data["sizes"], data["machine"], 1024 * 1024
    ratio, ratio0 = wall["diff"] / wall["render"], wall["diff0"] / wall["render"]
    report.add(
        "# `sidecar diff` of two 20 MB SVGs vs rendering one",
        f"Machine: {m['arch']}, {m['cpus']} CPUs, Python {m['python']}; load average "
        f"{data['load'][0]:.2f} before, {data['load'][1]:.2f} after (other work on the machine "
        "shows up in the figures).",
        f"Inputs: {data['stacks']:,} unique stacks, BEFORE.svg {sizes['before'] / mb:.1f} MB, "
        f"AFTER.svg {sizes['after'] / mb:.1f} MB (inferno, min width 0; AFTER has handler_7 3x "
        f"slower). Top total-share change found: `{data['top']}`.",
    )
    labels = {"render": "`sidecar render BEFORE.folded --min-width 0`",
              "diff": f"`sidecar diff BEFORE.svg AFTER.svg` (graph {size(sizes['diff'])})",
              "diff0": f"`sidecar diff ... --min-width 0` (graph {size(sizes['diff0'])})",
              }  # fmt: skip
    head = f"End to end, separate processes, median of {data['rounds']} interleaved rounds:"
    report.table(labels, [
        Col("command", labels.get, left=True), Col("median wall s", wall.get, "{:.3f}"),
        Col("median CPU s", cpu.get, "{:.3f}"),
        Col("wall runs (s)", lambda k: ", ".join(f"{t:.3f}" for t in data["wall"][k]), left=True),
    ], head)  # fmt: skip
    report.add(
        f"**diff / render = {ratio:.2f}x** in wall time (goal <= {GOAL:.0f}x: "
        f"{met(ratio <= GOAL)}); with --min-width 0: {ratio0:.2f}x. In CPU time: "
        f"{cpu['diff'] / cpu['render']:.2f}x."
    )
    report.table(data["steps"].items(), [
        Col("step", lambda s: s[0], left=True), Col("wall s", lambda s: s[1][0], "{:.3f}"),
        Col("CPU s", lambda s: s[1][1], "{:.3f}"),
    ], "In process (median):")  # fmt: skip
    report.add(
        "How the diff runs: SVGs are read natively (native/src/formats/svgread/: quick-xml, the "
        "whole document checked, the GIL released; inferno's frames folded into stacks in Rust, "
        "other layouts' frames put together in Python), two inferno SVGs in parallel in two "
        "threads when together they are above 8 MB. The comparison counts self / total / "
        "caller-callee time per function natively for both profiles at once "
        "(native/src/formats/shares.rs) and ranks the changes in Python. Both diff and render "
        "pay the same start-up (Python, the package); CPU time adds up the two reading threads."
    )


if __name__ == "__main__":
    sys.exit(main(__doc__, "REPORT-diff", measure, write_report, {"--rounds": 5, "--stacks": 7500}))
