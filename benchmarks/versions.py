"""What a sample costs under each CPython version the walker reads, side by side in one run.

``targets/deep.py`` (~30 frames, 10 % on CPU) under 3.11-3.15 (interpreters of
tests/support/pythons.py); in interleaved rounds one ``Sampler`` at 100 Hz reads each for
``--seconds`` after a warm-up, with the default reader, the same without the GIL and GC reads
(``gil=False``), the same without the stall detector (``stall_ms=0``; on by default, it runs on
every sample in the sampler's thread) and py-spy's reader: the sampling thread's CPU per sample
(schedstat), its reads and /proc run states per sample; the median round counts, set against
3.11's walker. In the same rounds the default reader with and without those reads on
``targets/gil.py --holder spin`` (a loop waiting for the GIL a spinning thread holds; one a
round), and at 1 kHz on the 3.15 target sidecar, py-spy's reader and CPython's own sampler,
Tachyon (``profiling.sampling attach``).

Then four 3.11 targets on the shared clock (as ``serve`` samples), each round followed at once by
the machine's floor (``native/examples/floor.rs``) on the same targets: a thread that only wakes
at 100 Hz, the same replaying the round's own reads (``_native.record_reads``, their share each
tick), the same also reading each thread's run state as the samplers did, and the earlier
reports' floor, reads of the same shape laid out in the heap. sidecar's own work is the CPU per
sample above the replayed floor, and, with the reads timed in place (``read_calls_mean``), above
the wakeup and those reads; the round with the median own work stands for the run.

Last, the waits for a CPU: the default sampler reads each thread a sample finds runnable from its
``schedstat`` (``native/src/process/cpuwait.rs``), ``cpu_wait=False`` leaves that read out. In
rounds of their own, each under every version a sampler reads (3.8-3.10 through py-spy's reader,
3.11-3.15 the walker), a ``deep`` and a spinning ``gil`` target are started and read by two
samplers at the same time, crossed over: the seconds of a leg are cut in slices, and at each
slice the two swap their settings (``Sampler.set_cpu_wait``), so that each sampler has the read
half the time; a leg's CPU per sample is pooled over the slices that either sampler had it, each
sampler's CPU from its own thread's schedstat. Two samplers of one target at the same time
differ by far more than the read costs, and keep it for seconds: crossing over cancels that, as
running both at once cancels the machine's load moving. On the spinning target a control follows,
two samplers both without the read crossed over alike. Per leg: the CPU per sample, its read
system calls (its /proc io) and, from the walker, the reads' time timed in place; each round
also times the read alone, ``native/examples/schedstat.rs``. ``--cpu-wait`` runs that section
alone and writes it into the saved figures in place of the last run's, the other sections'
figures as they were.

    python -m benchmarks.versions [--rounds 5] [--shared-rounds 5] [--seconds 6] [--cpu-wait]

Writes benchmarks/REPORT-versions.md and REPORT-versions.json.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import floor
from benchmarks.common import main, measured, pythons, sampled, stamp, thread_seconds
from benchmarks.floor import example
from benchmarks.procs import finish, load_average
from benchmarks.report import judged, paired_cell
from benchmarks.table import HERE, Col, Report, cols, med, table
from sidecar import _native
from tests.support.procs import Child, Procs

VERSIONS = ("3.11", "3.12", "3.13", "3.14", "3.15")
#: The legs (``Sampler``'s keywords); the targets of every version (module, arguments) and the
#: legs on each; at 1 kHz on the 3.15 target: sidecar, Tachyon (None: a process) and py-spy's.
LEGS: dict[str, Any] = {"auto": {}, "gil off": {"gil": False}, "stalls off": {"stall_ms": 0},
                        "py-spy": {"reader": "py-spy"}}  # fmt: skip
# "auto" between the two legs it is set against, next to each in both orders of the rounds.
TARGETS = {"deep": (("deep", "--busy", "0.1"), ("gil off", "auto", "stalls off", "py-spy")),
           "gil": (("gil", "--holder", "spin"), ("auto", "gil off"))}  # fmt: skip
TOOLS = {"sidecar": LEGS["auto"], "Tachyon": None, "py-spy": LEGS["py-spy"]}
RATE, FAST, WARMUP = 100.0, 1000.0, 2.0
#: Each version's walker within this much of 3.11's CPU per sample; with the GIL and GC reads
#: within this much of the same without them; with the stall detector, of the same without it.
WITHIN, GIL_WITHIN, STALLS_WITHIN = 1.25, 1.1, 1.05
#: sidecar's own work per sample above the machine's floor on the shared clock, at most (µs).
OWN_WORK_US = 8.0
#: Targets on the shared clock, and how long their reads are recorded for the floor to replay.
SHARED_TARGETS, RECORD_SECONDS = 4, 1.0
#: The waits for a CPU: every version a sampler reads (py-spy's reader below 3.11), its legs
#: (``Sampler``'s keywords) and the CPU per sample with the read within this much of without it.
CPU_WAIT_VERSIONS = ("3.8", "3.9", "3.10", *VERSIONS)
CPU_WAIT_LEGS: dict[str, dict[str, Any]] = {"with the read": {}, "without": {"cpu_wait": False}}
#: The control: two samplers alike (both without the read) side by side on the spinning target,
#: as the legs are: what the design gives where there is nothing to find.
CPU_WAIT_CONTROL: dict[str, dict[str, Any]] = {"without": {"cpu_wait": False},
                                               "without, again": {"cpu_wait": False}}  # fmt: skip
CPU_WAIT_CONTROLLED = "gil"
#: The slices a round's legs are crossed over in (``side_by_side``): an even number.
CPU_WAIT_SLICES = 16
CPU_WAIT_WITHIN = 1.05


def ticks(stats: Any) -> int:
    """The ticks a sampler's per-tick means in ``stats()`` are over: samples and errors."""
    return int(stats["samples"] + stats["errors"])


def per_tick(before: Any, after: Any, key: str) -> float:
    """A per-tick mean of ``stats()`` over the ticks between two of its readings."""
    spent = float(after[key]) * ticks(after) - float(before[key]) * ticks(before)
    return spent / max(ticks(after) - ticks(before), 1)


