"""What telling the runnable threads that wait for a CPU costs a sample, side by side in one run.

The default sampler reads each thread a sample finds runnable from its ``schedstat`` (which of
them waits for a CPU, ``native/src/process/cpuwait.rs``); ``cpu_wait=False`` leaves that read out.
In interleaved rounds (each round's legs in the other order than the last's) one ``Sampler`` at
100 Hz reads, for ``--seconds`` after a warm-up, each CPython version's ``targets/deep.py`` (about
30 frames, 10 % on CPU) and ``targets/gil.py --holder spin`` (a thread spinning in pure Python,
runnable at every sample: the read's worst case), with the read and without it. CPU is the
sampling thread's per sample (schedstat); the ratio is of the two legs in the same round.

    python -m benchmarks.cpuwait [--rounds 5] [--seconds 4]

Writes benchmarks/REPORT-cpuwait.md and REPORT-cpuwait.json.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from benchmarks.common import main, measured, pythons
from benchmarks.report import paired_cell
from benchmarks.table import Col, Report, med
from benchmarks.versions import TARGETS, VERSIONS, cpus, leg, verdicts
from tests.support.procs import Procs

#: The legs: ``Sampler``'s keywords.
LEGS: dict[str, dict[str, Any]] = {"with the read": {}, "without": {"cpu_wait": False}}
#: The CPU per sample with the read within this much of the same without it.
WITHIN = 1.05


def run(rounds: int, seconds: float, workdir: Path) -> dict[str, Any]:
    interpreters = pythons(VERSIONS)
    legs: dict[str, Any] = {t: {v: {n: [] for n in LEGS} for v in VERSIONS} for t in TARGETS}
    with Procs(workdir) as procs:
        for round_ in range(rounds):
            order = list(LEGS)[:: 1 - round_ % 2 * 2]
            for version in VERSIONS:
                for target, (argv, _) in TARGETS.items():
                    child = procs.target(*argv, python=interpreters[version])[0]
                    for name in order:
                        r = leg(child.pid, seconds, **LEGS[name])
                        legs[target][version][name].append(r)
                        print(f"round {round_ + 1} {version} {target} {name}: "
                              f"{r['cpu_per_sample_us']:.1f} µs per sample, "
                              f"{r['state_reads']:.2f} run states", flush=True)  # fmt: skip
                    procs.stop(child)
    return {"rounds": rounds, "seconds": seconds, "legs": legs}


def write_report(data: dict[str, Any], report: Report) -> None:
    legs = data["legs"]
    rows = [
        {"target": t, "version": v, "leg": name,
         "cpu": med(r["cpu_per_sample_us"] for r in runs), "runs": cpus(runs),
         "states": med(r["state_reads"] for r in runs), "errors": sum(r["errors"] for r in runs)}
        for t in legs for v in legs[t] for name, runs in legs[t][v].items()
    ]  # fmt: skip
    report.add(
        "# What telling the waits for a CPU costs a sample",
        f"{measured(data)}; {data['rounds']} interleaved rounds of {data['seconds']:g} s per leg "
        "at 100 Hz: the default sampler, which reads the `schedstat` of each thread a sample "
        "finds runnable, against the same with `cpu_wait=False`, on `targets/deep.py` (10 % on "
        "CPU) and on `targets/gil.py --holder spin` (a spinning thread, runnable at every "
        "sample). CPU is the sampling thread's, per sample; the median round counts.",
    )
    report.table(rows, [
        Col("target", left=True), Col("version", left=True), Col("leg", left=True),
        Col("CPU per sample (µs)", "cpu", "{:.2f}"),
        Col("rounds, least to most (µs)", "runs", lambda v: f"{min(v):.2f}-{max(v):.2f}"),
        Col("/proc run states per sample", "states", "{:.2f}"), Col("errors"),
    ])  # fmt: skip
    ratios = {
        f"{v} on {t}": cpus(legs[t][v]["with the read"], legs[t][v]["without"])
        for t in legs
        for v in legs[t]
    }
    report.add(
        verdicts("With the read against without it", ratios, WITHIN),
        "Per round, with the read over without it: "
        + "; ".join(f"{name} {paired_cell(r, '{:.3f}x')}" for name, r in ratios.items())
        + ".",
    )


if __name__ == "__main__":
    sys.exit(
        main(__doc__, "REPORT-cpuwait", lambda a, w: run(a.rounds, a.seconds, w), write_report,
             {"--rounds": 5, "--seconds": 4.0})
    )  # fmt: skip
