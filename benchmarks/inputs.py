"""``sidecar stats``, ``render`` and ``diff`` on large inputs: peak memory and time.

Three inputs, generated (benchmarks/stacks.py, seeded), each with an AFTER twin (the next seed)
for ``diff``:

- ``1M``: 1,000,000 unique stacks of one or two short frames, no event loop, a fifth with an
  ``[idle]`` or ``[blocked]`` leaf: about 38 MB of folded text (the shape of the file in
  issue 49: a million stacks in 37 MB);
- ``deep``: 29,000 unique stacks of an aiohttp service, 10–60 frames ``function
  (path/module.py:LINE)``: about 37 MB of folded text;
- ``svg``: the flamegraph SVG ``sidecar render --min-width 0`` draws of 16,000 such stacks
  (every frame drawn, the folded stacks embedded): about 100 MB.

Each command runs as a fresh process (``python -m sidecar ...``), in interleaved rounds: its
wall time, its CPU time (``os.wait4``) and its peak RSS (GNU time's ``%M``: the command's own,
forked from a small process):

- ``stats INPUT``;
- ``render FOLDED`` (default options); for the SVG, ``render`` of the folded stacks it was
  drawn from, with ``--min-width 0`` as it was drawn;
- ``diff INPUT AFTER -o D.svg``.

The goals: peak RSS at most 4x the input (for diff, its two inputs together), and ``stats``
no slower than ``render`` of the same profile (median wall times). ``python -m sidecar
--version`` gives the floor every command pays (the interpreter and the package).

    python -m benchmarks.inputs [--rounds 2] [--scale 1.0] [--baseline DIR]

``--scale 0.05`` makes every input 20x smaller, to try the harness; ``--baseline DIR`` runs
``stats`` of each input once more with the ``sidecar`` package in DIR (an older checkout, to
set the figures before a change beside them). Writes
benchmarks/REPORT-inputs.md and REPORT-inputs.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import stacks
from benchmarks.common import main, measured, stamp
from benchmarks.table import Col, Report, med, met

ROOT = Path(__file__).resolve().parents[1]
MEMORY_GOAL = 4.0
TIME_GOAL = 1.0
MB = 1024 * 1024

#: name: how its stacks are generated, and whether the input is their SVG
INPUTS: dict[str, dict[str, Any]] = {
    "1M": {"stacks": 1_000_000, "depth": (1, 2), "fanout": 600, "short": True, "svg": False},
    "deep": {"stacks": 29_000, "depth": (10, 60), "fanout": 12, "short": False, "svg": False},
    "svg": {"stacks": 16_000, "depth": (10, 60), "fanout": 12, "short": False, "svg": True},
}
COMMANDS = ("stats", "render", "diff")


#: GNU time: the peak RSS of the command it runs, forked from it. A child forked from this
#: (large) Python process inherits its resident pages until it execs, and the kernel's
#: ``ru_maxrss`` of the child counts them: measured through it, the command's own.
TIME = "/usr/bin/time"


def run(argv: list[str], out: Path | None = None, cwd: Path = ROOT) -> dict[str, float]:
    """One command in a fresh process (its output into ``out``, if given; run in ``cwd``,
    whose ``sidecar`` package it runs): wall and CPU seconds, its peak RSS in bytes."""
    with tempfile.TemporaryDirectory(prefix="sidecar-time-") as tmp:
        said = Path(tmp) / "time"
        start = time.perf_counter()
        with open(out or os.devnull, "wb") as sink:
            child = subprocess.Popen([TIME, "-f", "%M", "-o", str(said), *argv], cwd=cwd,
                                     stdout=sink, stderr=subprocess.PIPE)  # fmt: skip
        assert child.stderr is not None
        errors = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        child.stderr.close()
        if child.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {errors.decode(errors='replace').strip()}")
        peak = int(said.read_text().split()[-1]) * 1024
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak": peak}


def make(name: str, spec: dict[str, Any], scale: float, work: Path) -> dict[str, Any]:
    """The input ``name`` and its AFTER twin, written into ``work``: their paths and sizes."""
    count = max(10, round(spec["stacks"] * scale))
    paths = {}
    for side, seed in (("before", 1), ("after", 2)):
        folded = work / f"{name}-{side}.folded"
        stacks.write_folded(folded, count, seed, spec["depth"], spec["fanout"], spec["short"])
        paths[f"{side}_folded"] = folded
        if spec["svg"]:
            stacks.render(folded, work / f"{name}-{side}.svg")
            paths[side] = work / f"{name}-{side}.svg"
        else:
            paths[side] = folded
    return {"stacks": count, "paths": {k: str(v) for k, v in paths.items()},
            "sizes": {k: v.stat().st_size for k, v in paths.items()}}  # fmt: skip


def commands(made: dict[str, Any], svg: bool, work: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "sidecar"]
    paths = made["paths"]
    widths = ["--min-width", "0"] if svg else []
    return {
        "stats": [*cli, "stats", paths["before"]],
        "render": [*cli, "render", paths["before_folded"], *widths, "-o",
                   str(work / "render.svg"), "--force"],
        "diff": [*cli, "diff", paths["before"], paths["after"], "-o", str(work / "diff.svg"),
                 "--force"],
    }  # fmt: skip


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    began = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = os.getloadavg()[0]
    made = {name: make(name, spec, args.scale, work) for name, spec in INPUTS.items()}
    argvs = {name: commands(made[name], INPUTS[name]["svg"], work) for name in INPUTS}
    floor = [sys.executable, "-m", "sidecar", "--version"]
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {command: [] for command in COMMANDS} for name in INPUTS
    }
    floors = []
    for _ in range(args.rounds):
        floors.append(run(floor))
        for name in INPUTS:
            for command in COMMANDS:
                runs[name][command].append(run(argvs[name][command]))
    # stats of each input once more, by the sidecar package of another checkout (before)
    before = {}
    if args.baseline:
        before = {name: run(argvs[name]["stats"], cwd=Path(args.baseline)) for name in INPUTS}
    return {**stamp(), "began": began, "load_average_start": load_start,
            "rounds": args.rounds, "scale": args.scale,
            "inputs": {name: {"stacks": m["stacks"], "sizes": m["sizes"]}
                       for name, m in made.items()},
            "floor": floors, "runs": runs, "baseline": args.baseline,
            "before": before}  # fmt: skip


def figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per input and command: medians, the highest peak, and the goals' ratios; what
    it took above the floor, per byte read (``above``)."""
    floor = max(f["peak"] for f in data["floor"])
    rows = []
    for name, by_command in data["runs"].items():
        sizes = data["inputs"][name]["sizes"]
        render_wall = med(r["wall"] for r in by_command["render"])
        for command, runs in by_command.items():
            read = sizes["before"] + (sizes["after"] if command == "diff" else 0)
            if command == "render":
                read = sizes["before_folded"]
            peak = max(r["peak"] for r in runs)
            wall = med(r["wall"] for r in runs)
            row = {"input": name, "command": command, "read": read, "wall": wall,
                   "cpu": med(r["cpu"] for r in runs), "peak": peak, "memory": peak / read,
                   "above": (peak - floor) / read,
                   "time": wall / render_wall if command == "stats" else None}  # fmt: skip
            rows.append(row)
    return rows


