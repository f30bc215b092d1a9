"""What a sample costs under each CPython version the walker reads, side by side in one run.

The same ~30-frame event loop (``targets/deep.py``, 10 % on CPU) runs under 3.11, 3.12, 3.13,
3.14 and 3.15 (interpreters from tests/pythons.py). For each, in interleaved rounds, one
``Sampler`` at 100 Hz reads it for ``--seconds`` after a warm-up, first with the default reader
and then with ``reader="py-spy"``; measured: the sampling thread's CPU (the scheduler's
nanosecond run time) per sample, the walker's memory reads per sample, and the run states it
read from /proc. Per version the median round counts, set against 3.11's walker.

Then four 3.11 targets on the shared clock (how ``serve`` samples: one wakeup per tick for all),
in rounds each followed at once by the machine's floor on the same targets
(``native/examples/floor.rs``): a native thread that only wakes at 100 Hz, and the same with, per
wakeup, the very reads the round's samplers made (recorded for a second after the measured
time, ``_native.record_reads``, and replayed in order, their share each tick). sidecar's own
work is the CPU per sample above that floor: everything but waking up and the kernel's copying
of the memory it read. The floor of the earlier reports, a read of each target of the same
shape (pieces and bytes per sample) laid out in the target's heap, is measured and shown too:
the kernel's part of a read depends on where the pieces lie (pages, mappings), so it charged
the real reads' extra kernel time to sidecar. A third floor replays the reads and also reads
each target thread's run state from /proc as the samplers did (from the file they report,
``stat`` or ``syscall``): the kernel's share of the own work. The round with the median own work
counts; there are ``--shared-rounds`` of them (five: on a shared host one round's own work
moves by several microseconds).

    python -m benchmarks.versions [--rounds 3] [--shared-rounds 5] [--seconds 6]

Writes benchmarks/REPORT-versions.md and REPORT-versions.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import floor
from benchmarks.pauses import sampler_thread_seconds
from benchmarks.procs import load_average, machine
from sidecar import _native
from tests.support.procs import Procs
from tests.support.pythons import find_pythons

if TYPE_CHECKING:
    from sidecar._native import SamplerStats

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "benchmarks" / "REPORT-versions.md"
RESULTS = ROOT / "benchmarks" / "REPORT-versions.json"
VERSIONS = ("3.11", "3.12", "3.13", "3.14", "3.15")
READERS = ("auto", "py-spy")
RATE = 100.0
WARMUP = 2.0
#: Each version's walker within this much of 3.11's CPU per sample.
WITHIN = 1.25
#: sidecar's own work per sample above the machine's floor on the shared clock, at most (µs).
OWN_WORK_US = 8.0
#: Targets on the shared clock.
SHARED_TARGETS = 4
#: How long the shared clock's reads are recorded for the floor to replay (s).
RECORD_SECONDS = 1.0


def ticks(stats: SamplerStats) -> int:
    """The ticks a sampler's per-tick means in ``stats()`` are over: samples and errors."""
    return stats["samples"] + stats["errors"]


def total(stats: SamplerStats, key: str) -> float:
    """A per-tick mean of ``stats()`` back as the total so far."""
    return float(stats[key]) * ticks(stats)  # type: ignore[literal-required]


def per_tick(before: SamplerStats, after: SamplerStats, key: str) -> float:
    """A per-tick mean of ``stats()`` over the ticks between two of its readings."""
    return (total(after, key) - total(before, key)) / max(ticks(after) - ticks(before), 1)


def leg(pid: int, reader: str, seconds: float) -> dict[str, Any]:
    """One sampler on ``pid`` for ``seconds`` after the warm-up: its CPU and reads per sample."""
    with _native.Sampler(pid, rate_hz=RATE, reader=reader) as sampler:  # type: ignore[arg-type]
        time.sleep(WARMUP)
        cpu0, stats0 = sampler_thread_seconds(), sampler.stats()
        time.sleep(seconds)
        cpu1, stats1 = sampler_thread_seconds(), sampler.stats()
    made = max(ticks(stats1) - ticks(stats0), 1)
    return {
        "reader": stats1["reader"],
        "samples": made,
        "errors": stats1["errors"] - stats0["errors"],
        "cpu_per_sample_us": (cpu1 - cpu0) / made * 1e6,
        "read_calls": per_tick(stats0, stats1, "read_calls"),
        "read_pieces": per_tick(stats0, stats1, "read_pieces"),
        "read_bytes": per_tick(stats0, stats1, "read_bytes"),
        "state_reads": per_tick(stats0, stats1, "state_reads"),
    }


