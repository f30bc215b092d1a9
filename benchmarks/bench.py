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
6.   ``store``: database bytes per target-hour and 24 h vs 1 h queries (``benchmarks/store.py``,
     which writes REPORT-store.md as well).

    python -m benchmarks.bench [--only overhead,pauses,...] [--quick] [--report-only]

Results go to benchmarks/REPORT.json (``--only`` replaces just those parts), the report to
benchmarks/REPORT.md with its plots in benchmarks/REPORT.png; ``--report-only`` writes them
and REPORT-store.md again from REPORT.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import cost, overhead, pauses, rates, report, store
from benchmarks.procs import load_average, machine
from tests.support.procs import Procs

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "REPORT.json"
PARTS = ("overhead", "pauses", "cost", "rates", "store")

#: Sizes of each part: the full run (about 16 minutes) and --quick (a few minutes, to try).
FULL: dict[str, dict[str, Any]] = {
    "overhead": {"rounds": 6, "seconds": 4.0, "rate_hz": 100.0},
    "pauses": {"rounds": 3, "seconds": 4.0, "rate_hz": 100.0},
    "cost": {"targets": 4, "seconds": 40.0, "warmup": 12.0, "perf_seconds": 10.0},
    "rates": {
        "rates": [100, 250, 500, 1000, 2000, 3000, 5000, 7000, 10000],
        "rounds": 1,
        "seconds": 3.0,
    },
    "store": {"minutes": 6.0},
}
QUICK: dict[str, dict[str, Any]] = {
    "overhead": {"rounds": 1, "seconds": 3.0, "rate_hz": 100.0},
    "pauses": {"rounds": 1, "seconds": 2.0, "rate_hz": 100.0},
    "cost": {"targets": 2, "seconds": 12.0, "warmup": 11.0, "perf_seconds": 3.0},
    "rates": {"rates": [100, 1000, 3000], "rounds": 1, "seconds": 2.0},
    "store": {"minutes": 0.5},
}


def log(line: str) -> None:
    print(line, flush=True)


def run_part(name: str, params: dict[str, Any], workdir: Path) -> dict[str, Any]:
    runners: dict[str, Callable[[Procs], dict[str, Any]]] = {
        "overhead": lambda procs: overhead.run(procs, workdir, log=log, **params),
        "pauses": lambda procs: pauses.run(procs, log=log, **params),
        "cost": lambda procs: cost.run(procs, workdir, log=log, **params),
        "rates": lambda procs: rates.run(procs, workdir, log=log, **params),
        "store": lambda procs: store.measure(params["minutes"], log),
    }
    began, load = time.monotonic(), load_average()
    with Procs(workdir) as procs:
        result = runners[name](procs)
    result["phase"] = {
        "seconds": time.monotonic() - began,
        "load_start": load,
        "load_end": load_average(),
        "params": params,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated parts of {', '.join(PARTS)}")
    parser.add_argument("--quick", action="store_true", help="short runs, to try the harness")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the reports from REPORT.json"
    )
    args = parser.parse_args()
    parts = PARTS if not args.only else tuple(p.strip() for p in args.only.split(","))
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    results: dict[str, Any] = {}
    if RESULTS.exists() and (args.only or args.report_only):
        results = json.loads(RESULTS.read_text())
    if not args.report_only:
        sizes = QUICK if args.quick else FULL
        results["machine"] = machine()
        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="sidecar-bench-") as tmp:
            for name in parts:
                log(f"== {name} (load average {load_average():.1f})")
                results[name] = run_part(name, sizes[name], Path(tmp))
                RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        results["run"] = {
            "seconds": time.monotonic() - began,
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "quick": args.quick,
            "parts": list(parts),
        }
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    if "store" in results and ("store" in parts or args.report_only):
        store.write_report(results["store"])
    report.write(results)
    log(f"wrote {report.REPORT.relative_to(ROOT)} and {report.CHART.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
