"""The performance harness (``make bench``): sidecar against no profiler and against py-spy.

Runs, in one go on one machine, each part interleaved in rounds so that other work on the
machine hits every leg alike:

1+2. ``overhead``: target throughput at saturation and p99 latency at half of it (aiohttp +
     uvloop pinned to one CPU, wrk on the other), legs none / sidecar / sidecar --blocking /
     py-spy;
3.   ``pauses``: blocking mode's pause per sample, one Python thread with and without 150 idle
     native threads;
4.   ``cost``: ``sidecar serve``'s CPU per target at 100 Hz on ~30-frame stacks, and where it
     goes (per part, system calls, perf);
5.   ``rates``: the highest sampling rate with < 1 % late or missed samples, sidecar vs py-spy;
6.   ``store``: database bytes per target-hour and 24 h vs 1 h queries (``benchmarks/store.py``).

    python -m benchmarks.bench [--only overhead,pauses,...] [--quick] [--from-json JSON] [--out DIR]

The figures the reports print go to benchmarks/REPORT.json (``report.SUMMARY`` says which;
``--only`` replaces just those parts), the report to benchmarks/REPORT.md; ``--from-json`` writes
it again from such figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import cost, overhead, pauses, rates, report, store
from benchmarks.common import main
from benchmarks.procs import load_average, machine
from benchmarks.table import Report, keep
from tests.support.procs import Procs

PARTS = ("overhead", "pauses", "cost", "rates", "store")

#: Sizes of each part: the full run (about 16 minutes) and --quick (a few minutes, to try).
FULL: dict[str, dict[str, Any]] = {
    "overhead": {"rounds": 6, "seconds": 4.0, "rate_hz": 100.0},
    "pauses": {"rounds": 3, "seconds": 4.0, "rate_hz": 100.0},
    "cost": {"targets": 4, "seconds": 40.0, "warmup": 12.0, "perf_seconds": 10.0},
    "rates": {"rates": [100, 250, 500, 1000, 2000, 3000, 5000, 7000, 10000], "rounds": 1,
              "seconds": 3.0}, "store": {"minutes": 6.0},
}  # fmt: skip
QUICK: dict[str, dict[str, Any]] = {
    "overhead": {"rounds": 1, "seconds": 3.0, "rate_hz": 100.0},
    "pauses": {"rounds": 1, "seconds": 2.0, "rate_hz": 100.0},
    "cost": {"targets": 2, "seconds": 12.0, "warmup": 11.0, "perf_seconds": 3.0},
    "rates": {"rates": [100, 1000, 3000], "rounds": 1, "seconds": 2.0}, "store": {"minutes": 0.5},
}  # fmt: skip


def log(line: str) -> None:
    print(line, flush=True)


def run_part(name: str, params: dict[str, Any], workdir: Path) -> dict[str, Any]:
    began, load = time.monotonic(), load_average()
    with Procs(workdir) as procs:
        if name == "store":
            result = store.measure(params["minutes"], log)
        elif name == "pauses":
            result = pauses.run(procs, log=log, **params)
        else:
            module = {"overhead": overhead, "cost": cost, "rates": rates}[name]
            result = module.run(procs, workdir, log=log, **params)  # type: ignore[attr-defined]
    result["phase"] = {"seconds": time.monotonic() - began, "load_start": load,
                       "load_end": load_average(), "params": params,
                       "finished": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
    return result


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The parts ``--only`` names (all by default), into the saved figures of the others."""
    parts = PARTS if not args.only else tuple(p.strip() for p in args.only.split(","))
    if unknown := set(parts) - set(PARTS):
        raise SystemExit(f"--only: unknown parts: {', '.join(sorted(unknown))}")
    out, sizes, began = Report("REPORT", args.out), QUICK if args.quick else FULL, time.monotonic()
    results = json.loads(out.json.read_text()) if args.only and out.json.exists() else {}
    results["machine"] = machine()
    for name in parts:
        log(f"== {name} (load average {load_average():.1f})")
        results[name] = run_part(name, sizes[name], workdir)
        out.save(keep(results, report.SUMMARY))
    date = time.strftime("%Y-%m-%d %H:%M")
    results["run"] = {"seconds": time.monotonic() - began, "quick": args.quick, "date": date,
                      "parts": list(parts)}  # fmt: skip
    return keep(results, report.SUMMARY)


if __name__ == "__main__":
    sys.exit(main(__doc__, "REPORT", measure, report.write, {
        "--only": (None, f"comma-separated parts of {', '.join(PARTS)}"),
        "--quick": (False, "short runs, to try the harness"),
    }))  # fmt: skip