def shared_leg(pids: list[int], seconds: float, reads: Path) -> dict[str, Any]:
    """Samplers of ``pids`` on the shared clock for ``seconds`` after the warm-up: the CPU of
    the sampling threads per sample, and the first sampler's reads per sample. Then their reads
    of a second more are recorded into ``reads`` (one call per line: PID ADDRESS:LENGTH ...),
    with the clock's ticks meanwhile, for the floor to replay."""
    samplers = [_native.Sampler(pid, rate_hz=RATE, clock="shared") for pid in pids]
    try:
        time.sleep(WARMUP)
        cpu0, stats0 = sampler_thread_seconds(), [s.stats() for s in samplers]
        time.sleep(seconds)
        cpu1, stats1 = sampler_thread_seconds(), [s.stats() for s in samplers]
        recorded = _native.record_reads(pids, RECORD_SECONDS)
        after = samplers[0].stats()
    finally:
        for sampler in samplers:
            sampler.stop()
    samples = sum(b["samples"] - a["samples"] for a, b in zip(stats0, stats1, strict=True))
    first0, first1 = stats0[0], stats1[0]
    reads.write_text(
        "".join(
            f"{pid} {' '.join(f'{address}:{length}' for address, length in pieces)}\n"
            for pid, pieces in recorded
        )
    )
    recorded_ticks = ticks(after) - ticks(first1)

    def in_place(key: str) -> float:
        """The time every sampler spent in its reads of one kind (timed around each) per
        sample of the round, in µs."""
        spent = sum(total(b, key) - total(a, key) for a, b in zip(stats0, stats1, strict=True))
        return spent / max(samples, 1) * 1e6

    return {
        "clock": first1["clock"],
        "recorded": {"reads": len(recorded), "ticks": recorded_ticks},
        "samples": samples,
        "errors": sum(b["errors"] - a["errors"] for a, b in zip(stats0, stats1, strict=True)),
        "cpu_per_sample_us": (cpu1 - cpu0) / max(samples, 1) * 1e6,
        "read_calls_us": in_place("read_calls_mean"),
        "state_reads_us": in_place("state_reads_mean"),
        "read_pieces": per_tick(first0, first1, "read_pieces"),
        "read_bytes": per_tick(first0, first1, "read_bytes"),
        "state_reads": per_tick(first0, first1, "state_reads"),
        "state_file": first1["state_file"],
    }


def run(rounds: int, shared_rounds: int, seconds: float, workdir: Path) -> dict[str, Any]:
    pythons = find_pythons()
    missing = [v for v in VERSIONS if v not in pythons]
    if missing:
        raise SystemExit(f"no interpreter for {', '.join(missing)}: run `make pythons` first")
    legs: dict[str, dict[str, list[dict[str, Any]]]] = {
        v: {r: [] for r in READERS} for v in VERSIONS
    }
    with Procs(workdir) as procs:
        targets = {
            v: procs.target("deep", "--busy", "0.1", python=str(pythons[v]))[0] for v in VERSIONS
        }
        for round_ in range(rounds):
            for version in VERSIONS:
                for reader in READERS:
                    result = leg(targets[version].pid, reader, seconds)
                    legs[version][reader].append(result)
                    print(
                        f"round {round_ + 1} {version} {reader}: "
                        f"{result['cpu_per_sample_us']:.1f} µs per sample ({result['reader']})",
                        flush=True,
                    )
        shared_pids = [targets["3.11"].pid] + [
            procs.target("deep", "--busy", "0.1", python=str(pythons["3.11"]))[0].pid
            for _ in range(SHARED_TARGETS - 1)
        ]
        # Each shared round is followed at once by the floor with the shape that round read,
        # so that both see the machine as it is then (CPU per sample moves by a quarter
        # between runs on a shared host, more than the own work measured).
        shared = []
        for round_ in range(shared_rounds):
            reads = workdir / f"reads-{round_ + 1}.txt"
            result = shared_leg(shared_pids, seconds, reads)
            shape = (max(1, round(result["read_pieces"])), max(1, round(result["read_bytes"])))
            result["floor"] = floor.native_floor(
                procs,
                shared_pids[0],
                rate=RATE,
                seconds=3.0,
                rt=None,
                shape=shape,
                also=tuple(shared_pids[1:]),
                replay=(reads, result["recorded"]["ticks"]),
                state_file=result["state_file"],
            )
            result["shape"] = shape
            shared.append(result)
            print(
                f"round {round_ + 1} shared clock, {SHARED_TARGETS} targets of 3.11: "
                f"{result['cpu_per_sample_us']:.1f} µs per sample ({result['clock']}), "
                f"own work {shared_own(result):.1f} µs "
                f"({shared_own_in_place(result):.1f} with the reads timed in place)",
                flush=True,
            )
    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine(),
        "load_average": load_average(),
        "rounds": rounds,
        "seconds": seconds,
        "legs": legs,
        "shared": shared,
    }