def read_syscalls() -> int:
    """The read system calls (``syscr``) this process's sampling threads made so far."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().startswith("sidecar-sampl"):
                found = re.search(r"^syscr: (\d+)$", (task / "io").read_text(), re.M)
                total += int(found[1]) if found else 0
        except OSError:
            continue  # the thread ended meanwhile
    return total


def leg(pid: int, seconds: float, rate: float = RATE, **kw: Any) -> dict[str, Any]:
    """One sampler on ``pid`` for ``seconds`` after the warm-up: its CPU, reads and read system
    calls per sample."""
    with _native.Sampler(pid, rate_hz=rate, **kw) as sampler:
        time.sleep(WARMUP)
        calls = read_syscalls()
        cpu, ((a, b),) = sampled([sampler], 0.0, seconds)
        calls = read_syscalls() - calls
    made = max(ticks(b) - ticks(a), 1)
    return {"reader": b["reader"], "gil": b.get("gil"), "cpu_wait": b.get("cpu_wait"),
            "samples": made, "errors": b["errors"] - a["errors"],
            "cpu_per_sample_us": cpu / made * 1e6,
            "read_syscalls": calls / made,
            **{k: per_tick(a, b, k) for k in ("read_calls", "read_pieces", "read_bytes",
                                                "state_reads", "state_reads_mean",
                                                "stall_mean")}}  # fmt: skip


def tachyon(procs: Procs, python: str, pid: int, seconds: float) -> dict[str, Any]:
    """CPython's own sampler on ``pid`` at 1 kHz: its process's CPU (all its threads) over
    ``seconds`` after the warm-up, per sample. It runs a second past the window (``-d``) and
    prints the samples (errors among them) of its whole loop as it ends: the window's are
    their share of the loop's time. (Stopped with SIGINT instead, it once sampled on and never
    ended, printing nothing, in two runs of this benchmark out of four.)"""
    child = procs.start([python, "-m", "profiling.sampling", "attach", "-r", f"{FAST:g}", "-a",
                         "-d", f"{WARMUP + seconds + 1:g}", "--collapsed", "-o", "/dev/null",
                         str(pid)])  # fmt: skip
    time.sleep(WARMUP)
    cpu0, t0 = sum(thread_seconds(child.pid).values()), time.monotonic()
    time.sleep(seconds)
    cpu1, t1 = sum(thread_seconds(child.pid).values()), time.monotonic()
    try:
        code = child.popen.wait(30)
    except subprocess.TimeoutExpired:
        code = procs.stop(child, signal.SIGKILL)
    text = child.stdout()
    found = re.search(r"Captured (\d+) samples? in ([\d.]+) s.*Error rate: ([\d.]+)", text, re.S)
    if code != 0 or found is None or float(found[2]) < t1 - t0:  # or it began inside the window
        raise RuntimeError(f"Tachyon failed ({code}): {text[-300:]} {child.stderr()[-300:]}")
    made = int(found[1]) * (t1 - t0) / float(found[2])
    return {"reader": "Tachyon", "samples": made, "errors": made * float(found[3]) / 100,
            "cpu_per_sample_us": (cpu1 - cpu0) / made * 1e6}  # fmt: skip


def tachyon_twice(procs: Procs, python: str, pid: int, seconds: float) -> dict[str, Any]:
    """``tachyon``, once more if it fails."""
    try:
        return tachyon(procs, python, pid, seconds)
    except RuntimeError as err:
        print(f"{err}; once more", flush=True)
        return tachyon(procs, python, pid, seconds)


def shared_leg(pids: list[int], seconds: float, reads: Path) -> dict[str, Any]:
    """Samplers of ``pids`` on the shared clock for ``seconds`` after the warm-up: the CPU of
    the sampling threads per sample, and the first sampler's reads per sample. Then their reads
    of a second more are recorded into ``reads`` (one call per line: PID ADDRESS:LENGTH ...),
    with the clock's ticks meanwhile, for the floor to replay."""
    samplers = [_native.Sampler(pid, rate_hz=RATE, clock="shared") for pid in pids]
    try:
        cpu, stats = sampled(samplers, WARMUP, seconds)
        recorded = _native.record_reads(pids, RECORD_SECONDS)
        after = samplers[0].stats()
    finally:
        for sampler in samplers:
            sampler.stop()
    samples = max(sum(b["samples"] - a["samples"] for a, b in stats), 1)
    (first0, first1) = stats[0]
    reads.write_text("".join(f"{pid} {' '.join(f'{a}:{n}' for a, n in pieces)}\n"
                             for pid, pieces in recorded))  # fmt: skip

    def in_place(key: str) -> float:
        """The µs per sample every sampler spent in its reads of one kind (timed around each)."""
        spent = sum(per_tick(a, b, key) * (ticks(b) - ticks(a)) for a, b in stats)
        return float(spent / samples * 1e6)

    return {
        "clock": first1["clock"],
        "recorded": {"reads": len(recorded), "ticks": ticks(after) - ticks(first1)},
        "samples": samples, "errors": sum(b["errors"] - a["errors"] for a, b in stats),
        "cpu_per_sample_us": cpu / samples * 1e6,
        "read_calls_us": in_place("read_calls_mean"),
        "state_reads_us": in_place("state_reads_mean"),
        **{k: per_tick(first0, first1, k) for k in ("read_pieces", "read_bytes", "state_reads")},
        "state_file": first1["state_file"],
    }  # fmt: skip


def sampler_threads() -> set[int]:
    """The ids of this process's threads whose names begin with ``sidecar-sampl``: each sampler
    on its own clock ticks on a thread of its own so named."""
    tids = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().startswith("sidecar-sampl"):
                tids.add(int(task.name))
        except OSError:
            continue  # the thread ended meanwhile
    return tids


def thread_counts(tid: int) -> tuple[float, int]:
    """A thread of this process so far: its CPU seconds (the scheduler's nanoseconds on a CPU,
    schedstat) and its read system calls (``syscr`` of its /proc io)."""
    task = Path(f"/proc/self/task/{tid}")
    found = re.search(r"^syscr: (\d+)$", (task / "io").read_text(), re.M)
    return int((task / "schedstat").read_text().split()[0]) / 1e9, int(found[1]) if found else 0


