"""How soon the command line answers: ``sidecar dump --pid`` against ``py-spy dump --pid`` on
the same running target, ``sidecar --help``, and the time from the start of ``sidecar stats -p
PID -d 1 --json`` to its first sample.

The target is the demo aiohttp service (``python -m targets.aiohttp_app``, ready once it says
where it listens). Each round runs every command ``--runs`` times, the commands interleaved
(their order reversed every other round, so that other work on the machine hits each alike):
py-spy's dump and sidecar's of the target, ``sidecar --help``, and three floors: ``python -c
pass`` (the interpreter's own start, under any command written in Python), the same with the
two modules of the standard library every command imports (argparse for its options,
dataclasses for its records), and the native read that ``dump`` makes, called from Python with
nothing else (``_native.dump_threads(PID)``). A
command's figure in a round is the median of its runs; the dump ratio is paired within each
round.

The first sample: the target's loop is held in a ``time.sleep`` of 4 s (``/freeze``, asked
0.3 s before), so that every sample of its loop falls in one stall, and the stall's start in
``stats --json`` is the time of the first sample (unix seconds, rounded to 10 ms). The time from
just before the process was started (this script's clock) to it is the figure; that the stall
holds every tick of the recording is checked and reported.

The runs read compiled bytecode cached beside the sources, as an installed package has it (a
warm-up writes it; ``PYTHONDONTWRITEBYTECODE`` is unset for them). sidecar runs as a user types
it, the ``sidecar`` script beside the interpreter, with this checkout first on the path.

    python -m benchmarks.cli [--rounds 7] [--runs 5]

Writes benchmarks/REPORT-cli.md and REPORT-cli.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.common import main
from benchmarks.procs import PYSPY, load_average, machine
from benchmarks.table import Col, Report, cols, med, span
from tests.support.procs import PYTHON, ROOT, Procs

#: sidecar dump's wall time, at most this many times py-spy dump's; the first sample, at most
#: this many seconds after ``stats --pid`` was started.
DUMP_GOAL = 3.0
FIRST_SAMPLE_GOAL = 0.2
#: How long the target's loop is held for the first-sample runs, and how long before the
#: command starts (the freeze must be under way, and outlast the recording).
FREEZE_MS = 4000
FREEZE_LEAD_S = 0.3
#: sidecar as a user runs it: the script ``pip install`` writes beside the interpreter.
SCRIPT = Path(PYTHON).with_name("sidecar")
SIDECAR = (str(SCRIPT),) if SCRIPT.exists() else (PYTHON, "-m", "sidecar")
#: The commands timed, in their order of the even rounds, and as the report shows them.
LEGS = ("python -c pass", "stdlib", "native read", "py-spy dump", "sidecar dump",
        "sidecar --help")  # fmt: skip
SHOWN = {
    "python -c pass": "`python -c pass` (the interpreter's start)",
    "stdlib": "`python -c 'import argparse, dataclasses'` (the standard library's part)",
    "native read": "`python -c` the native read of `dump` alone (`_native.dump_threads(PID)`)",
    "py-spy dump": "`py-spy dump --pid PID`",
    "sidecar dump": "`sidecar dump --pid PID`",
    "sidecar --help": "`sidecar --help`",
}


def environment() -> dict[str, str]:
    """The runs' environment: bytecode read (and written by the warm-up) beside the sources,
    and this checkout's package imported first."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return env | {"PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))}


def argv_of(leg: str, pid: int) -> list[str]:
    return {
        "python -c pass": [PYTHON, "-c", "pass"],
        "stdlib": [PYTHON, "-c", "import argparse, dataclasses"],
        "native read": [PYTHON, "-c", f"from sidecar import _native; _native.dump_threads({pid})"],
        "py-spy dump": [PYSPY, "dump", "--pid", str(pid)],
        "sidecar dump": [*SIDECAR, "dump", "--pid", str(pid)],
        "sidecar --help": [*SIDECAR, "--help"],
    }[leg]


def wall(argv: list[str], env: dict[str, str]) -> float:
    """Seconds ``argv`` took from its start to its exit; it must succeed."""
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=60)  # fmt: skip
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed ({done.returncode}): {done.stderr[-300:]!r}")
    return took


