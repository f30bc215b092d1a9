"""Goals 1 and 2: what a profiler at 100 Hz costs the target, in throughput and in latency.

One aiohttp (uvloop) target pinned to CPU 0 serves ``/health``; wrk (one thread) and the
profilers run pinned to CPU 1. First two saturating wrk runs without a profiler give the
saturation rate. Then, in rounds, each leg in turn (the order rotates every round, so noise
from other work on the machine hits every leg alike):

    none · sidecar (``sidecar record``, default non-blocking) · sidecar --blocking · py-spy
    (``py-spy record``, its default mode: the whole process is paused for every sample)

attaches its profiler, drives the target saturated (wrk, back to back) for ``seconds``, then
at half the saturation rate (wrk with ``wrk_report.lua``'s fixed-rate schedule) for
``seconds``, then detaches. Per leg: requests per second at saturation, the target thread's
CPU and run-queue wait (``/proc/PID/task/TID/schedstat``), latency percentiles at half rate,
what the profiler says it sampled, and the load average.
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
TARGET_CPU = "0"
LOAD_CPU = "1"
#: Target, wrk and profilers run at this nice, so the other work on a shared machine (nice 0)
#: takes less of their CPUs; every leg alike.
NICE = -10
SATURATE_CONNECTIONS = 32
PACED_CONNECTIONS = 50
PATH = "/health"

Log = Callable[[str], None]


def leg_order(round_: int) -> tuple[str, ...]:
    """The legs of one round, rotated by one every round."""
    shift = round_ % len(LEGS)
    return LEGS[shift:] + LEGS[:shift]


def run(
    procs: Procs, workdir: Path, *, rounds: int, seconds: float, rate_hz: float, log: Log
) -> dict[str, Any]:
    target, base = procs.target("aiohttp_app", "--uvloop", cpus=TARGET_CPU, nice=NICE)
    assert base is not None
    url = base + PATH
    calibration = []
    for _ in range(2):
        calibration.append(
            wrk(
                procs,
                url,
                seconds=seconds,
                connections=SATURATE_CONNECTIONS,
                cpus=LOAD_CPU,
                nice=NICE,
            )
        )
    saturation = statistics.median(r["rps"] for r in calibration)
    paced = round(saturation / 2)
    log(f"saturation {saturation:,.0f} req/s; latency legs at {paced:,} req/s")
    legs: list[dict[str, Any]] = []
    for round_ in range(rounds):
        for leg in leg_order(round_):
            result = run_leg(procs, workdir, target.pid, leg, url, paced, seconds, rate_hz)
            result["round"] = round_
            legs.append(result)
            log(
                f"round {round_ + 1} {leg:17} {result['rps']:8,.0f} req/s, "
                f"{result['rps'] / max(1e-9, result['cpu_share']):8,.0f} per CPU-second, "
                f"stopped {result['stopped_share'] * 100:5.2f}% · p99 at half rate "
                f"{result['paced']['p99_us'] / 1000:6.2f} ms · load {result['load']:.1f}"
            )
    procs.stop(target)
    return {
        "path": PATH,
        "rate_hz": rate_hz,
        "seconds": seconds,
        "rounds": rounds,
        "nice": NICE,
        "calibration": calibration,
        "saturation": saturation,
        "paced_rate": paced,
        "legs": legs,
    }


def run_leg(
    procs: Procs,
    workdir: Path,
    pid: int,
    leg: str,
    url: str,
    paced: float,
    seconds: float,
    rate_hz: float,
) -> dict[str, Any]:
    load = load_average()
    profiler = None
    attached = time.monotonic()
    if leg != "none":
        out = workdir / f"{leg}-{pid}-{time.monotonic_ns()}.out"
        profiler = start_profiler(procs, leg, pid, rate_hz, out, cpus=LOAD_CPU, nice=NICE)
        attached = time.monotonic()
    time.sleep(0.5)
    poller = StatePoller(pid)
    (run0, wait0), t0 = schedstat(pid), time.monotonic()
    saturated = wrk(
        procs, url, seconds=seconds, connections=SATURATE_CONNECTIONS, cpus=LOAD_CPU, nice=NICE
    )
    (run1, wait1), t1 = schedstat(pid), time.monotonic()
    states = poller.stop()
    time.sleep(0.3)
    paced_run = wrk(
        procs,
        url,
        seconds=seconds,
        connections=PACED_CONNECTIONS,
        rate=paced,
        cpus=LOAD_CPU,
        nice=NICE,
    )
    sampled: dict[str, float] = {}
    if profiler is not None:
        elapsed = time.monotonic() - attached
        sampled = stop_profiler(procs, profiler, leg)
        sampled["rate"] = sampled["samples"] / elapsed
    wall = t1 - t0
    waited = wait1 - wait0
    return {
        "leg": leg,
        "load": load,
        "load_end": load_average(),
        "rps": saturated["rps"],
        # Requests per second of the time the target was not waiting for a CPU: other work
        # on the machine taking CPU 0 is left out; paused (stopped) time is not.
        "rps_adjusted": saturated["rps"] / max(1e-3, 1.0 - waited / wall),
        "cpu_share": (run1 - run0) / wall,
        "wait_share": waited / wall,
        "states": states,
        "stopped_share": states.get("t", 0) / max(1, sum(states.values())),
        "saturated": saturated,
        "paced": paced_run,
        "profiler": sampled,
    }


class StatePoller:
    """Polls the state letter of the target's main thread (``/proc/PID/task/PID/stat``) about
    every 0.5 ms on a thread of its own: the share of polls in ``t`` (ptrace stop) is the
    share of time a profiler kept it stopped, as the target lives it."""

    def __init__(self, pid: int, interval: float = 0.0005) -> None:
        self.fd = os.open(f"/proc/{pid}/task/{pid}/stat", os.O_RDONLY)
        self.interval = interval
        self.counts: Counter[str] = Counter()
        self.done = threading.Event()
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