def shared_floor(result: dict[str, Any], leg: str = "replay") -> float:
    """The floor of a sample on the shared clock, from the floor measured after its round: one
    wakeup and, per tick, the round's own reads replayed (``leg="replay"``) or a read of the
    round's shape of each target (``"shape"``), or the wakeup alone (``"sleep"``), over the
    targets."""
    per_tick = float(result["floor"][leg]["cpu_per_tick_us"])
    return per_tick / int(result["floor"]["shape"]["targets"])


def shared_own(result: dict[str, Any], leg: str = "replay") -> float:
    """sidecar's own work per sample on the shared clock in one round: above its floor."""
    return float(result["cpu_per_sample_us"]) - shared_floor(result, leg)


def shared_own_in_place(result: dict[str, Any]) -> float:
    """The own work with the kernel's reads timed in place: the CPU per sample, less the
    floor's wakeup per sample and the time the samplers spent in their reads as they made them
    (no replay at another instant, so a machine whose speed moves between the round and its
    floor moves both alike)."""
    wake = shared_floor(result, "sleep")
    return float(result["cpu_per_sample_us"]) - wake - float(result["read_calls_us"])


def shared_states(result: dict[str, Any]) -> float:
    """What the kernel's reads of the run states cost a sample of the round (part of the own
    work): the floor's replay with each target thread's state file read per tick, above the
    replay alone, over the targets."""
    floor_ = result["floor"]
    extra = float(floor_["states"]["cpu_per_tick_us"]) - float(floor_["replay"]["cpu_per_tick_us"])
    return extra / int(floor_["shape"]["targets"])


def own_per_read(result: dict[str, Any]) -> float:
    """The own work with the reads timed in place, per µs of those reads: both move with the
    machine's speed at the instant, so their ratio compares rounds and runs where either alone
    moves with the machine."""
    return shared_own_in_place(result) / max(float(result["read_calls_us"]), 1e-9)


def steadier(shared: list[dict[str, Any]]) -> str:
    """What the ratio of own work to reads says of the rounds, beside the absolute figures."""
    owns = [shared_own_in_place(r) for r in shared]
    ratios = [own_per_read(r) for r in shared]
    return (
        f"Set against the reads timed at the same instants, the own work was "
        f"{statistics.median(ratios):.2f} µs per µs of them (median round; from "
        f"{min(ratios):.2f} to {max(ratios):.2f}, {max(ratios) / min(ratios):.2f}x, where the "
        f"own work itself went from {min(owns):.1f} to {max(owns):.1f} µs, "
        f"{max(owns) / min(owns):.2f}x): the figure to compare builds and runs by on a machine "
        "whose speed moves, not a measure of the goal, which is in µs."
    )


