"""The benchmark harness reads other tools' output: those readers, on real output shapes.

No timing is asserted here; the benchmarks themselves are not tests (``make bench``).
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

from tests.support.helpers import ROOT

sys.path.insert(0, str(ROOT))

from benchmarks.cost import categorize, parse_perf_script
from benchmarks.procs import parse_pyspy, parse_record, parse_wrk
from benchmarks.rates import highest, judge
from benchmarks.report import CPU_GOAL, cpu_bound, pause_bound, rate_bound

STORED = json.loads((ROOT / "benchmarks" / "REPORT.json").read_text())


def test_wrk_summary_line() -> None:
    text = (
        "Running 5s test @ http://127.0.0.1:1/health\n  1 threads and 32 connections\n"
        'BENCH {"requests": 10010, "duration_us": 5005391, "socket_errors": 0, '
        '"status_errors": 0, "timeouts": 0, "p50_us": 207, "p90_us": 591, "p99_us": 4730, '
        '"p999_us": 19376, "mean_us": 447.2, "max_us": 20336}\n'
    )
    result = parse_wrk(text)
    assert result["requests"] == 10010
    assert result["p99_us"] == 4730
    assert abs(result["rps"] - 10010 / 5.005391) < 1e-6


def test_record_and_pyspy_summaries() -> None:
    record = (
        "sampling PID 4242 (Python 3.11.7) at 100 Hz until Ctrl-C\n"
        "ticks 1,885 in 18.9 s at 100 Hz (3,770 samples, one per thread and tick) · errors 3 · "
        "late 1,724 · missed 6,762 · "
        "lag mean 0.12 ms, max 0.40 ms\n"
    )
    assert parse_record(record) == {
        "samples": 1885,
        "seconds": 18.9,
        "errors": 3,
        "late": 1724,
        "missed": 6762,
    }
    pyspy = (
        "py-spy> Sampling process 100 times a second. Press Control-C to exit.\n\n"
        "py-spy> Stopped sampling because Control-C pressed\n"
        "py-spy> Wrote raw flamegraph data to '/tmp/x'. Samples: 291 Errors: 0\n"
    )
    assert parse_pyspy(pyspy) == {"samples": 291, "errors": 0}


def test_perf_samples_are_categorized_by_kernel_chain_and_leaf() -> None:
    script = (
        "sidecar-sampler 17049 \n"
        "\tffffffff815f28bb find_vma ([kernel.kallsyms])\n"
        "\tffffffff815d9efb __get_user_pages ([kernel.kallsyms])\n"
        "\tffffffff81614e25 process_vm_rw ([kernel.kallsyms])\n"
        "\t          1094aa process_vm_readv (/usr/lib/x86_64-linux-gnu/libc.so.6)\n"
        "\n"
        "sidecar-sampler 17049 \n"
        "\t           998bc __libc_calloc (/usr/lib/x86_64-linux-gnu/libc.so.6)\n"
        "\t             a41 [unknown] ([unknown])\n"
        "\n"
        "python 17001 \n"
        "\t          5f00aa _PyEval_EvalFrameDefault+0x10 (/usr/bin/python3.11)\n"
    )
    assert parse_perf_script(script) == {"vm_pages": 1, "alloc": 1, "python": 1}
    copy = [("_copy_to_iter", "[kernel.kallsyms]"), ("process_vm_rw", "[kernel.kallsyms]")]
    assert categorize("sidecar-sampler", copy) == "vm_copy"
    regex = [("regex_automata::hybrid::search::find_fwd", "/x/_native.so")]
    assert categorize("sidecar-sampler", regex) == "proc_regex"


def test_rate_ladder_judgement() -> None:
    runs = [
        judge({"tool": "sidecar", "rate": 100, "samples": 990, "errors": 0, "late": 2,
               "missed": 0, "mode": "normal"}),
        judge({"tool": "sidecar", "rate": 500, "samples": 900, "errors": 0, "late": 80,
               "missed": 20, "mode": "normal"}),
        judge({"tool": "py-spy", "rate": 100, "samples": 396, "seconds": 4.0, "mode": "normal"}),
        judge({"tool": "py-spy", "rate": 500, "samples": 1700, "seconds": 4.0, "mode": "normal"}),
    ]  # fmt: skip
    assert [run["ok"] for run in runs] == [True, False, True, False]
    assert highest(runs, "sidecar", "normal") == 100
    assert highest(runs, "py-spy", "normal") == 100


def with_floor_rate(rates: dict[str, Any], tool: str, mode: str, top: float) -> dict[str, Any]:
    """The stored rate ladder, ``tool`` passing in ``mode`` up to ``top`` and failing above."""
    out = copy.deepcopy(rates)
    for run in out["runs"]:
        if run["tool"] == tool and run["mode"] == mode:
            run["ok"] = run["rate"] <= top
    return out


def test_report_conclusions_follow_the_figures() -> None:
    """The report's sentences on what bounds the goals change with the figures of the run
    they come from: the stored run, then the same run with one figure moved."""
    cost = STORED["cost"]
    assert cost["cpu_per_target"] > CPU_GOAL
    text = cpu_bound(cost)
    assert "(goal not met)" in text
    assert "The largest part of the sampler's CPU is `process_vm_readv`" in text
    asleep = copy.deepcopy(cost)
    asleep["perf"]["sleep"] = 10 * sum(cost["perf"].values())
    assert "The largest part of the sampler's CPU is sleeping and waking" in cpu_bound(asleep)
    cheap = copy.deepcopy(cost)
    cheap["cpu_per_target"] = CPU_GOAL / 2
    assert "(goal met)" in cpu_bound(cheap) and "largest part" not in cpu_bound(cheap)

    pauses = STORED["pauses"]
    assert "bound by ptrace and the scheduler" in pause_bound(pauses)
    quick = copy.deepcopy(pauses)
    for floor in quick["floors"].values():
        floor["pause"]["mean_us"] = 20.0
    assert "bound by ptrace" not in pause_bound(quick)
    alone = copy.deepcopy(pauses)
    for run in alone["runs"]:
        if run["threads"] == 150:  # the native threads cost the pause nothing
            twin = next(
                r
                for r in alone["runs"]
                if (r["mode"], r["round"], r["threads"]) == (run["mode"], run["round"], 0)
            )
            run["blocking"] = dict(twin["blocking"])
    assert "add no work to the pause" in pause_bound(alone)
    assert "add no work to the pause" not in pause_bound(pauses)

    rates = STORED["rates"]
    assert "bound by waking up on time" in rate_bound(rates)
    faster_floor = with_floor_rate(rates, "floor", "rt", max(rates["rates"]))
    assert "the read costs sidecar rate" in rate_bound(faster_floor)