def first_sample(url: str, pid: int, env: dict[str, str]) -> dict[str, Any]:
    """One ``stats -p PID -d 1 --json`` while the target's loop is held: the seconds from just
    before its start to its first sample, to its exit, and the stall's share of the ticks."""
    freeze = threading.Thread(
        target=lambda: urllib.request.urlopen(
            f"{url}/freeze?how=sleep&ms={FREEZE_MS}", timeout=FREEZE_MS / 1000 + 30
        ).read()
    )
    freeze.start()
    time.sleep(FREEZE_LEAD_S)
    began = time.time()
    done = subprocess.run([*SIDECAR, "stats", "-p", str(pid), "-d", "1", "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    ended = time.time()
    freeze.join(timeout=FREEZE_MS / 1000 + 30)
    if done.returncode != 0:
        raise RuntimeError(f"stats failed ({done.returncode}): {done.stderr[-300:]!r}")
    target = json.loads(done.stdout)["targets"][0]
    stalls = [s for s in target["stalls"] if s["site"].startswith("freeze_sleep")]
    if not stalls:
        raise RuntimeError(f"no stall in freeze_sleep: {target['stalls']!r}")
    stall = stalls[0]
    ticks = target["sampling"]["ticks"]
    return {
        "first_s": stall["start"] - began,
        "took_s": ended - began,
        "stall_samples": stall["samples"],
        "ticks": ticks,
        "load": load_average(),
    }


def run(rounds: int, runs: int, workdir: Path) -> dict[str, Any]:
    env = environment()
    with Procs(workdir) as procs:
        child, url = procs.target("aiohttp_app")
        assert url is not None
        for leg in LEGS:  # the warm-up: bytecode written, files in the page cache
            wall(argv_of(leg, child.pid), env)
        first_sample(url, child.pid, env)
        load0 = load_average()
        times: list[dict[str, Any]] = []
        firsts: list[dict[str, Any]] = []
        for number in range(rounds):
            order = LEGS if number % 2 == 0 else tuple(reversed(LEGS))
            runs_of: dict[str, list[float]] = {leg: [] for leg in LEGS}
            for _ in range(runs):
                for leg in order:
                    runs_of[leg].append(wall(argv_of(leg, child.pid), env))
            times.append({"round": number + 1, "load": load_average(), "runs": runs_of,
                          **{leg: med(values) for leg, values in runs_of.items()}})  # fmt: skip
            firsts.append({"round": number + 1, **first_sample(url, child.pid, env)})
            print(f"round {number + 1}: "
                  + ", ".join(f"{leg} {times[-1][leg] * 1000:.0f} ms" for leg in LEGS)
                  + f"; first sample {firsts[-1]['first_s']:.3f} s", flush=True)  # fmt: skip
        load1 = load_average()
    return {"machine": machine(), "when": time.strftime("%Y-%m-%d %H:%M:%S"), "rounds": rounds,
            "runs": runs, "sidecar": " ".join(SIDECAR), "load": [load0, load1], "times": times,
            "first": firsts}  # fmt: skip


def verdict(values: list[float], goal: float) -> str:
    """Met when the median and every round meet the goal (at most ``goal``); a median that meets
    it while a round does not is not shown to be met."""
    if len(values) < 3:
        return "**not resolved**: fewer than 3 rounds"
    if med(values) > goal:
        return "**not met**"
    return "**met**" if max(values) <= goal else "**not shown** (the median meets it, a round not)"


def runner(argv: str) -> str:
    """How sidecar was run, as a user types it: ``sidecar`` or ``python -m sidecar``."""
    words = argv.split()
    return " ".join([Path(words[0]).name, *words[1:]])


def write_report(data: dict[str, Any], report: Report) -> None:
    times, firsts, mach = data["times"], data["first"], data["machine"]
    ms = "{:.0f} ms".format

    def of(leg: str) -> list[float]:
        return [r[leg] for r in times]

    ratios = [r["sidecar dump"] / r["py-spy dump"] for r in times]
    help_ratios = [r["sidecar --help"] / r["python -c pass"] for r in times]
    first = [r["first_s"] for r in firsts]
    whole = all(r["stall_samples"] == r["ticks"] for r in firsts)
    report.add(
        "# sidecar's command line: how soon it answers",
        f"`python -m benchmarks.cli --rounds {data['rounds']} --runs {data['runs']}` (how: the "
        f"module's docstring), measured {data['when']} on {mach.get('cpu', '?')}, "
        f"{mach.get('cores', '?')} cores, Python {mach.get('python', '?')}, "
        f"{mach.get('py_spy', 'py-spy')}; load average {data['load'][0]:.1f} at the start, "
        f"{data['load'][1]:.1f} at the end"
        + (" (other work shared the machine)" if max(data["load"]) > 1.0 else "")
        + f". sidecar ran as `{runner(data.get('sidecar', 'sidecar'))}` with this checkout "
        "first on the path, its bytecode cached. Each figure is the median over "
        "the rounds of each round's median, with the rounds' spread (min–max); the commands "
        "interleaved in every round.",
    )  # fmt: skip
    report.table(LEGS, [
        Col("command", SHOWN.get, left=True),
        Col("wall time, median", lambda leg: med(of(leg)) * 1000, "{:.0f} ms"),
        Col("rounds (min–max)", lambda leg: span(of(leg), "{:.0f}", 1000) + " ms"),
        Col("to py-spy dump", lambda leg: med(of(leg)) / med(of("py-spy dump")), "{:.2f}x"),
    ])  # fmt: skip
    report.table([
        ("`sidecar dump` / `py-spy dump`, same target, paired per round",
         f"{med(ratios):.2f}x ({span(ratios, '{:.2f}')})", f"≤ {DUMP_GOAL:g}x",
         verdict(ratios, DUMP_GOAL)),
        ("start of `sidecar stats -p PID -d 1 --json` to its first sample",
         f"{med(first):.3f} s ({span(first)})", f"≤ {FIRST_SAMPLE_GOAL:g} s",
         verdict(first, FIRST_SAMPLE_GOAL)),
    ], cols("measure<", "figure", "goal", "verdict<"), "## The goals")  # fmt: skip
    report.table(firsts, [
        Col("round", "round", "{:d}"),
        Col("first sample", "first_s", "{:.3f} s"),
        Col("stats ended", "took_s", "{:.2f} s"),
        Col("stall's samples / ticks", lambda r: f"{r['stall_samples']} / {r['ticks']}"),
        Col("load average", "load", "{:.1f}"),
    ], "The first sample per round (the target's loop held throughout; the stall's start is "
       "given to 10 ms):")  # fmt: skip
    spy, dump, floor, read, stdlib = (
        med(of(leg))
        for leg in ("py-spy dump", "sidecar dump", "python -c pass", "native read", "stdlib")
    )
    left = DUMP_GOAL * spy - read  # what the goal leaves beside the native read, from Python
    report.add(
        f"`sidecar dump --pid` answered in {ms(dump * 1000)} against {ms(spy * 1000)} for "
        f"`py-spy dump --pid`, {med(ratios):.2f}x (goal ≤ {DUMP_GOAL:g}x: "
        f"{verdict(ratios, DUMP_GOAL)}). What bounds it: the interpreter's start alone takes "
        f"{ms(floor * 1000)}, and with it the native read that `dump` makes, called from Python "
        f"with nothing else, {ms(read * 1000)} ({read / spy:.2f}x py-spy's whole run)"
        + (": no Python command that makes this read meets the goal on this machine. "
           if left <= 0 else
           f", which leaves {ms(left * 1000)} of the goal for everything else a command does "
           f"in Python, where importing argparse and dataclasses alone takes "
           f"{ms((stdlib - floor) * 1000)}. ")
        + f"sidecar's Python adds {ms((dump - read) * 1000)} to the read: its options, its "
        "imports, the output."
        + f" `sidecar --help` took {ms(med(of('sidecar --help')) * 1000)}, "
        f"{med(help_ratios):.1f}x the interpreter's start. The first sample of `stats --pid` "
        f"came {med(first):.3f} s after the command was started (goal ≤ {FIRST_SAMPLE_GOAL:g} "
        f"s: {verdict(first, FIRST_SAMPLE_GOAL)})"
        + (", and in every round the stall held every tick of the recording: the first sample "
           "was the stall's first." if whole else "; in some round the stall did not hold "
           "every tick of the recording, so its start is a later sample than the first: those "
           "rounds' figures are upper bounds.")
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(
        main(__doc__, "REPORT-cli", lambda a, w: run(a.rounds, a.runs, w), write_report,
             {"--rounds": 7, "--runs": 5})
    )  # fmt: skip