def side_by_side(pid: int, seconds: float, legs: dict[str, dict[str, Any]]
                 ) -> tuple[dict[str, Any], float]:  # fmt: skip
    """Two samplers of ``pid`` at the same time, each on its own clock, started in the order of
    ``legs`` (two, ``Sampler``'s keywords, ``cpu_wait`` alone differing) and crossed over: over
    ``seconds`` after the warm-up, in ``CPU_WAIT_SLICES`` slices, the first sampler has the
    first leg's setting in even slices and the second's in odd ones, the other sampler the
    opposite (``Sampler.set_cpu_wait``). Each leg's CPU, reads and read system calls per sample
    are pooled over the slices that sampler or the other had it, from the samplers' own threads
    (each the one that appeared as it started): what one sampler instance costs more than the
    other, whatever it be, falls on both legs alike. Also that: the first sampler's CPU per
    sample over the second's, over all the slices."""
    names, samplers, tids = list(legs), [], []
    try:
        for kw in legs.values():
            before = sampler_threads()
            samplers.append(_native.Sampler(pid, rate_hz=RATE, **kw))
            new = sampler_threads() - before
            if len(new) != 1:
                raise RuntimeError(f"{len(new)} new sampling threads for one sampler: {new}")
            tids.append(new.pop())
        time.sleep(WARMUP)
        # each slice: for each sampler, the leg it had and its counts at the slice's two ends
        marks = [[(thread_counts(t), s.stats()) for t, s in zip(tids, samplers, strict=True)]]
        for i in range(CPU_WAIT_SLICES):
            had = [names[(j + i) % 2] for j in range(2)]
            for sampler, name in zip(samplers, had, strict=True):
                sampler.set_cpu_wait(legs[name].get("cpu_wait", True))
            time.sleep(seconds / CPU_WAIT_SLICES)
            marks.append(
                [(thread_counts(t), s.stats()) for t, s in zip(tids, samplers, strict=True)]
            )
    finally:
        for sampler in samplers:
            sampler.stop()
    pooled = {n: {"cpu": 0.0, "calls": 0, "ticks": 0, "errors": 0, "in_place": 0.0,
                  "state_reads": 0.0, "read_calls": 0.0, "stats": None} for n in names}  # fmt: skip
    for i in range(CPU_WAIT_SLICES):
        for j in range(2):
            ((cpu0, calls0), a), ((cpu1, calls1), b) = marks[i][j], marks[i + 1][j]
            leg_ = pooled[names[(j + i) % 2]]
            made = ticks(b) - ticks(a)
            leg_["cpu"] += cpu1 - cpu0
            leg_["calls"] += calls1 - calls0
            leg_["ticks"] += made
            leg_["errors"] += b["errors"] - a["errors"]
            for key, into in (("state_reads_mean", "in_place"), ("state_reads", "state_reads"),
                              ("read_calls", "read_calls")):  # fmt: skip
                leg_[into] += per_tick(a, b, key) * made
            leg_["stats"] = b
    out = {}
    for name, leg_ in pooled.items():
        made, b = max(leg_["ticks"], 1), leg_["stats"]
        out[name] = {
            "reader": b["reader"], "samples": made, "errors": leg_["errors"],
            "cpu_per_sample_us": leg_["cpu"] / made * 1e6, "read_syscalls": leg_["calls"] / made,
            "state_reads_mean": leg_["in_place"] / made, "state_reads": leg_["state_reads"] / made,
            "read_calls": leg_["read_calls"] / made,
        }  # fmt: skip
    # where the waits came from, as the sampler that ended with the read said
    ended = [names[(j + CPU_WAIT_SLICES - 1) % 2] for j in range(2)]
    for j, name in enumerate(ended):
        out[name]["cpu_wait"] = marks[-1][j][1].get("cpu_wait")
    per_sample = [
        (marks[-1][j][0][0] - marks[0][j][0][0])
        / max(ticks(marks[-1][j][1]) - ticks(marks[0][j][1]), 1)
        for j in range(2)
    ]
    return out, per_sample[0] / max(per_sample[1], 1e-12)


def read_costs(procs: Procs) -> dict[str, Any]:
    """``native/examples/schedstat.rs``: the kernel's read of a thread's ``schedstat`` alone,
    and of the calls beside it, in ns per call."""
    figures: dict[str, Any] = json.loads(finish(procs, [str(example("schedstat"))], 120,
                                                "schedstat"))  # fmt: skip
    return figures


def cpu_wait_rounds(procs: Procs, rounds: int, seconds: float) -> dict[str, Any]:
    """The waits for a CPU: in each round, each version's targets started afresh and read by
    two samplers at once, with the read and without it (``CPU_WAIT_LEGS``), the one named first
    started first in odd rounds, second in even ones; on the spinning target then by two
    samplers without it, the same way (``CPU_WAIT_CONTROL``); and the read alone timed
    (``read_costs``)."""
    interpreters, start = pythons(CPU_WAIT_VERSIONS), (load_average(), time.monotonic())
    legs: dict[str, Any] = {t: {v: {n: [] for n in CPU_WAIT_LEGS} for v in CPU_WAIT_VERSIONS}
                            for t in TARGETS}  # fmt: skip
    control: dict[str, Any] = {v: {n: [] for n in CPU_WAIT_CONTROL} for v in CPU_WAIT_VERSIONS}
    loads, costs, unrun = [], [], {}  # a target that exits before it is ready, under a version
    for round_ in range(rounds):
        loads.append(load_average())
        costs.append(read_costs(procs))
        turn = 1 - round_ % 2 * 2
        for version in CPU_WAIT_VERSIONS:
            for target, (argv, _) in TARGETS.items():
                if f"{target} {version}" in unrun:
                    continue
                try:
                    child = procs.target(*argv, python=interpreters[version])[0]
                except RuntimeError as err:  # it exited: it does not run under this version
                    unrun[f"{target} {version}"] = str(err).strip().splitlines()[-1]
                    print(f"{target} under {version}: {unrun[f'{target} {version}']}", flush=True)
                    continue
                pairs = [(legs[target][version], CPU_WAIT_LEGS)]
                pairs += [(control[version], CPU_WAIT_CONTROL)] * (target == CPU_WAIT_CONTROLLED)
                for into, pair in pairs:
                    r, apart = side_by_side(child.pid, seconds, dict(list(pair.items())[::turn]))
                    for name in pair:
                        into[name].append({**r[name], "instances": apart})
                    print(f"round {round_ + 1} {version} {target}: " + ", ".join(
                        f"{n} {f['cpu_per_sample_us']:.1f} µs per sample, "
                        f"{f['read_syscalls']:.2f} reads" for n, f in r.items())
                        + f"; the two samplers apart {apart:.3f}x", flush=True)  # fmt: skip
                procs.stop(child)
    return {**stamp(), "load_average_start": start[0], "round_loads": loads,
            "minutes": (time.monotonic() - start[1]) / 60, "rounds": rounds, "seconds": seconds,
            "design": "side by side, crossed over", "slices": CPU_WAIT_SLICES,
            "read_costs": costs,
            "legs": {t: {v: r for v, r in legs[t].items() if f"{t} {v}" not in unrun}
                     for t in legs},
            "control": {v: r for v, r in control.items()
                        if f"{CPU_WAIT_CONTROLLED} {v}" not in unrun}, "unrun": unrun}  # fmt: skip