def own_verdict(shared: list[dict[str, Any]]) -> str:
    """The run's word on the own work: each measure's median round against the goal, and where
    the rounds lie, so that one round on a machine whose speed moves does not decide it."""
    replayed = [shared_own(r) for r in shared]
    in_place = [shared_own_in_place(r) for r in shared]
    by_replay, by_place = statistics.median(replayed), statistics.median(in_place)
    under = [sum(own <= OWN_WORK_US for own in owns) for owns in (replayed, in_place)]
    figures = (
        f"{by_replay:.1f} µs a sample by the replayed floor ({under[0]} of {len(shared)} rounds "
        f"under {OWN_WORK_US:g} µs, from {min(replayed):.1f} to {max(replayed):.1f}) and "
        f"{by_place:.1f} µs with the reads timed in place ({under[1]} of {len(shared)}, from "
        f"{min(in_place):.1f} to {max(in_place):.1f})"
    )
    goal = f"the {OWN_WORK_US:g} µs it should stay under"
    if max(by_replay, by_place) <= OWN_WORK_US:
        return f"Own work on the shared clock, {figures}, is within {goal} by both measures."
    if min(by_replay, by_place) > OWN_WORK_US:
        return f"Own work on the shared clock, {figures}, is above {goal} by both measures."
    return (
        f"Own work on the shared clock, {figures}: the two measures fall on either side of "
        f"{goal}, so this run does not tell."
    )


def median_cpu(results: list[dict[str, Any]]) -> float:
    return statistics.median(r["cpu_per_sample_us"] for r in results)


