"""The pause goal: how long blocking mode stops the target per sample, with and without 150 idle
native threads beside its one Python thread.

Two targets (``targets/native_threads.py``: one Python thread working 20 % of the time at
the bottom of 20 frames; one of them with 150 extra threads parked in ``pause()``) are sampled
in turn by the native ``Sampler`` (in a child process, ``python -m benchmarks.pauses PID``),
in rounds: blocking at ``rate_hz`` (the sampler's own counters: pause mean, p99, max), then
non-blocking (read time without any stop), so the part of a pause that grows with the thread
count shows.

Both are done twice: as the machine is (``normal``), and with targets and sampler at real-time
priority (``chrt -f``, ``rt``), which keeps other work on the machine from preempting them
mid-pause: what a node with spare CPU would see.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import floor
from benchmarks.procs import load_average
from tests.support.procs import PYTHON, Procs

VARIANTS = (("1 Python thread", 0), ("1 Python thread + 150 native threads", 150))
MODES = {"normal": None, "rt": 2}

Log = Callable[[str], None]


def sample(
    procs: Procs,
    pid: int | list[int],
    *,
    blocking: bool,
    rate_hz: float,
    seconds: float,
    rt: int | None,
    reader: str = "auto",
    clock: str = "own",
) -> dict[str, Any]:
    """The sampler's stats after ``seconds`` of sampling ``pid`` (or several PIDs, one sampler
    each, on their own threads or the shared clock) in a child process."""
    load = load_average()
    pids = [str(p) for p in (pid if isinstance(pid, list) else [pid])]
    argv = [PYTHON, "-m", "benchmarks.pauses", *pids, "--rate", f"{rate_hz:g}"]
    argv += ["--seconds", f"{seconds:g}", "--reader", reader, "--clock", clock]
    argv += ["--blocking"] if blocking else []
    child = procs.start(argv, rt=rt)
    code = child.popen.wait(seconds + 60)
    procs.children.remove(child)
    if code != 0:
        raise RuntimeError(f"sampling {pid} failed: {child.stderr()[-300:]}")
    stats: dict[str, Any] = json.loads(child.stdout())
    stats["load"] = load
    return stats


def run(procs: Procs, *, rounds: int, seconds: float, rate_hz: float, log: Log) -> dict[str, Any]:
    lifetime = str(len(MODES) * rounds * len(VARIANTS) * (seconds * 1.5 + 3) + 60)
    runs: list[dict[str, Any]] = []
    floors: dict[str, dict[str, Any]] = {}
    for mode, rt in MODES.items():
        targets = {}
        for name, threads in VARIANTS:
            child, _ = procs.target(
                "native_threads",
                "--threads",
                str(threads),
                "--seconds",
                lifetime,
                rt=rt and rt - 1,
            )
            targets[name] = child
        for round_ in range(rounds):
            order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
            for name, threads in order:
                pid = targets[name].pid
                stopped = sample(procs, pid, blocking=True, rate_hz=rate_hz, seconds=seconds, rt=rt)
                free = sample(
                    procs, pid, blocking=False, rate_hz=rate_hz, seconds=seconds / 2, rt=rt
                )
                runs.append(
                    {
                        "mode": mode,
                        "variant": name,
                        "threads": threads,
                        "round": round_,
                        "blocking": stopped,
                        "nonblocking": free,
                    }
                )
                log(
                    f"{mode:6} round {round_ + 1} {name:38} pause p99 "
                    f"{stopped['pause_p99'] * 1e6:7.1f} µs, mean "
                    f"{stopped['pause_mean'] * 1e6:6.1f} µs · read (non-blocking) "
                    f"{free['read_mean'] * 1e6:6.1f} µs · load {stopped['load']:.1f}"
                )
        # the machine's floor: a bare ptrace stop and resume of the same thread, nothing read
        floors[mode] = floor.native_floor(
            procs, targets[VARIANTS[0][0]].pid, rate=rate_hz, seconds=seconds, rt=rt
        )
        log(
            f"{mode:6} floor: bare stop and resume p99 {floors[mode]['pause']['p99_us']:.1f} µs, "
            f"mean {floors[mode]['pause']['mean_us']:.1f} µs"
        )
        for child in targets.values():
            procs.stop(child)
    return {
        "rate_hz": rate_hz,
        "seconds": seconds,
        "rounds": rounds,
        "modes": list(MODES),
        "runs": runs,
        "floors": floors,
    }


def sampler_thread_seconds(names: tuple[str, ...] = ("sidecar-sampl", "sidecar-tasks")) -> float:
    """CPU seconds of this process's sampling threads so far (scheduler statistics): the
    thread samplers' and the task scans' (``sidecar-tasks``), or those whose names begin with
    one of ``names``."""
    total = 0.0
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().startswith(names):
                total += int((task / "schedstat").read_text().split()[0]) / 1e9
        except OSError:
            continue
    return total


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
    samplers = [
        Sampler(
            pid,
            rate_hz=args.rate,
            blocking=args.blocking,
            window=1.0,
            reader=args.reader,
            clock=args.clock,
        )
        for pid in args.pid
    ]
    try:
        time.sleep(0.5)
        cpu0 = sampler_thread_seconds()
        samples0 = sum(s.stats()["samples"] for s in samplers)
        time.sleep(args.seconds)
        cpu1, all_stats = sampler_thread_seconds(), [dict(s.stats()) for s in samplers]
    finally:
        for sampler in samplers:
            sampler.stop()
    samples = sum(s["samples"] for s in all_stats)
    stats = all_stats[0]
    stats["thread_cpu_per_sample"] = (cpu1 - cpu0) / max(1, samples - samples0)
    ticks = sum(s["samples"] + s["errors"] + s["missed"] for s in all_stats)
    stats["late_share_all"] = sum(s["late"] + s["missed"] for s in all_stats) / max(1, ticks)
    stats["targets"] = len(samplers)
    stats["clock"] = args.clock
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