def cpu_wait_only(rounds: int, seconds: float, workdir: Path, out: Path | None) -> dict[str, Any]:
    """The saved figures (``out`` or this folder's) with the waits for a CPU measured anew."""
    saved = (out or HERE) / "REPORT-versions.json"
    if not saved.is_file():
        raise SystemExit(f"no {saved} to add to: run the whole benchmark first")
    figures = json.loads(saved.read_text())
    with Procs(workdir) as procs:
        return {**figures, "cpu_wait": cpu_wait_rounds(procs, rounds, seconds)}


def run(rounds: int, shared_rounds: int, seconds: float, workdir: Path) -> dict[str, Any]:
    interpreters = pythons(VERSIONS)
    legs: dict[str, Any] = {t: {v: {n: [] for n in names} for v in VERSIONS}
                            for t, (_, names) in TARGETS.items()}  # fmt: skip
    fast: dict[str, list[dict[str, Any]]] = {tool: [] for tool in TOOLS}
    with Procs(workdir) as procs:

        def start(version: str, target: str = "deep") -> Child:
            return procs.target(*TARGETS[target][0], python=interpreters[version])[0]

        def show(r: dict[str, Any], *what: str) -> None:
            print(f"round {round_ + 1} {' '.join(what)}: {r['cpu_per_sample_us']:.1f} µs per "
                  f"sample ({r['reader']}; GIL states {r.get('gil')})", flush=True)  # fmt: skip

        targets = {v: start(v).pid for v in VERSIONS}
        for round_ in range(rounds):
            turn = 1 - round_ % 2 * 2  # every other round runs its legs in the other order
            for version in VERSIONS:
                for target in TARGETS:  # the spinning target only for its own legs
                    pid = ((spin := start(version, target)).pid if target == "gil" else
                           targets[version])  # fmt: skip
                    for name in TARGETS[target][1][::turn]:
                        legs[target][version][name].append(r := leg(pid, seconds, **LEGS[name]))
                        show(r, version, target, name)
                procs.stop(spin)
            for tool, kw in list(TOOLS.items())[::turn]:
                on = targets["3.15"]
                r = (leg(on, seconds, FAST, **kw) if kw is not None else
                     tachyon_twice(procs, interpreters["3.15"], on, seconds))  # fmt: skip
                fast[tool].append(r)
                show(r, "3.15 at 1 kHz", tool)
        pids = [targets["3.11"]] + [start("3.11").pid for _ in range(SHARED_TARGETS - 1)]
        # Each shared round is followed at once by the floor with the shape that round read,
        # so that both see the machine as it is then (CPU per sample moves by a quarter
        # between runs on a shared host, more than the own work measured).
        shared = []
        for round_ in range(shared_rounds):
            reads = workdir / f"reads-{round_ + 1}.txt"
            r = shared_leg(pids, seconds, reads)
            r["shape"] = (max(1, round(r["read_pieces"])), max(1, round(r["read_bytes"])))
            r["floor"] = floor.native_floor(
                procs, pids[0], rate=RATE, seconds=3.0, rt=None, shape=r["shape"],
                also=tuple(pids[1:]), replay=(reads, r["recorded"]["ticks"]),
                state_file=r["state_file"],
            )  # fmt: skip
            shared.append(r)
            print(f"round {round_ + 1} shared clock: {r['cpu_per_sample_us']:.1f} µs per sample, "
                  f"own work {shared_own(r):.1f} µs ({shared_own_in_place(r):.1f} with the reads "
                  "timed in place)", flush=True)  # fmt: skip
        cpu_wait = cpu_wait_rounds(procs, rounds, seconds)
    return {**stamp(), "rounds": rounds, "seconds": seconds, "legs": legs, "fast": fast,
            "shared": shared, "cpu_wait": cpu_wait}  # fmt: skip


def shared_floor(result: dict[str, Any], leg: str = "replay") -> float:
    """A sample's floor on the shared clock, from the floor measured after its round: a tick's
    wakeup and the round's reads replayed (``replay``), reads of its shape (``shape``), the
    wakeup alone (``sleep``) or the replay with the run states read (``states``), per target."""
    return float(result["floor"][leg]["cpu_per_tick_us"]) / int(result["floor"]["shape"]["targets"])


def shared_own(result: dict[str, Any], leg: str = "replay") -> float:
    """sidecar's own work per sample on the shared clock in one round: above its floor."""
    return float(result["cpu_per_sample_us"]) - shared_floor(result, leg)


def shared_own_in_place(result: dict[str, Any]) -> float:
    """The own work with the reads timed in place: less the wakeup and the samplers' reads."""
    return shared_own(result, "sleep") - float(result["read_calls_us"])


