"""Every CPython version sidecar reads (3.8 to 3.15), each a real interpreter running real
targets, sampled by the native Sampler: which reader it picks, the stacks it reads (against
py-spy's, side by side), thread names, and the event loop's busy / idle / blocked states.

The interpreters come from tests/support/pythons.py; the targets use the standard library only.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import pytest

from sidecar import _native
from sidecar.classify.window import window_of
from sidecar.rules.frames import BLOCKED_LEAF, code_frames
from sidecar.sample.record import Tally
from targets.stdlib_server import WORKER_NAMES
from tests.support.helpers import Proc, Spawner, frequent, memory_reads, stack_counts
from tests.support.pythons import WALKED, each_version, interpreter

#: Seconds each case samples (at RATE_HZ) or drives load: enough for shares, short in all.
SECONDS = 2.0
RATE_HZ = 100


def _version_tuple(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _reader_of(version: str) -> str:
    """The reader sampling ``version`` ("3.11" or "3.11.7") should pick."""
    return "walker" if _version_tuple(version) >= (3, 11) else "py-spy"


@each_version
def test_the_reader_suits_the_version(spawn: Spawner, version: str) -> None:
    """From 3.11 on the own walker reads the stacks; before, py-spy does."""
    python = interpreter(version)
    target = spawn.target("spin", "--sleep", python=python)
    with _native.Sampler(target.pid, rate_hz=RATE_HZ) as sampler:
        time.sleep(0.5)
        stats = sampler.stats()
        assert sampler.python_version.startswith(f"{version}."), sampler.python_version
    assert stats["reader"].startswith(f"{_reader_of(version)} (Python {version}."), stats["reader"]
    assert stats["errors"] == 0, stats["last_error"]


def _side_by_side(pid: int) -> tuple[list[_native.Window], list[_native.Window]]:
    """Windows of the default reader (the one the version should have: its check at attach
    passed) and of py-spy (which reads every version here) sampling the same target at the
    same time."""
    with (
        _native.Sampler(pid, rate_hz=50) as sampler,
        _native.Sampler(pid, rate_hz=50, reader="py-spy") as pyspy,
    ):
        time.sleep(SECONDS)
        ours = sampler.drain(flush=True)
        theirs = pyspy.drain(flush=True)
        stats = sampler.stats()
        version = sampler.python_version
    assert stats["reader"].startswith(_reader_of(version)), stats["reader"]
    assert stats["errors"] == 0, stats["last_error"]
    return ours, theirs


def _same_stacks(ours: Counter[tuple[str, str]], theirs: Counter[tuple[str, str]]) -> None:
    """The stacks that hold time agree frame for frame (names, files, lines, threads)."""
    assert frequent(ours) == frequent(theirs), frequent(ours) ^ frequent(theirs)
    shared = set(ours) & set(theirs)
    assert sum(ours[k] for k in shared) >= 0.95 * sum(ours.values())


@each_version
def test_deep_stacks_with_non_ascii_names(spawn: Spawner, version: str) -> None:
    """300 frames of recursion through functions named in Latin-1 and CJK, read whole."""
    python = interpreter(version)
    target = spawn.target("spin", "--depth", "300", "--unicode", "--sleep", python=python)
    windows, pyspy = _side_by_side(target.pid)
    ours = stack_counts(windows)
    assert ours, "no stacks"
    _same_stacks(ours, stack_counts(pyspy))
    depth = max(stack.count(";") + 1 for _name, stack in ours)
    assert depth > 300
    assert any("rückwärts_tiefer (targets/spin.py:" in stack for _name, stack in ours)
    assert any("更に深く (targets/spin.py:" in stack for _name, stack in ours)


@each_version
def test_named_threads(spawn: Spawner, version: str) -> None:
    """An idle asyncio server and its worker threads (named ``worker-Ω``, ``worker-東京``): the
    same stacks as py-spy's, each under its thread's name."""
    python = interpreter(version)
    target = spawn.target("stdlib_server", python=python)
    windows, pyspy = _side_by_side(target.pid)
    ours = stack_counts(windows)
    _same_stacks(ours, stack_counts(pyspy))
    names = {name for name, _stack in ours}
    assert {"MainThread", *WORKER_NAMES} <= names, names
    parked = [stack for name, stack in ours if name in WORKER_NAMES]
    assert parked and all("park (targets/stdlib_server.py:" in stack for stack in parked)


@each_version
def test_a_thread_whose_first_frame_is_a_generator(spawn: Spawner, version: str) -> None:
    """A thread started on a generator's ``send`` has no frame below the generator's, which
    links to no caller and lies in its object, not at the start of the thread's data stack:
    the walk that ends there is checked, and stands (the generator is executing), as py-spy
    reads it."""
    python = interpreter(version)
    target = spawn.target("spin", "--sleep", "--generator-thread", python=python)
    windows, pyspy = _side_by_side(target.pid)
    ours = stack_counts(windows)
    _same_stacks(ours, stack_counts(pyspy))
    root = "generator_root (targets/spin.py:"
    rooted = [stack for _name, stack in ours if stack.startswith(root)]
    assert rooted and all(";nap (targets/spin.py:" in stack for stack in rooted), ours


def _drive(target: Proc, paths: tuple[str, ...], seconds: float) -> int:
    """Requests ``paths`` in turn, one after the other, for ``seconds``; how many were
    answered."""
    answered = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        target.get(paths[answered % len(paths)])
        answered += 1
    return answered


def _loop_samples(python: Path, spawn: Spawner, *paths: str) -> Tally:
    """The stdlib server under requests for ``paths``, sampled meanwhile by the default reader."""
    target = spawn.target("stdlib_server", python=python)
    counts = Tally()
    with _native.Sampler(target.pid, rate_hz=RATE_HZ) as sampler:
        answered = _drive(target, paths, SECONDS)
        for window in sampler.drain(flush=True):
            counts.add(window_of(window))
        stats = sampler.stats()
    # A read torn by the running loop is read again at once; a tick whose reads all tore is
    # counted, never kept: a few of them, under the load of a busy test machine, py-spy has too.
    ticks = stats["samples"] + stats["errors"]
    assert stats["errors"] <= 0.02 * ticks, (stats["errors"], ticks, stats["last_error"])
    assert answered >= 10, f"the server answered {answered} requests to {paths}"
    return counts


def _shares(counts: Tally) -> dict[str, float]:
    states = counts.state_counts()
    total = sum(states.values())
    assert total >= 0.5 * SECONDS * RATE_HZ, states
    return {state: count / total for state, count in states.items()}


@each_version
def test_an_idle_loop_is_idle(spawn: Spawner, version: str) -> None:
    """Requests that ask for nothing or wait on the loop (``await asyncio.sleep``): the loop
    thread waits in its selector, off CPU, nearly all the time."""
    counts = _loop_samples(interpreter(version), spawn, "/idle", "/wait?ms=50")
    shares = _shares(counts)
    assert shares["idle"] >= 0.8, shares


@each_version
def test_a_busy_loop_is_busy(spawn: Spawner, version: str) -> None:
    """Pure-Python work in the handler, on the loop thread: on CPU, in ``忙しく計算``."""
    counts = _loop_samples(interpreter(version), spawn, "/busy?ms=50")
    shares = _shares(counts)
    assert shares["busy"] >= 0.7, shares
    busy = counts.to_profile(cpu_only=True).stacks
    work = sum(n for stack, n in busy.items() if "忙しく計算 (targets/stdlib_server.py:" in stack)
    assert work >= 0.5 * sum(busy.values()), sorted(busy.items(), key=lambda kv: -kv[1])[:3]


@each_version
def test_a_blocked_loop_is_blocked(spawn: Spawner, version: str) -> None:
    """``time.sleep`` in the handler, on the loop thread: off CPU outside the selector, so the
    loop serves nobody; the blocked samples wait under ``blocking_sleep``."""
    counts = _loop_samples(interpreter(version), spawn, "/blocked?ms=50")
    shares = _shares(counts)
    assert shares["blocked"] >= 0.7, shares
    blocked: Counter[str] = Counter()
    for stack, n in counts.to_profile().stacks.items():
        if stack.endswith(BLOCKED_LEAF):
            blocked[code_frames(stack)[-1].name] += n
    assert blocked["blocking_sleep"] >= 0.9 * sum(blocked.values()), blocked


@pytest.mark.parametrize("version", WALKED)
def test_a_thread_in_a_known_wait_costs_no_run_state_read(spawn: Spawner, version: str) -> None:
    """Threads parked in ``Condition.wait`` (qualified names, as the walker reads them) are idle
    by the known-wait rule: the walker reads no /proc run state for them, only for the two that
    spin, and reports all the parked ones off CPU."""
    python = interpreter(version)
    target = spawn.target("threads", "--threads", "20", "--busy", "2", python=python)
    with _native.Sampler(target.pid, rate_hz=RATE_HZ) as sampler:
        time.sleep(SECONDS)
        stats = sampler.stats()
        windows = sampler.drain(flush=True)
    assert stats["reader"].startswith("walker"), stats["reader"]
    # 21 Python threads a tick (the main one waits too); only the two spinning ones are read
    assert 1.5 <= stats["state_reads"] <= 2.5, stats["state_reads"]
    # and those reads are timed as made: part of a tick's read, never all of it
    assert 0 < stats["state_reads_mean"] < stats["read_mean"], stats
    parked = [
        row for w in windows for row in w["stacks"] if "parked (targets/threads.py:" in row.stack
    ]
    assert sum(row.count for row in parked) > 0
    assert not any(row.on_cpu for row in parked), "a parked thread was reported on CPU"


@each_version
def test_a_busy_target_reads_as_pyspy_reads_it(spawn: Spawner, version: str) -> None:
    """Four threads spinning on CPU, their stacks (and lines) changing all the time: the default
    reader's most frequent stacks are among those py-spy read at the same time."""
    target = spawn.target("threads", "--threads", "4", "--busy", "4", python=interpreter(version))
    windows, pyspy = _side_by_side(target.pid)
    theirs = {stack for _name, stack in stack_counts(pyspy)}
    ours: Counter[str] = Counter()
    for (_name, stack), count in stack_counts(windows).items():
        ours[stack] += count
    total = sum(ours.values())
    # the lines a spinning loop sits on most; a rarely hit one may miss the other sampler
    hot = [stack for stack, count in ours.items() if count >= 0.05 * total]
    assert hot and all(stack in theirs for stack in hot), (hot, sorted(theirs))
    assert any("churn (targets/threads.py:" in stack for stack in hot)


