"""The pause goal: how long blocking mode stops the target per sample, with and without 150 idle
native threads beside its one Python thread.

Two ``targets/native_threads.py`` (one Python thread working 20 % of the time 20 frames deep; one
with 150 extra threads parked in ``pause()``) are sampled in turn, in rounds, by the native
``Sampler`` in a child (``python -m benchmarks.pauses PID...``, which prints its stats as JSON):
blocking at ``rate_hz`` (pause mean, p99, max), then non-blocking (the read without a stop). Both
as the machine is (``normal``) and at real-time priority (``chrt -f``, ``rt``), out of reach of
other work's preemption; then the machine's floor, a bare ptrace stop and resume of the same
thread with nothing read (``native/examples/floor.rs``). Blocking mode reads the on-CPU state of
the Python threads first, then seizes and interrupts only them, reads their stacks, and resumes
them; native threads are never touched.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from benchmarks import floor
from benchmarks.common import sampled
from benchmarks.procs import finish, load_average
from tests.support.procs import PYTHON, Procs

VARIANTS = (("1 Python thread", 0), ("1 Python thread + 150 native threads", 150))
MODES = {"normal": None, "rt": 2}


def sample(
    procs: Procs, pid: int | list[int], *, blocking: bool, rate_hz: float, seconds: float,
    rt: int | None, reader: str = "auto", clock: str = "own",
) -> dict[str, Any]:  # fmt: skip
    """The sampler's stats after ``seconds`` of sampling ``pid`` (or several PIDs, one sampler
    each, on their own threads or the shared clock) in a child process."""
    load = load_average()
    pids = [str(p) for p in (pid if isinstance(pid, list) else [pid])]
    options = f"--rate {rate_hz:g} --seconds {seconds:g} --reader {reader} --clock {clock}"
    argv = [PYTHON, "-m", "benchmarks.pauses", *pids, *options.split(), *["--blocking"] * blocking]
    out = finish(procs, argv, seconds + 60, f"sampling {pid}", rt=rt)
    return {**json.loads(out), "load": load}


def run(
    procs: Procs, *, rounds: int, seconds: float, rate_hz: float, log: Callable[[str], None]
) -> dict[str, Any]:
    lifetime = str(len(MODES) * rounds * len(VARIANTS) * (seconds * 1.5 + 3) + 60)
    runs: list[dict[str, Any]] = []
    floors: dict[str, dict[str, Any]] = {}
    for mode, rt in MODES.items():
        targets = {name: procs.target("native_threads", "--threads", str(threads), "--seconds",
                                      lifetime, rt=rt and rt - 1)[0].pid
                   for name, threads in VARIANTS}  # fmt: skip
        for round_ in range(rounds):
            for name, threads in VARIANTS[:: 1 if round_ % 2 == 0 else -1]:
                kw = {"rate_hz": rate_hz, "rt": rt}
                stopped = sample(procs, targets[name], blocking=True, seconds=seconds, **kw)
                free = sample(procs, targets[name], blocking=False, seconds=seconds / 2, **kw)
                runs.append({"mode": mode, "variant": name, "threads": threads, "round": round_,
                             "blocking": stopped, "nonblocking": free})  # fmt: skip
                log(f"{mode:6} round {round_ + 1} {name:38} pause p99 "
                    f"{stopped['pause_p99'] * 1e6:7.1f} µs, mean {stopped['pause_mean'] * 1e6:6.1f}"
                    f" µs · read (non-blocking) {free['read_mean'] * 1e6:6.1f} µs · load "
                    f"{stopped['load']:.1f}")  # fmt: skip
        # the machine's floor: a bare ptrace stop and resume of the same thread, nothing read
        bare = floor.native_floor(procs, targets[VARIANTS[0][0]], rate=rate_hz, seconds=seconds,
                                  rt=rt)  # fmt: skip
        floors[mode] = bare
        log(f"{mode:6} floor: bare stop and resume p99 {bare['pause']['p99_us']:.1f} µs, mean "
            f"{bare['pause']['mean_us']:.1f} µs")  # fmt: skip
        for child in [c for c in procs.children if c.pid in targets.values()]:
            procs.stop(child)
    return {"rate_hz": rate_hz, "seconds": seconds, "rounds": rounds, "modes": list(MODES),
            "runs": runs, "floors": floors}  # fmt: skip


def main() -> int:
    """Child: samples each PID for a while and prints the first sampler's stats as JSON, with
    the CPU time of the sampling threads per sample and the late or missed share of all."""
    from sidecar._native import Sampler

    parser = argparse.ArgumentParser(description="sample PIDs; print the sampler's stats")
    parser.add_argument("pid", type=int, nargs="+")
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--blocking", action="store_true")
    parser.add_argument("--reader", choices=("auto", "py-spy"), default="auto")
    parser.add_argument("--clock", choices=("own", "shared"), default="own")
    args = parser.parse_args()
    samplers = [Sampler(pid, rate_hz=args.rate, blocking=args.blocking, window=1.0,
                        reader=args.reader, clock=args.clock) for pid in args.pid]  # fmt: skip
    try:
        cpu, pairs = sampled(samplers, 0.5, args.seconds)
    finally:
        for sampler in samplers:
            sampler.stop()
    all_stats = [dict(after) for _, after in pairs]
    ticks = sum(s["samples"] + s["errors"] + s["missed"] for s in all_stats)
    made = sum(after["samples"] - before["samples"] for before, after in pairs)
    print(json.dumps({
        **all_stats[0], "thread_cpu_per_sample": cpu / max(1, made),
        "late_share_all": sum(s["late"] + s["missed"] for s in all_stats) / max(1, ticks),
        "targets": len(samplers), "clock": args.clock,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