def _goal(row: dict[str, Any]) -> str:
    said = [f"memory {met(row['memory'] <= MEMORY_GOAL)}"]
    if row["time"] is not None:
        said.append(f"time {met(row['time'] <= TIME_GOAL)}")
    return ", ".join(said)


LABELS = {
    "stats": "`stats INPUT`",
    "render": "`render` of its folded stacks",
    "diff": "`diff INPUT AFTER`",
}


def _input_line(name: str, spec: dict[str, Any]) -> str:
    sizes = {side: size / MB for side, size in spec["sizes"].items()}
    head = f"- `{name}`: {spec['stacks']:,} unique stacks, "
    if spec["sizes"]["before"] == spec["sizes"]["before_folded"]:
        return head + f"{sizes['before']:.1f} MB of folded text (AFTER {sizes['after']:.1f} MB)"
    return head + (
        f"SVG {sizes['before']:.1f} MB (AFTER {sizes['after']:.1f} MB) drawn from "
        f"{sizes['before_folded']:.1f} MB of folded text"
    )


def write_report(data: dict[str, Any], report: Report) -> None:
    inputs, floor = data["inputs"], data["floor"]
    rows = figures(data)
    report.add(
        "# `stats`, `render` and `diff` on large inputs: peak memory and time",
        f"{measured(data)} ({data['load_average_start']:.2f} at the start: other work shares "
        f"the machine); {data['rounds']} interleaved round(s), each command a fresh process "
        "(`python -m benchmarks.inputs`; how: the module's docstring)"
        + (f", inputs scaled by {data['scale']:g}" if data["scale"] != 1 else "")
        + ".",
        [_input_line(name, spec) for name, spec in inputs.items()],
        f"The floor, `python -m sidecar --version`: {med(f['wall'] for f in floor):.2f} s, "
        f"{max(f['peak'] for f in floor) / MB:.0f} MB peak RSS.",
    )
    report.table(rows, [
        Col("input", left=True), Col("command", lambda r: LABELS[r["command"]], left=True),
        Col("input read", lambda r: r["read"] / MB, "{:.1f}", "MB"),
        Col("wall", "wall", "{:.2f}", "s"), Col("CPU", "cpu", "{:.2f}", "s"),
        Col("peak RSS", lambda r: r["peak"] / MB, "{:.0f}", "MB"),
        Col("peak / input", "memory", "{:.2f}x"), Col("above the floor", "above", "{:.2f}x"),
        Col("stats / render", "time", "{:.2f}x"),
        Col("goals", _goal, left=True),
    ], "Medians of the rounds (peak RSS: the highest; above the floor: less the floor's, per "
       f"byte read); goals: peak RSS <= {MEMORY_GOAL:g}x the input read, stats <= "
       f"{TIME_GOAL:g}x render's wall time:")  # fmt: skip
    if data.get("before"):
        now = {r["input"]: r for r in rows if r["command"] == "stats"}
        report.table(data["before"].items(), [
            Col("input", lambda b: b[0], left=True),
            Col("wall before", lambda b: b[1]["wall"], "{:.1f}", "s"),
            Col("wall now", lambda b: now[b[0]]["wall"], "{:.1f}", "s"),
            Col("peak RSS before", lambda b: b[1]["peak"] / MB, "{:.0f}", "MB"),
            Col("peak RSS now", lambda b: now[b[0]]["peak"] / MB, "{:.0f}", "MB"),
            Col("peak / input before", lambda b: b[1]["peak"] / now[b[0]]["read"], "{:.2f}x"),
        ], f"`stats INPUT` once more by the sidecar package in `{data['baseline']}` (older "
           "code, for comparison; one run each, after the rounds), beside the medians "
           "above:")  # fmt: skip
    failed = [r for r in rows if r["memory"] > MEMORY_GOAL]
    slow = [r for r in rows if r["time"] is not None and r["time"] > TIME_GOAL]
    report.add(
        f"Memory: {len(rows) - len(failed)} of {len(rows)} runs within {MEMORY_GOAL:g}x their "
        "input"
        + (
            "; over it: "
            + ", ".join(f"{r['command']} of `{r['input']}` {r['memory']:.2f}x" for r in failed)
            if failed
            else ""
        )
        + f". Time: stats within render's time on {3 - len(slow)} of 3 inputs"
        + (
            "; slower on " + ", ".join(f"`{r['input']}` ({r['time']:.2f}x)" for r in slow)
            if slow
            else ""
        )
        + "."
    )


if __name__ == "__main__":
    sys.exit(main(__doc__, "REPORT-inputs", measure, write_report, {
        "--rounds": 2, "--scale": 1.0,
        "--baseline": (None, "a folder whose sidecar package runs stats once more, as before"),
    }))  # fmt: skip