def _generated_frames(stack: str) -> list[tuple[int, int, str]]:
    """(number, level, where) of each generated function in a folded stack, root first."""
    return [
        (int(number), int(level), where)
        for number, level, where in re.findall(r"(?:^|;)gen_(\d+)_(\d+) \(([^)]*)\)", stack)
    ]


@pytest.mark.parametrize("version", WALKED)
def test_code_objects_freed_and_made_again_are_never_named_wrong(
    spawn: Spawner, version: str
) -> None:
    """A thread compiles a fresh chain of six functions every 3 ms and lets the last one go, so
    new code objects keep taking the memory of freed ones. Every chain is numbered in a row
    (``gen_N+5_5`` calls ... ``gen_N_0``, in ``mod_K.py``): a stack that mixes numbers of two
    chains, or shows a name where a file should be, would name a code object after one that
    lay at its address before, or after strings freed while it was read. None does, whether
    the walker checks each code's header (3.11-3.13) or trusts the ones the interpreter has
    freed none of since (3.14+: its count of code objects freed moves all the time here)."""
    target = spawn.target("generated", "--threads", "1", python=interpreter(version))
    with _native.Sampler(target.pid, rate_hz=RATE_HZ) as sampler:
        time.sleep(SECONDS)
        stats = sampler.stats()
        windows = sampler.drain(flush=True)
    assert stats["reader"].startswith("walker"), stats["reader"]
    chains = 0
    for (_name, stack), _count in stack_counts(windows).items():
        frames = _generated_frames(stack)
        if not frames:
            continue
        chains += 1
        # from the outermost (level 5) down, each in its file at line 2; a chain caught while
        # it calls in is shorter
        (first, top, _), *_ = frames
        base = first - top
        right = [(base + level, level, f"mod_{(base + level) // 100}.py:2") for level in range(6)]
        assert top == 5 and frames == right[::-1][: len(frames)], stack
    assert chains >= 50, chains


