"""The benchmark harness reads other tools' output: those readers, on real output shapes.

No timing is asserted here; the benchmarks themselves are not tests (``make bench``).
"""

from __future__ import annotations

import sys

from helpers import ROOT

sys.path.insert(0, str(ROOT))

from benchmarks.cost import categorize, parse_perf_script
from benchmarks.procs import parse_pyspy, parse_record, parse_wrk
from benchmarks.rates import highest, judge


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
        "samples 1,885 in 18.9 s at 100 Hz · errors 3 · late 23 · missed 5 · "
        "lag mean 0.12 ms, max 0.40 ms\n"
    )
    assert parse_record(record) == {
        "samples": 1885,
        "seconds": 18.9,
        "errors": 3,
        "late": 23,
        "missed": 5,
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