def own_per_read(result: dict[str, Any]) -> float:
    """The own work in place per µs of those reads: both move with the machine's speed at the
    instant, so their ratio compares rounds and runs where either alone moves."""
    return shared_own_in_place(result) / max(float(result["read_calls_us"]), 1e-9)


def own_verdict(shared: list[dict[str, Any]]) -> tuple[str, str]:
    """The run's word on the own work: each measure's median round against the goal, and where
    the rounds lie, so that one round on a machine whose speed moves does not decide it; then
    the ratio of own work to reads."""
    owns = {"by the replayed floor": [shared_own(r) for r in shared],
            "with the reads timed in place": [shared_own_in_place(r) for r in shared]}  # fmt: skip
    medians, ratios = [med(o) for o in owns.values()], [own_per_read(r) for r in shared]
    figures = " and ".join(f"{med(o):.1f} µs a sample {how} ({sum(x <= OWN_WORK_US for x in o)} "
                           f"of {len(o)} rounds under {OWN_WORK_US:g} µs, from {min(o):.1f} to "
                           f"{max(o):.1f})" for how, o in owns.items())  # fmt: skip
    goal, place = f"the {OWN_WORK_US:g} µs it should stay under", owns[list(owns)[1]]
    return (
        f"Set against the reads timed at the same instants, the own work was {med(ratios):.2f} µs "
        f"per µs of them (median round; from {min(ratios):.2f} to {max(ratios):.2f}, "
        f"{max(ratios) / min(ratios):.2f}x, where the own work itself went from {min(place):.1f} "
        f"to {max(place):.1f} µs, {max(place) / min(place):.2f}x): the figure to compare builds "
        "and runs by on a machine whose speed moves, not a measure of the goal, which is in µs.",
        f"Own work on the shared clock, {figures}"
        + (f", is within {goal} by both measures." if max(medians) <= OWN_WORK_US else
           f", is above {goal} by both measures." if min(medians) > OWN_WORK_US else
           f": the two measures fall on either side of {goal}, so this run does not tell."),
    )  # fmt: skip


def cpus(runs: list[dict[str, Any]], base: list[dict[str, Any]] | None = None) -> list[float]:
    """Each round's CPU per sample of ``runs``; over that of ``base`` in the same round."""
    return [r["cpu_per_sample_us"] / (base[i]["cpu_per_sample_us"] if base else 1)
            for i, r in enumerate(runs)]  # fmt: skip


def verdicts(what: str, ratios: dict[str, list[float]], goal: float) -> list[str]:
    """Points: the names of ``ratios`` by their verdict against ``goal`` (report's ``judged``),
    with their median round (least to most); then those whose rounds lie on both sides of the
    goal (spread wider than the median's distance to it): this run does not place them."""
    said: dict[str, list[str]] = {}
    for name, r in ratios.items():
        said.setdefault(judged(r, goal, at_least=False), []).append(f"{name} {paired_cell(r)}")
    wide = ", ".join(n for n, r in ratios.items() if min(r) <= goal < max(r))
    return [f"{what} within {goal:g}x, per round:", "", *(f"- {v}: {', '.join(n)}" for v, n in
            said.items()), *[f"- the rounds of {wide} lie on both sides of the goal, wider than"
            " the median's distance to it: this run does not place them"] * bool(wide)]  # fmt: skip


def detector_work(legs: dict[str, Any]) -> list[str | list[str]]:
    """The stall detector's own work per sample on ``deep``, timed in place: its median round,
    and the CPU per sample with it over the same less that work, judged like the legs."""
    parts, ratios = [], {}
    for v in VERSIONS:
        on = legs["deep"][v]["auto"]
        us = med(r["stall_mean"] * 1e6 for r in on)
        share = med(r["stall_mean"] * 1e6 / r["cpu_per_sample_us"] for r in on)
        parts.append(f"{v} {us:.2f} µs ({share:.2%} of its sample's CPU)")
        ratios[v] = [r["cpu_per_sample_us"] / (r["cpu_per_sample_us"] - r["stall_mean"] * 1e6)
                     for r in on]  # fmt: skip
    return [
        "Timed in place (around each of its calls, `stall_mean`), the detector's own work per "
        f"sample, median round: {', '.join(parts)}. Two legs' ratio cannot resolve a difference "
        "much smaller than its spread between rounds; the work timed in place can.",
        verdicts("The CPU per sample with the detector against the same less its own work "
                 "timed in place", ratios, STALLS_WITHIN)]  # fmt: skip