@pytest.mark.parametrize("version", WALKED)
def test_code_headers_are_read_while_code_objects_may_have_been_freed(
    spawn: Spawner, version: str
) -> None:
    """On a target whose code objects stay (a ~30-frame event loop), 3.14+ walkers read no
    code object's header once the interpreter's count of code objects freed has stood for a
    sample: a few pieces a sample (the thread state, its current frame, the top of its data
    stack, the count) instead of one more a code object. 3.11-3.13 have no such count and
    check each code object's header every sample."""
    target = spawn.target("deep", python=interpreter(version))
    with _native.Sampler(target.pid, rate_hz=RATE_HZ) as sampler:
        time.sleep(0.5)
        before = memory_reads(sampler.stats())
        time.sleep(SECONDS)
        stats = sampler.stats()
    assert stats["reader"].startswith("walker"), stats["reader"]
    # pieces per sample over the two seconds
    ticks, _calls, pieces, _size = (b - a for a, b in zip(before, memory_reads(stats), strict=True))
    pieces /= ticks
    # measured: 13.6-15.1 pieces a sample on 3.14 and 3.15, 29-32.5 on 3.11-3.13 (a header a
    # code object more); the line between them lies halfway
    if _version_tuple(version) >= (3, 14):
        assert pieces < 22, pieces
    else:
        assert pieces > 22, pieces
