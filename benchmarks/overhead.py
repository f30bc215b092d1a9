"""Goals 1 and 2: what a profiler at 100 Hz costs the target, in throughput and in latency.

An aiohttp (uvloop) target pinned to CPU 0 serves ``/health``; wrk (one thread) and the profilers
run pinned to CPU 1. Two saturating wrk runs without a profiler give the saturation rate. Then, in
rounds (the order rotating every round), each leg (none, sidecar, sidecar --blocking, py-spy in
its default mode, which pauses the whole process per sample) attaches its profiler, drives the
target saturated for ``seconds``, then at half that rate (``wrk_report.lua``'s fixed schedule),
and detaches. Per leg: req/s, the target thread's CPU and run-queue wait (schedstat), the share
of time it stood in ptrace stop, latency percentiles at half rate, what the profiler sampled.

In the report, ratios are paired per round with the no-profiler leg: median (min–max). *Per
CPU-second*: req/s per second of CPU the target's thread got; *stopped*: its share of time in
ptrace stop; *modeled*: per CPU-second × (1 − stopped), the ratio of a target that owns its core.
Latency at half rate: one fixed schedule over 50 connections, per request as wrk measures it.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.procs import load_average, schedstat, start_profiler, stop_profiler, wrk
from tests.support.procs import Procs

LEGS = ("none", "sidecar", "sidecar-blocking", "py-spy")
TARGET_CPU, LOAD_CPU = "0", "1"
#: Target, wrk and profilers run at this nice, so the other work on a shared machine (nice 0)
#: takes less of their CPUs; every leg alike.
NICE = -10
SATURATE_CONNECTIONS, PACED_CONNECTIONS = 32, 50
PATH = "/health"


def run(
    procs: Procs, workdir: Path, *, rounds: int, seconds: float, rate_hz: float,
    log: Callable[[str], None],
) -> dict[str, Any]:  # fmt: skip
    target, base = procs.target("aiohttp_app", "--uvloop", cpus=TARGET_CPU, nice=NICE)
    url = f"{base}{PATH}"
    load = {"seconds": seconds, "cpus": LOAD_CPU, "nice": NICE}
    calibration = [wrk(procs, url, connections=SATURATE_CONNECTIONS, **load) for _ in range(2)]
    saturation = statistics.median(r["rps"] for r in calibration)
    paced = round(saturation / 2)
    log(f"saturation {saturation:,.0f} req/s; latency legs at {paced:,} req/s")
    legs: list[dict[str, Any]] = []
    for round_ in range(rounds):
        for leg in LEGS[round_ % len(LEGS) :] + LEGS[: round_ % len(LEGS)]:
            r = run_leg(procs, workdir, target.pid, leg, url, paced, seconds, rate_hz)
            legs.append({**r, "round": round_})
            log(f"round {round_ + 1} {leg:17} {r['rps']:8,.0f} req/s, "
                f"{r['rps'] / max(1e-9, r['cpu_share']):8,.0f} per CPU-second, stopped "
                f"{r['stopped_share']:6.2%} · p99 at half rate {r['paced']['p99_us'] / 1000:6.2f} "
                f"ms · load {r['load']:.1f}")  # fmt: skip
    procs.stop(target)
    return {"path": PATH, "rate_hz": rate_hz, "seconds": seconds, "rounds": rounds, "nice": NICE,
            "calibration": calibration, "saturation": saturation, "paced_rate": paced,
            "legs": legs}  # fmt: skip


def run_leg(
    procs: Procs, workdir: Path, pid: int, leg: str, url: str, paced: float, seconds: float,
    rate_hz: float,
) -> dict[str, Any]:  # fmt: skip
    load, profiler, attached = load_average(), None, time.monotonic()
    if leg != "none":
        out = workdir / f"{leg}-{pid}-{time.monotonic_ns()}.out"
        profiler = start_profiler(procs, leg, pid, rate_hz, out, cpus=LOAD_CPU, nice=NICE)
        attached = time.monotonic()
    time.sleep(0.5)
    poller = StatePoller(pid)
    (run0, wait0), t0 = schedstat(pid), time.monotonic()
    saturated = wrk(procs, url, seconds=seconds, connections=SATURATE_CONNECTIONS,
                    cpus=LOAD_CPU, nice=NICE)  # fmt: skip
    (run1, wait1), t1 = schedstat(pid), time.monotonic()
    states = poller.stop()
    time.sleep(0.3)
    paced_run = wrk(procs, url, seconds=seconds, connections=PACED_CONNECTIONS, rate=paced,
                    cpus=LOAD_CPU, nice=NICE)  # fmt: skip
    sampled: dict[str, float] = {}
    if profiler is not None:
        elapsed = time.monotonic() - attached
        sampled = stop_profiler(procs, profiler, leg)
        sampled["rate"] = sampled["samples"] / elapsed
    return {
        "leg": leg, "load": load, "load_end": load_average(), "rps": saturated["rps"],
        "cpu_share": (run1 - run0) / (t1 - t0), "wait_share": (wait1 - wait0) / (t1 - t0),
        "states": states, "stopped_share": states.get("t", 0) / max(1, sum(states.values())),
        "saturated": saturated, "paced": paced_run, "profiler": sampled,
    }  # fmt: skip


class StatePoller:
    """Polls the state letter of the target's main thread (``/proc/PID/task/PID/stat``) about
    every 0.5 ms on a thread of its own: the share of polls in ``t`` (ptrace stop) is the
    share of time a profiler kept it stopped, as the target lives it."""

    def __init__(self, pid: int, interval: float = 0.0005) -> None:
        self.fd = os.open(f"/proc/{pid}/task/{pid}/stat", os.O_RDONLY)
        self.interval, self.counts, self.done = interval, Counter[str](), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                stat = os.pread(self.fd, 512, 0)
            except OSError:
                return
            close = stat.rfind(b")")
            if close > 0:
                self.counts[chr(stat[close + 2])] += 1
            time.sleep(self.interval)

    def stop(self) -> dict[str, int]:
        self.done.set()
        self.thread.join()
        os.close(self.fd)
        return dict(self.counts)


def paired(
    legs: list[dict[str, Any]], leg: str, value: Callable[[dict[str, Any]], float]
) -> list[float]:
    """Per round: ``value`` of ``leg`` divided by ``value`` of the no-profiler leg."""
    base = {r["round"]: value(r) for r in legs if r["leg"] == "none"}
    return [value(r) / base[r["round"]] for r in legs if r["leg"] == leg and r["round"] in base]
