"""The sampling-rate goal: the highest rate each profiler keeps up with, on the same target.

On ``targets/deep.py`` (one event-loop thread, ~30-frame stacks), at each rate of a ladder, each
profiler CLI attaches, samples for ``seconds`` and is stopped; the order rotates at every rate;
the ladder runs as the machine is and with the profilers at real-time priority. A profiler that
lost over 10 % at two rates in a row is not run at higher ones.

- sidecar (``sidecar record``): its own counters. A tick is *late* when it starts more than a
  quarter period after its deadline, *missed* when the sampler fell a whole period behind and
  skipped it: the strict figure is (late + missed) / ticks, the like-for-like one missed / ticks.
- py-spy (``record --idle``, default blocking and ``--nonblocking``) never skips a sample: behind,
  it samples back to back until caught up. Its figure is samples achieved against asked over the
  time from its start line to the SIGINT; its schedule is random (Poisson), so a shortfall
  counts only beyond two standard deviations, ``2 / sqrt(rate·T)``.
- floor: not a profiler but a loop that only sleeps to the same schedule under sidecar's rules
  (``benchmarks/floor.py``): what the machine's timers and scheduler allow any sampler.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.procs import finish, load_average, start_profiler, stop_profiler
from tests.support.procs import PYTHON, Procs

TOOLS = ("sidecar", "py-spy", "py-spy-nonblocking", "floor")
#: normal: as the machine is; rt: the profilers at real-time priority (chrt -f 1), out of reach
#: of other work's preemption, which shows what each can do rather than what the machine lets it.
MODES = {"normal": None, "rt": 1}
LIMIT = 0.01
#: A profiler that lost more than this at two rates in a row is past its limit for good.
SEVERE = 0.10


def judge(run: dict[str, Any]) -> dict[str, Any]:
    """Adds the shares of late/missed (sidecar) or short (py-spy) samples, and pass/fail."""
    if run["tool"].startswith("sidecar") or run["tool"] == "floor":
        ticks = max(1, run["samples"] + run["errors"] + run["missed"])
        run["late_share"] = (run["late"] + run["missed"]) / ticks
        run["short_share"] = run["missed"] / ticks
        run["ok"] = run["late_share"] < LIMIT
        run["ok_achieved"] = run["short_share"] < LIMIT
    else:
        expected = run["rate"] * run["seconds"]
        run["short_share"] = max(0.0, 1.0 - run["samples"] / expected)
        run["noise"] = 2 / math.sqrt(expected)
        run["ok"] = run["ok_achieved"] = run["short_share"] < LIMIT + run["noise"]
    return run


def highest(runs: list[dict[str, Any]], tool: str, mode: str, key: str = "ok") -> float | None:
    """The highest rate at which every run of ``tool`` at that rate passed."""
    mine = [r for r in runs if r["tool"] == tool and r["mode"] == mode]
    passed = [rate for rate in {r["rate"] for r in mine}
              if all(r[key] for r in mine if r["rate"] == rate)]  # fmt: skip
    return max(passed) if passed else None


def run(
    procs: Procs, workdir: Path, *, rates: list[float], rounds: int, seconds: float,
    log: Callable[[str], None],
) -> dict[str, Any]:  # fmt: skip
    lifetime = len(MODES) * len(rates) * rounds * len(TOOLS) * (seconds + 6) + 60
    target, _ = procs.target("deep", "--seconds", f"{lifetime:g}")
    runs: list[dict[str, Any]] = []
    steps = itertools.count()  # the order of the tools rotates by one at every rate
    for mode, rt in MODES.items():
        for round_ in range(rounds):
            failures = dict.fromkeys(TOOLS, 0)
            for rate in rates:
                shift = next(steps) % len(TOOLS)
                for tool in TOOLS[shift:] + TOOLS[:shift]:
                    if failures[tool] >= 2:
                        continue  # lost over 10% at two rates in a row: higher ones tell nothing
                    result = measure(procs, workdir, tool, target.pid, rate, seconds, rt)
                    runs.append({**result, "mode": mode, "round": round_})
                    share = result.get("late_share", result["short_share"])
                    failures[tool] = failures[tool] + 1 if share > SEVERE else 0
                    verdict = "ok" if result["ok"] else "FAIL"
                    log(
                        f"{mode:6} round {round_ + 1} {tool:18} {rate:6g} Hz: {result['samples']:6}"
                        f" samples, lost {share:6.2%} {verdict} · load {result['load']:.1f}"
                    )
    procs.stop(target)
    return {"rates": rates, "rounds": rounds, "seconds": seconds, "tools": TOOLS,
            "modes": list(MODES), "runs": runs}  # fmt: skip


def measure(
    procs: Procs, workdir: Path, tool: str, pid: int, rate: float, seconds: float, rt: int | None
) -> dict[str, Any]:
    load = load_average()
    if tool == "floor":
        argv = [PYTHON, "-m", "benchmarks.floor", "--rate", f"{rate:g}", "--seconds",
                f"{seconds:g}"]  # fmt: skip
        out = finish(procs, argv, seconds + 30, "the sleep loop", rt=rt)
        return judge({**json.loads(out), "tool": tool, "rate": rate, "load": load})
    out = workdir / f"rate-{tool}-{rate:g}-{time.monotonic_ns()}.out"
    child = start_profiler(procs, tool, pid, rate, out, idle=True, rt=rt)
    began = time.monotonic()
    time.sleep(seconds)
    stopped = time.monotonic()
    result: dict[str, Any] = dict(stop_profiler(procs, child, tool))
    if tool.startswith("py-spy"):
        result["seconds"] = stopped - began
    return judge({**result, "tool": tool, "rate": rate, "load": load})