def cpu_wait_section(c: dict[str, Any]) -> list[str | list[str]]:
    """The waits for a CPU: per target and version both legs' CPU per sample, the ratio in each
    round, its median and spread, what the read adds; the control's; each round's spread; the
    read alone; the verdicts."""
    legs, n, order = c["legs"], c["rounds"], list(CPU_WAIT_LEGS)
    control, twins = c["control"], list(CPU_WAIT_CONTROL)

    def added(runs: dict[str, list[dict[str, Any]]], key: str, scale: float = 1.0) -> float:
        """The median round's difference of ``key`` between the two legs."""
        return med((a[key] - b[key]) * scale for a, b in zip(*runs.values(), strict=True))

    ratios = {(t, v): cpus(runs[order[0]], runs[order[1]])
              for t in legs for v, runs in legs[t].items()}  # fmt: skip
    rows = [{"target": t, "version": v, "reader": runs[order[0]][-1]["reader"].split(" (")[0],
             "source": runs[order[0]][-1]["cpu_wait"], "ratios": ratios[t, v],
             "on": med(cpus(runs[order[0]])), "off": med(cpus(runs[order[1]])),
             "cpu": added(runs, "cpu_per_sample_us"), "reads": added(runs, "read_syscalls"),
             "in_place": added(runs, "state_reads_mean", 1e6) if v in VERSIONS else None,
             "errors": sum(r["errors"] for leg in runs.values() for r in leg)}
            for t in legs for v, runs in legs[t].items()]  # fmt: skip
    columns = [
        Col("target", left=True), Col("version", left=True), Col("reader", left=True),
        Col("waits from", "source", left=True),
        Col("with the read (µs)", "on", "{:.1f}"), Col("without (µs)", "off", "{:.1f}"),
        Col("ratio per round", "ratios", lambda v: ", ".join(f"{x:.3f}" for x in v)),
        Col("median", "ratios", lambda v: f"{med(v):.3f}x"),
        Col("spread", "ratios", lambda v: f"{min(v):.3f}-{max(v):.3f}"),
        Col("added CPU (µs)", "cpu", "{:+.2f}"), Col("added reads per sample", "reads", "{:+.2f}"),
        Col("added in place (µs)", "in_place", "{:+.2f}"), Col("errors"),
    ]  # fmt: skip
    same = {v: cpus(runs[twins[0]], runs[twins[1]]) for v, runs in control.items()}
    control_rows = [{"version": v, "ratios": same[v],
                     "cpu": med(cpus(control[v][twins[0]])), "gap": added(control[v],
                     "cpu_per_sample_us"), "apart": [r["instances"] for r in
                     control[v][twins[0]]]} for v in same]  # fmt: skip
    control_columns = [
        Col("version", left=True), Col("CPU per sample (µs)", "cpu", "{:.1f}"),
        Col("ratio per round", "ratios", lambda v: ", ".join(f"{x:.3f}" for x in v)),
        Col("median", "ratios", lambda v: f"{med(v):.3f}x"),
        Col("spread", "ratios", lambda v: f"{min(v):.3f}-{max(v):.3f}"),
        Col("difference (µs)", "gap", "{:+.2f}"),
        Col("two samplers apart, per round", "apart", lambda v: ", ".join(f"{x:.2f}"
            for x in v)),
    ]  # fmt: skip
    per_round = [[r[i] for r in ratios.values()] for i in range(n)]
    round_columns = [
        Col("round", lambda x: x[0] + 1),
        Col("started first", lambda x: order[x[0] % 2], left=True),
        Col("load average at its start", lambda x: c["round_loads"][x[0]], "{:.2f}"),
        Col("median ratio", lambda x: med(x[1]), "{:.3f}x"),
        Col("spread", lambda x: f"{min(x[1]):.3f}-{max(x[1]):.3f}"),
        Col(f"above {CPU_WAIT_WITHIN:g}x", lambda x: sum(r > CPU_WAIT_WITHIN for r in x[1])),
        Col("control's median ratio", lambda x: med(r[x[0]] for r in same.values()), "{:.3f}x"),
    ]  # fmt: skip
    costs = c["read_costs"]
    cost_names = {
        "schedstat_spinning": "`schedstat` of a spinning thread",
        "schedstat_sleeping": "`schedstat` of a sleeping thread",
        "stat_spinning": "`stat` (96 bytes) of the spinning thread",
        "syscall_spinning": "`syscall` (40 bytes) of the spinning thread",
        "getppid": "`getppid`, a system call that does nothing",
        "instant_now": "`Instant::now()`",
        "open_missing": "the path of a thread gone, formatted and opened (it fails)",
    }
    cost_rows = [{"what": what, "ns": [r[k]["median_ns"] for r in costs],
                  "least": min(r[k]["least_ns"] for r in costs)}
                 for k, what in cost_names.items()]  # fmt: skip
    cost_columns = [
        Col("call", "what", left=True),
        Col("ns per call, median turn of each round", "ns", lambda v: ", ".join(f"{x:.0f}"
            for x in v)),
        Col("median", "ns", lambda v: f"{med(v):.0f}"), Col("least turn", "least", "{:.0f}"),
    ]  # fmt: skip
    pread_us = med(r["schedstat_spinning"]["median_ns"] for r in costs) / 1000
    clock_ns = med(r["instant_now"]["median_ns"] for r in costs)
    # the walker on the spinning target: one read more a sample, timed in place
    walked = [r for r in rows if r["target"] == CPU_WAIT_CONTROLLED and r["in_place"] is not None]
    in_place = [r["in_place"] for r in walked]
    gaps = [r["gap"] for r in control_rows]
    cheapest = min(walked, key=lambda r: r["off"])
    share = cheapest["in_place"] / cheapest["off"]
    named = {f"{v} on {t}": r for (t, v), r in ratios.items()}
    noise = max(max(abs(x - 1) for x in r) for r in same.values()) if same else None
    return [
        "## The waits for a CPU",
        f"{measured(c)} at the end, {c['load_average_start']:.2f} at the start (on 2 cores other "
        f"work shared; {c['minutes']:.0f} minutes); {n} rounds of {c['seconds']:g} s at {RATE:g} "
        "Hz after a warm-up: the default sampler, which reads the `schedstat` of each thread a "
        "sample finds runnable, against the same with `cpu_wait=False`, on `deep` and on the "
        "spinning `gil` target (runnable at every sample: the read's worst case), both started "
        "afresh each round under every version (3.8-3.10 read through py-spy's reader, 3.11-3.15 "
        "by the walker). **The two legs run side by side, crossed over**: two samplers of the "
        "same target process at the same time, each on its own clock (a thread of its own, its "
        "ticks on a grid from its own start), started one after the other (which leg's sampler "
        f"starts first turns every round); the {c['seconds']:g} s are cut in "
        f"{c['slices']} slices, and at each slice the two samplers swap their settings "
        "(`Sampler.set_cpu_wait`), so that each has the read for half the slices and not for "
        "the other half. A leg's CPU per sample is pooled over the slices either sampler had "
        "it, each sampler's CPU its own thread's (the scheduler's nanoseconds on a CPU, "
        "`/proc/self/task/TID/schedstat`). Whatever the machine's load or speed does meanwhile "
        "falls on both legs alike, and so does what one sampler costs more than the other "
        "(below: the two identical samplers of the control differ by far more than the read). "
        "The ratio is of the two legs of a round; what the read adds is the median round's "
        "difference of the two: the sampling thread's CPU, its read system calls (its /proc io, "
        "`syscr`) and, from the walker, the run-state reads timed in place (`state_reads_mean`, "
        "which counts the `schedstat` reads with them).",
        table(rows, columns),
        verdicts("The CPU per sample with the read against without it", named, CPU_WAIT_WITHIN),
        "**The control.** On the spinning target, right after its legs, two samplers alike (both "
        "without the read) side by side and crossed over the same way: their ratio is what the "
        "design reads where there is nothing to find. *Two samplers apart* is the first "
        "started sampler's CPU per sample over the second's, over all the slices, without the "
        "crossing over: two identical samplers of one target at the same time, on their own "
        "clocks, differ that much and keep it for seconds (all of a sample's parts alike: the "
        "memory reads, the run states, the folding), which is why the legs are crossed over "
        "rather than given a sampler each.",
        table(control_rows, control_columns),
        (
            f"The control's rounds lie within {noise:.1%} of 1 at most: a difference between the "
            "legs smaller than that is not resolved by a round, only by the median of several. "
            if noise is not None
            else ""
        ),
        "Each round's spread, over the targets and versions:",
        table(enumerate(per_round), round_columns),
        "**Where the read's CPU goes.** Timed in place (the wall time around each read, a "
        "preemption inside it counted too), the read adds "
        f"{med(in_place):.2f} µs a sample on the spinning target under the walker (median of "
        f"the versions, from {min(in_place):.2f} to {max(in_place):.2f}), for "
        f"{med(r['reads'] for r in walked):.2f} read system calls more; the CPU per sample adds "
        f"{med(r['cpu'] for r in walked):.2f} µs (from {min(r['cpu'] for r in walked):.2f} to "
        f"{max(r['cpu'] for r in walked):.2f}), where the control's two alike legs differ by "
        f"{min(gaps):+.2f} to {max(gaps):+.2f} µs: within that, the read costs what its timing "
        "in place says, and nothing beyond it. Alone, in a loop, the same read costs "
        f"{pread_us:.2f} µs (below), {med(in_place) / pread_us:.1f}x less than in a sample: "
        "there the kernel's path through procfs and the target thread's data are likely out of "
        "the caches, the sampler having slept 10 ms since it last read them. On the target "
        f"where a sample costs least ({cheapest['version']} on `{cheapest['target']}`, "
        f"{cheapest['off']:.1f} µs a sample without the read) the read timed in place is "
        f"{share:.1%} of a sample"
        + (
            f", above the {CPU_WAIT_WITHIN - 1:.0%} the goal allows: the kernel's read itself "
            "does not fit the goal there."
            if share > CPU_WAIT_WITHIN - 1
            else f", within the {CPU_WAIT_WITHIN - 1:.0%} the goal allows."
        )
        + " Around it the sampler reads the clock three times (the sample's instant, and the "
        f"read timed in place: {3 * clock_ns:.0f} ns by the `Instant::now()` row below), looks "
        "the thread up in a hash map, parses three numbers and steps its ledger; it opens a "
        "thread's file once (an open that fails costs the row below, but `waits` is only asked "
        "of a thread whose run state was just read from its own /proc file, so it fails only "
        "as the thread exits), and forgets the ledgers of threads gone only when there are more "
        "ledgers than threads.",
        "**The read alone**, `native/examples/schedstat.rs` once at the start of each round: "
        "batches of calls from a file kept open, timed in the thread's own CPU time, in turns "
        "(the module's docstring says how):",
        table(cost_rows, cost_columns),
        "Not measured, as the target exits before it is ready: "
        + "; ".join(f"`{k.split()[0]}` under {k.split()[1]} ({why})" for k, why in unrun.items())
        + "."
        if (unrun := c.get("unrun"))
        else "",
    ]


