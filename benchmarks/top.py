"""What ``sidecar top`` costs at its default rate: the CPU of a core its process takes, and what
the target it watches loses.

An aiohttp target (targets/aiohttp_app.py) serves wrk at a fixed rate (one connection per 50
requests a second, ``/cpu?repeat=20``: about a fifth of its loop busy), in interleaved rounds
without and with ``sidecar top --pid`` drawing in an 80x24 tmux session (textual, 100 Hz, task
scans at 10 Hz). Measured over each wrk run, after a warm-up: top's CPU (the scheduler's
nanosecond run time of its threads: the native sampler's and task scanner's, and the rest:
Python draining and analyzing the windows, and textual drawing), the target's CPU and wrk's
latency percentiles. Per mode the median round counts.

    python -m benchmarks.top [--rounds 3] [--seconds 20] [--rps 200]

Writes benchmarks/REPORT-top.md and REPORT-top.json.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import main, thread_seconds
from benchmarks.procs import load_average, machine, wrk
from benchmarks.table import Col, Report, med
from tests.support.procs import PYTHON, ROOT, Procs

WARMUP = 5.0
SAMPLER_THREADS = ("sidecar-sampl", "sidecar-tasks")


def target_seconds(pid: int) -> float:
    return sum(thread_seconds(pid).values())


def top_seconds(pid: int) -> dict[str, float]:
    threads = thread_seconds(pid)
    sampler = sum(s for name, s in threads.items() if name.startswith(SAMPLER_THREADS))
    return {"sampler": sampler, "python": sum(threads.values()) - sampler}


def start_top(pid: int, session: str) -> int:
    """``sidecar top --pid PID`` in a detached 80x24 tmux session; its PID."""
    tmux = shutil.which("tmux") or "tmux"
    command = (
        f"cd {shlex.quote(str(ROOT))} && exec {shlex.quote(PYTHON)} -m sidecar top --pid {pid}"
    )
    subprocess.run([tmux, "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command],
                   check=True)  # fmt: skip
    out = subprocess.run([tmux, "list-panes", "-t", session, "-F", "#{pane_pid}"], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return int(out.split()[0])


def stop_top(session: str) -> None:
    tmux = shutil.which("tmux") or "tmux"
    subprocess.run([tmux, "send-keys", "-t", session, "q"], check=False)
    time.sleep(1.0)
    subprocess.run([tmux, "kill-session", "-t", session], check=False, capture_output=True)


def one_run(procs: Procs, pid: int, url: str, top: bool, seconds: float, rps: float) -> Any:
    session = f"bench-top-{time.monotonic_ns()}"
    top_pid = start_top(pid, session) if top else None
    try:
        time.sleep(WARMUP)
        own0 = top_seconds(top_pid) if top_pid else {}
        target0, t0 = target_seconds(pid), time.monotonic()
        load = wrk(procs, f"{url}/cpu?repeat=20", seconds=seconds,
                   connections=max(1, int(rps // 50)), rate=rps)  # fmt: skip
        t1, target1 = time.monotonic(), target_seconds(pid)
        own1 = top_seconds(top_pid) if top_pid else {}
    finally:
        if top:
            stop_top(session)
    out = {
        "target_cpu": (target1 - target0) / (t1 - t0),
        "rps": load["rps"],
        "p50_ms": load["p50_us"] / 1000,
        "p99_ms": load["p99_us"] / 1000,
        "errors": load["socket_errors"] + load["status_errors"] + load["timeouts"],
    }
    if top:
        out.update({f"top_{part}": (own1[part] - own0[part]) / (t1 - t0) for part in own0})
    return out


def run(rounds: int, seconds: float, rps: float, workdir: Path) -> dict[str, Any]:
    with Procs(workdir) as procs:
        child, url = procs.target("aiohttp_app")
        assert url is not None
        load0 = load_average()
        runs: dict[str, list[dict[str, Any]]] = {"alone": [], "top": []}
        for number in range(rounds):
            for mode, results in runs.items():
                results.append(one_run(procs, child.pid, url, mode == "top", seconds, rps))
                print(f"round {number + 1} {mode}: {results[-1]}", flush=True)
        load1 = load_average()
    return {"machine": machine(), "rounds": rounds, "seconds": seconds, "rps": rps,
            "load": [load0, load1], "runs": runs}  # fmt: skip


def write_report(data: dict[str, Any], report: Report) -> None:
    runs = data["runs"]

    def m(mode: str, key: str) -> float:
        return med(r[key] for r in runs[mode])

    def spread(mode: str, key: str) -> float:
        values = [r[key] for r in runs[mode]]
        return max(values) - min(values)

    sampler, python = m("top", "top_sampler"), m("top", "top_python")
    totals = [r["top_sampler"] + r["top_python"] for r in runs["top"]]
    total = med(totals)
    mach = data["machine"]
    report.add(
        "# sidecar top: its cost at the default rate",
        f"`python -m benchmarks.top --rounds {data['rounds']} --seconds {data['seconds']:g} "
        f"--rps {data['rps']:g}` (100 Hz, task scans at 10 Hz, an 80x24 tmux session, "
        f"{WARMUP:g} s warm-up; how: the module's docstring). Machine: {mach.get('cpu', '?')}, "
        f"{mach.get('cores', '?')} cores; load average {data['load'][0]:.1f} at the start, "
        f"{data['load'][1]:.1f} at the end (other work shares the machine).",
    )
    pct = "{:.2%} of a core".format
    report.table(["top"], [
        Col("process", lambda r: "sidecar top", left=True),
        Col("CPU, median", lambda r: total, pct, left=True),
        Col("sampler threads", lambda r: sampler, pct, left=True),
        Col("Python (windows, drawing)", lambda r: python, pct, left=True),
        Col("rounds", lambda r: ", ".join(f"{x:.2%}" for x in totals), left=True),
    ])  # fmt: skip
    report.table(["alone", "top"], [
        Col("target", lambda r: "alone" if r == "alone" else "watched by top", left=True),
        Col("its CPU, median", lambda r: m(r, "target_cpu"), pct, left=True),
        Col("requests/s", lambda r: m(r, "rps"), "{:.0f}"),
        Col("p50 latency", lambda r: m(r, "p50_ms"), "{:.2f} ms"),
        Col("p99 latency", lambda r: m(r, "p99_ms"), "{:.2f} ms"),
        Col("errors", lambda r: sum(x["errors"] for x in runs[r]), "{:.0f}"),
    ])  # fmt: skip
    d50 = m("top", "p50_ms") - m("alone", "p50_ms")
    noise = max(spread("alone", "p50_ms"), spread("top", "p50_ms"))
    within = "within" if abs(d50) <= noise else "beyond"
    report.add(
        f"At its default rate `sidecar top` takes {total:.2%} of a core: {sampler:.2%} in the "
        f"native sampler's threads and {python:.2%} in Python, which drains and analyzes a "
        f"window a second and redraws the screen ({python / total if total else 0:.0%} of its "
        f"cost). Watched, the target's median latency moved by {d50:+.2f} ms, {within} the "
        f"{noise:.2f} ms the rounds of one mode spread over; its own CPU moved from "
        f"{m('alone', 'target_cpu'):.2%} to {m('top', 'target_cpu'):.2%} of a core (a "
        "non-blocking sampler never stops it: it reads its memory from outside)."
    )


if __name__ == "__main__":
    sys.exit(
        main(__doc__, "REPORT-top", lambda a, w: run(a.rounds, a.seconds, a.rps, w),
             write_report, {"--rounds": 3, "--seconds": 20.0, "--rps": 200.0})
    )  # fmt: skip
