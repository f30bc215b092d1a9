"""The sampling-rate goal: the highest rate each profiler keeps up with, on the same target.

The target is ``targets/deep.py`` (one event-loop thread, ~30-frame stacks). At each rate of a
ladder, each profiler CLI attaches, samples for ``seconds`` and is stopped; the order of the
profilers rotates at every rate, and the ladder runs ``rounds`` times, once as the machine is
and once with the profilers at real-time priority. A profiler that lost over 10 % at two rates in
a row is not run at higher ones.

- sidecar (``sidecar record``, default non-blocking): its own counters. A tick is *late* when it
  starts more than a quarter period after its deadline, *missed* when the sampler fell a whole
  period behind and skipped it. The strict figure is (late + missed) / ticks; the like-for-like
  one (samples achieved against asked) is missed / ticks.
- py-spy (``py-spy record --idle``, its default blocking mode and ``--nonblocking``): py-spy
  never skips a sample: its timer draws exponential intervals, and when it is behind it samples
  back to back until it has caught up; it only says so past one second behind. So its figure
  is samples achieved against asked, over the time from its "Sampling process" line to the
  SIGINT that stops it. Its schedule is random (Poisson), so even a py-spy that keeps up
  achieves ``rate·T ± sqrt(rate·T)`` samples; a shortfall counts only beyond two such standard
  deviations.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.procs import load_average, start_profiler, stop_profiler
from tests.support.procs import PYTHON, Procs

#: "floor" is not a profiler: a loop that only sleeps to the same schedule under sidecar's rules
#: (benchmarks/floor.py), what the machine's timers and scheduler allow any sampler.
TOOLS = ("sidecar", "py-spy", "py-spy-nonblocking", "floor")
#: normal: as the machine is; rt: the profilers at real-time priority (chrt -f 1), out of reach
#: of other work's preemption, which shows what each can do rather than what the machine lets it.
MODES = {"normal": None, "rt": 1}
LIMIT = 0.01
#: A profiler that lost more than this at two rates in a row is past its limit for good.
SEVERE = 0.10

Log = Callable[[str], None]


def judge(run: dict[str, Any]) -> dict[str, Any]:
    """Adds the shares of late/missed (sidecar) or short (py-spy) samples, and pass/fail."""
    rate, tool = run["rate"], run["tool"]
    if tool.startswith("sidecar") or tool == "floor":
        ticks = max(1, run["samples"] + run["errors"] + run["missed"])
        run["late_share"] = (run["late"] + run["missed"]) / ticks
        run["short_share"] = run["missed"] / ticks
        run["ok"] = run["late_share"] < LIMIT
        run["ok_achieved"] = run["short_share"] < LIMIT
    else:
        expected = rate * run["seconds"]
        run["short_share"] = max(0.0, 1.0 - run["samples"] / expected)
        run["noise"] = 2 / math.sqrt(expected)
        run["ok"] = run["ok_achieved"] = run["short_share"] < LIMIT + run["noise"]
    return run


def highest(runs: list[dict[str, Any]], tool: str, mode: str, key: str = "ok") -> float | None:
    """The highest rate at which every run of ``tool`` at that rate passed."""
    passed = [
        rate
        for rate in {r["rate"] for r in runs if r["tool"] == tool and r["mode"] == mode}
        if all(
            r[key] for r in runs if r["tool"] == tool and r["mode"] == mode and r["rate"] == rate
        )
    ]
    return max(passed) if passed else None


def run(
    procs: Procs,
    workdir: Path,
    *,
    rates: list[float],
    rounds: int,
    seconds: float,
    log: Log,
) -> dict[str, Any]:
    lifetime = len(MODES) * len(rates) * rounds * len(TOOLS) * (seconds + 6) + 60
    target, _ = procs.target("deep", "--seconds", f"{lifetime:g}")
    runs: list[dict[str, Any]] = []
    step = 0
    for mode, rt in MODES.items():
        for round_ in range(rounds):
            failures = dict.fromkeys(TOOLS, 0)
            for rate in rates:
                shift = step % len(TOOLS)
                step += 1
                for tool in TOOLS[shift:] + TOOLS[:shift]:
                    if failures[tool] >= 2:
                        continue  # lost over 10% at two rates in a row: higher ones tell nothing
                    result = measure(procs, workdir, tool, target.pid, rate, seconds, rt)
                    result.update(mode=mode, round=round_)
                    runs.append(result)
                    lost = result.get("late_share", result["short_share"]) > SEVERE
                    failures[tool] = failures[tool] + 1 if lost else 0
                    share = result.get("late_share", result["short_share"])
                    what = "late+missed" if "late_share" in result else "short"
                    log(
                        f"{mode:6} round {round_ + 1} {tool:18} {rate:6g} Hz: "
                        f"{result['samples']:6} samples, {what} {share * 100:5.2f}% "
                        f"{'ok' if result['ok'] else 'FAIL'} · load {result['load']:.1f}"
                    )
    procs.stop(target)
    return {
        "rates": rates,
        "rounds": rounds,
        "seconds": seconds,
        "tools": TOOLS,
        "modes": list(MODES),
        "runs": runs,
    }


def measure(
    procs: Procs, workdir: Path, tool: str, pid: int, rate: float, seconds: float, rt: int | None
) -> dict[str, Any]:
    load = load_average()
    if tool == "floor":
        argv = [
            PYTHON,
            "-m",
            "benchmarks.floor",
            "--rate",
            f"{rate:g}",
            "--seconds",
            f"{seconds:g}",
        ]
        child = procs.start(argv, rt=rt)
        child.popen.wait(seconds + 30)
        procs.children.remove(child)
        floor: dict[str, Any] = json.loads(child.stdout())
        floor.update(tool=tool, rate=rate, load=load)
        return judge(floor)
    out = workdir / f"rate-{tool}-{rate:g}-{time.monotonic_ns()}.out"
    child = start_profiler(procs, tool, pid, rate, out, idle=True, rt=rt)
    began = time.monotonic()
    time.sleep(seconds)
    stopped = time.monotonic()
    result: dict[str, Any] = dict(stop_profiler(procs, child, tool))
    if tool.startswith("py-spy"):
        result["seconds"] = stopped - began
    result.update(tool=tool, rate=rate, load=load)
    return judge(result)