def write_report(data: dict[str, Any], report: Report) -> None:
    legs, fast, seconds = data["legs"], data["fast"], data["seconds"]
    rows = [
        {"target": t, "version": v, "leg": name, **{k: med(r[k] for r in runs) for k in runs[0]
         if k not in ("reader", "gil")}, "reader": runs[-1]["reader"], "gil": runs[-1]["gil"],
         "runs": cpus(runs), "errors": sum(r["errors"] for r in runs),
         "base": cpus(runs, legs[t]["3.11"]["auto"])}
        for t in TARGETS for v in VERSIONS for name, runs in legs[t][v].items()
    ]  # fmt: skip
    report.add(
        "# What a sample costs under each CPython version",
        f"{measured(data)}; {data['rounds']} interleaved rounds of {seconds:g} s per leg at "
        f"{RATE:g} Hz on `targets/deep.py` (about 30 frames, 10 % on CPU, one thread) and on "
        "`targets/gil.py --holder spin` (an asyncio loop waiting for the GIL that a thread "
        "spinning in pure Python holds, up for its own legs only). CPU is the sampling thread's, "
        "per sample; the median round counts; a ratio is of two legs in the same round.",
    )
    report.table(rows, [
        Col("target", left=True), Col("version", left=True), Col("leg", left=True),
        Col("reader", left=True), Col("GIL states", "gil", left=True),
        Col("CPU per sample (µs)", "cpu_per_sample_us", "{:.1f}"),
        Col("rounds, least to most (µs)", "runs", lambda v: f"{min(v):.1f}-{max(v):.1f}"),
        Col("against 3.11's default", "base", lambda v: paired_cell(v, "{:.2f}x")),
        Col("reads per sample", "read_calls", "{:.2f}"), Col("pieces", "read_pieces", "{:.1f}"),
        Col("bytes", "read_bytes", "{:.0f}"), Col("/proc run states", "state_reads", "{:.2f}"),
        Col("errors"),
    ])  # fmt: skip
    report.add(verdicts("Each version's default reader on `deep` against 3.11's walker", {
        r["version"]: r["base"] for r in rows if r["target"] == "deep" and r["leg"] == "auto"},
        WITHIN), "## The GIL and GC reads", verdicts("The default reader with the GIL and GC "
        "reads against the same without them (`gil=False`, the rows above)", {f"{v} on {t}":
        cpus(legs[t][v]["auto"], legs[t][v]["gil off"]) for t in TARGETS for v in VERSIONS},
        GIL_WITHIN), "## The stall detector", verdicts("The default reader on `deep`, whose "
        "every sample is in a callback of its loop, with the stall detector against the same "
        "without it (`stall_ms=0`, the rows above)", {v: cpus(legs["deep"][v]["auto"],
        legs["deep"][v]["stalls off"]) for v in VERSIONS}, STALLS_WITHIN),
        *detector_work(legs))  # fmt: skip
    if "cpu_wait" in data:
        report.add(*cpu_wait_section(data["cpu_wait"]))
    report.add(
        f"## CPU per sample at {FAST:g} Hz on the 3.15 target",
        "In the same rounds, on the same `deep` target. For sidecar and py-spy's reader (in "
        "sidecar's sampler) CPU is the sampling thread's over its ticks; for Tachyon, `python3.15 "
        "-m profiling.sampling attach -a --collapsed`, that of all its process's threads over "
        "the samples it says it took (errors among them): run for a second past the "
        f"{seconds:g} s window (`-d`), it prints those of its whole loop as it ends, and the "
        "window's are their share of its time.",
    )
    report.table([
        ("CPU per sample (µs), median round (least to most)",
         *(paired_cell(cpus(fast[t]), "{:.1f}") for t in TOOLS)),
        ("against sidecar's, per round",
         *(paired_cell(cpus(fast[t], fast["sidecar"]), "{:.2f}x") for t in TOOLS)),
        (f"samples each round of {seconds * FAST:.0f} due (errors)", *(", ".join(
            f"{r['samples']:.0f} ({r['errors']:.0f})" for r in fast[t]) for t in TOOLS)),
    ], cols("<", *TOOLS))  # fmt: skip
    least = [min(TOOLS, key=lambda t: fast[t][i]["cpu_per_sample_us"])
             for i in range(data["rounds"])]  # fmt: skip
    report.add(f"sidecar took the least CPU per sample of the three in {least.count('sidecar')} "
               f"of {len(least)} rounds.")  # fmt: skip
    shared = data["shared"]
    mid = sorted(shared, key=shared_own)[len(shared) // 2]  # the round of the median own work
    fl, n = mid["floor"], SHARED_TARGETS
    replayed, ticks = fl["replay"], max(fl["replay"]["recorded_ticks"], 1)
    report.add(
        "## Above the machine's floor",
        f"{n} targets of 3.11 on the shared clock, each round followed at once by the machine's "
        f"floor on them (the module's docstring says how); a sample's floor is 1/{n} of a tick's. "
        "The round with the median own work:",
    )
    report.table([mid], [
        Col("CPU per sample (µs)", "cpu_per_sample_us", "{:.1f}"),
        Col("wakeup (µs)", lambda r: fl["sleep"]["cpu_per_tick_us"], "{:.1f}"),
        Col("wakeup and the round's reads (µs)", lambda r: replayed["cpu_per_tick_us"], "{:.1f}"),
        Col("reads per tick", lambda r: f"{replayed['reads'] / ticks:.2f} calls, "
            f"{replayed['pieces'] / ticks:.0f} pieces ({replayed['failed']} replayed calls "
            f"failed in {replayed['ticks']} ticks)", left=True),
        Col("floor per sample (µs)", shared_floor, "{:.1f}"),
        Col("own work (µs)", shared_own, "{:.1f}"),
        Col("wakeup and reads of the same shape in the heap (µs)", lambda r: "{:.1f} ({} pieces, "
            "{} bytes a target)".format(fl["shape"]["cpu_per_tick_us"], *r["shape"])),
        Col("own work above that (µs)", lambda r: shared_own(r, "shape"), "{:.1f}"),
    ])  # fmt: skip
    states, states_us = fl["states"], shared_floor(mid, "states") - shared_floor(mid)
    report.add(
        f"Of the own work, the kernel's reads of the run states cost {states_us:.1f} µs "
        f"a sample: the floor's replay with the `{states['file']}` file of each of the targets' "
        f"{states['threads']} threads read per tick took {states['cpu_per_tick_us']:.1f} µs a "
        f"tick, against {replayed['cpu_per_tick_us']:.1f} without (the samplers read "
        f"{mid['state_reads']:.2f} run states a sample). The rest, "
        f"{shared_own(mid) - states_us:.1f} µs, is the sampler's own code and what it "
        "costs the kernel's reads beyond their replay (displaced caches, torn samples read "
        "again).",
        "Per round, with the kernel's share of the very reads timed in place by the samplers "
        f"(`read_calls_mean`): the CPU per sample less the wakeup (1/{n} of the floor's) and "
        "those reads is the own work in place:",
    )
    report.table(enumerate(shared, 1), [
        Col("round", lambda x: x[0]),
        Col("CPU per sample (µs)", lambda x: x[1]["cpu_per_sample_us"], "{:.1f}"),
        Col("wakeup per sample (µs)", lambda x: shared_floor(x[1], "sleep"), "{:.1f}"),
        Col("reads timed in place (µs)", lambda x: x[1]["read_calls_us"], "{:.1f}"),
        Col("own work (µs)", lambda x: shared_own_in_place(x[1]), "{:.1f}"),
        Col("of it, run states timed in place (µs)", lambda x: x[1]["state_reads_us"], "{:.1f}"),
        Col("the rest (µs)", lambda x: shared_own_in_place(x[1]) - x[1]["state_reads_us"],
            "{:.1f}"),
        Col("own work by the replayed floor (µs)", lambda x: shared_own(x[1]), "{:.1f}"),
        Col("by the heap-shaped floor (µs)", lambda x: shared_own(x[1], "shape"), "{:.1f}"),
        Col("own work per µs of the reads", lambda x: own_per_read(x[1]), "{:.2f}"),
    ])  # fmt: skip
    report.add(*own_verdict(shared))


def measure(args: Any, workdir: Path) -> dict[str, Any]:
    if args.cpu_wait:
        return cpu_wait_only(args.rounds, args.seconds, workdir, args.out)
    return run(args.rounds, args.shared_rounds, args.seconds, workdir)


if __name__ == "__main__":
    sys.exit(
        main(__doc__, "REPORT-versions", measure, write_report,
             {"--rounds": 5, "--shared-rounds": 5, "--seconds": 6.0,
              "--cpu-wait": (False, "measure the waits for a CPU alone, into the saved figures")})
    )  # fmt: skip