def write_report(data: dict[str, Any]) -> None:
    legs = data["legs"]
    base = median_cpu(legs["3.11"]["auto"])
    lines = [
        "# What a sample costs under each CPython version",
        "",
        f"Measured {data['when']} ({data['machine'].get('cpu', 'this machine')}), load average "
        f"{data['load_average']:.2f}; {data['rounds']} interleaved rounds of "
        f"{data['seconds']:g} s per leg at {RATE:g} Hz on `targets/deep.py` (about 30 frames, "
        "10 % on CPU). CPU is the sampling thread's, per sample; the median round counts.",
        "",
        "| version | reader | CPU per sample (µs) | rounds, least to most (µs) "
        "| against 3.11's walker | reads per sample | pieces | bytes | /proc run states | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for version in VERSIONS:
        for reader in READERS:
            results = legs[version][reader]
            cpu = median_cpu(results)
            last = results[-1]
            lines.append(
                f"| {version} | {last['reader']} | {cpu:.1f} "
                f"| {min(r['cpu_per_sample_us'] for r in results):.1f}-"
                f"{max(r['cpu_per_sample_us'] for r in results):.1f} | {cpu / base:.2f}x "
                f"| {statistics.median(r['read_calls'] for r in results):.2f} "
                f"| {statistics.median(r['read_pieces'] for r in results):.1f} "
                f"| {statistics.median(r['read_bytes'] for r in results):.0f} "
                f"| {statistics.median(r['state_reads'] for r in results):.2f} "
                f"| {sum(r['errors'] for r in results)} |"
            )
        if version != "3.11":
            ratio = median_cpu(legs[version]["auto"]) / base
            verdicts.append((version, ratio))
    met = [v for v, ratio in verdicts if ratio <= WITHIN]
    unmet = [f"{v} ({ratio:.2f}x)" for v, ratio in verdicts if ratio > WITHIN]
    lines += [
        "",
        f"Each version's default reader within {WITHIN}x of 3.11's walker: "
        + (
            "met by every version."
            if not unmet
            else f"met by {', '.join(met) or 'none'}; not by {', '.join(unmet)}."
        ),
    ]
    shared = data["shared"]
    targets = SHARED_TARGETS
    # the round whose own work is the median stands for the run (its figures side by side)
    ranked = sorted(shared, key=shared_own)
    mid = ranked[len(ranked) // 2]
    wake = mid["floor"]["sleep"]["cpu_per_tick_us"]
    replayed = mid["floor"]["replay"]
    shaped = mid["floor"]["shape"]["cpu_per_tick_us"]
    pieces, size = mid["shape"]
    reads_per_tick = replayed["reads"] / max(replayed["recorded_ticks"], 1)
    pieces_per_tick = replayed["pieces"] / max(replayed["recorded_ticks"], 1)
    own_each = ", ".join(f"{shared_own(r):.1f}" for r in shared)
    shape_each = ", ".join(f"{shared_own(r, 'shape'):.1f}" for r in shared)
    mid_own = shared_own(mid)
    lines += [
        "",
        "## Above the machine's floor",
        "",
        f"{targets} targets of 3.11 on the shared clock (one wakeup per tick for all, as `serve` "
        "samples), in rounds each followed at once by the machine's floor "
        f"(`native/examples/floor.rs`): a native thread that only wakes at {RATE:g} Hz, then "
        "the same replaying, per wakeup, the reads the round's samplers made (recorded for "
        f"{RECORD_SECONDS:g} s after the measured time, in order, each tick its share): the "
        f"floor of a sample is 1/{targets} of that. sidecar's own work (walking, folding, "
        "counting, /proc run states, the liveness check: all but waking up and the kernel's "
        "copying of what it read) is the CPU per sample above it. The same targets read with "
        "pieces of the same number and size laid out in their heaps instead (the floor of the "
        "earlier reports) cost the kernel less than the real reads, whose pieces lie on more "
        "pages and mappings; that floor and the own work above it are shown beside. The round "
        "with the median own work:",
        "",
        "| CPU per sample (µs) | wakeup (µs) | wakeup and the round's reads (µs) "
        "| reads per tick | floor per sample (µs) | own work (µs) "
        "| wakeup and reads of the same shape in the heap (µs) | own work above that (µs) |",
        "|---:|---:|---:|---|---:|---:|---:|---:|",
        f"| {mid['cpu_per_sample_us']:.1f} | {wake:.1f} | {replayed['cpu_per_tick_us']:.1f} "
        f"| {reads_per_tick:.2f} calls, {pieces_per_tick:.0f} pieces "
        f"({replayed['failed']} replayed calls failed in {replayed['ticks']} ticks) "
        f"| {shared_floor(mid):.1f} | {mid_own:.1f} "
        f"| {shaped:.1f} ({pieces} pieces, {size} bytes a target) "
        f"| {shared_own(mid, 'shape'):.1f} |",
        "",
        f"Of the own work, the kernel's reads of the run states cost {shared_states(mid):.1f} µs "
        f"a sample: the floor's replay with the `{mid['floor']['states']['file']}` file (the "
        f"one the samplers read run states from) of each of the targets' "
        f"{mid['floor']['states']['threads']} threads read per tick took "
        f"{mid['floor']['states']['cpu_per_tick_us']:.1f} µs a tick, against "
        f"{replayed['cpu_per_tick_us']:.1f} without (the samplers read "
        f"{mid['state_reads']:.2f} run states a sample). The rest, "
        f"{mid_own - shared_states(mid):.1f} µs, is the sampler's own code (walking, folding, "
        "counting, the liveness check) and what it costs the kernel's reads beyond their "
        "replay: the caches the code displaced between them, the torn samples read again.",
        "",
        f"Own work per round: {own_each} µs (above the heap-shaped floor: {shape_each} µs).",
        "",
        "The samplers also time each of their `process_vm_readv` calls (the `read_calls_mean` "
        "counter): the kernel's share of the very reads, as the machine was at that instant, "
        "with nothing replayed later. The CPU per sample less the floor's wakeup (1/"
        f"{targets} of it) and that time is the own work with the reads timed in place:",
        "",
        "| round | CPU per sample (µs) | wakeup per sample (µs) | reads timed in place (µs) "
        "| own work (µs) | of it, run states timed in place (µs) | the rest (µs) "
        "| own work by the replayed floor (µs) | own work per µs of the reads |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {i} | {r['cpu_per_sample_us']:.1f} "
            f"| {shared_floor(r, 'sleep'):.1f} "
            f"| {r['read_calls_us']:.1f} | {shared_own_in_place(r):.1f} "
            f"| {r['state_reads_us']:.1f} | {shared_own_in_place(r) - r['state_reads_us']:.1f} "
            f"| {shared_own(r):.1f} | {own_per_read(r):.2f} |"
            for i, r in enumerate(shared, 1)
        ),
        "",
        steadier(shared),
        "",
        own_verdict(shared),
    ]
    REPORT.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shared-rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = run(args.rounds, args.shared_rounds, args.seconds, Path(tmp))
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    write_report(data)
    print(REPORT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
