"""On-CPU state from the OS where the interpreter keeps no OS thread id (CPython 3.8 to 3.10,
read through py-spy) as where it does (3.11, the walker): real targets under real interpreters,
the real native sampler."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sidecar import _native
from tests.support.helpers import ROOT, Spawner
from tests.support.pythons import interpreter

VERSIONS = ["3.8", "3.9", "3.10", "3.11"]


def start(spawn: Spawner, *argv: str | Path) -> tuple[subprocess.Popen[str], list[str]]:
    """Starts a target and waits for its line "ready ...": the process and the line's words."""
    popen = subprocess.Popen([str(a) for a in argv], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    spawn.procs.append(popen)
    assert popen.stdout is not None
    ready, _, _ = select.select([popen.stdout], [], [], 20)
    words = popen.stdout.readline().split() if ready else []
    assert words[:1] == ["ready"], f"{argv} did not start"
    return popen, words[1:]


def on_cpu_shares(windows: list[_native.Window]) -> dict[int, tuple[float, int]]:
    """Per thread id: the share of its samples on CPU, and how many samples."""
    counts: dict[int, list[int]] = {}
    for window in windows:
        for row in window["stacks"]:
            counts.setdefault(row.thread_id, [0, 0])[int(row.on_cpu)] += row.count
    return {tid: (on / (off + on), off + on) for tid, (off, on) in counts.items()}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_os_says_which_threads_run(spawn: Spawner, version: str) -> None:
    python = interpreter(version)
    sleeper = spawn.target("spin", "--depth", "5", "--sleep", python=python).popen
    spinner = spawn.target("spin", "--depth", "5", python=python).popen
    samplers = [_native.Sampler(p.pid, rate_hz=100) for p in (sleeper, spinner)]
    try:
        time.sleep(2)
        windows = [s.drain(flush=True) for s in samplers]
        stats = [s.stats() for s in samplers]
    finally:
        for sampler in samplers:
            sampler.stop()
    reader = "walker" if version == "3.11" else "py-spy"
    for proc, windows_, stats_ in zip((sleeper, spinner), windows, stats, strict=True):
        assert stats_["reader"].startswith(f"{reader} (Python {version}."), stats_
        assert stats_["on_cpu"] == "os", stats_
        # the main thread, by its OS thread id: the PID
        assert set(on_cpu_shares(windows_)) == {proc.pid}
    asleep, samples = on_cpu_shares(windows[0])[sleeper.pid]
    assert samples >= 100 and asleep <= 0.1, f"time.sleep on CPU in {asleep:.0%} of {samples}"
    busy, samples = on_cpu_shares(windows[1])[spinner.pid]
    assert samples >= 100 and busy >= 0.9, f"a spin on CPU in {busy:.0%} of {samples}"


# A sleeping main thread, a spinning Python thread, and faulthandler's watchdog: a thread of
# C only, which blocking mode must never stop.
THREADS = """
import faulthandler, threading, time
faulthandler.dump_traceback_later(3600)
def spin():
    while True:
        sum(i * i for i in range(1000))
threading.Thread(target=spin, daemon=True).start()
time.sleep(0.2)
print("ready", threading.enumerate()[-1].native_id, flush=True)
while True:
    time.sleep(0.5)
"""


def tracer(pid: int, tid: int) -> int:
    """The PID that ptraces the thread now, 0 for none."""
    try:
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    except OSError:
        return 0
    line = next(line for line in status.splitlines() if line.startswith("TracerPid:"))
    return int(line.split()[1])


def test_blocking_mode_stops_only_python_threads_of_3_9(spawn: Spawner) -> None:
    target, words = start(spawn, interpreter("3.9"), "-c", THREADS)
    spinner = int(words[0])
    tids = {int(t) for t in os.listdir(f"/proc/{target.pid}/task")}
    (watchdog,) = tids - {target.pid, spinner}
    traced = dict.fromkeys(tids, 0)
    with _native.Sampler(target.pid, rate_hz=100, blocking=True) as sampler:
        time.sleep(0.3)  # the first sample stops the whole process: its threads are unknown
        end = time.monotonic() + 2
        while time.monotonic() < end:
            for tid in tids:
                traced[tid] += tracer(target.pid, tid) != 0
        windows = sampler.drain(flush=True)
        stats = sampler.stats()
    assert stats["pauses"] >= 100 and stats["errors"] == 0, stats
    assert stats["on_cpu"] == "os", stats
    # the Python threads were seen stopped now and then, the watchdog never
    assert traced[target.pid] + traced[spinner] > 0 and traced[watchdog] == 0, traced
    shares = on_cpu_shares(windows)
    assert set(shares) == {target.pid, spinner}
    asleep, samples = shares[target.pid]
    assert samples >= 100 and asleep <= 0.1, f"time.sleep on CPU in {asleep:.0%} of {samples}"
    busy, samples = shares[spinner]
    assert samples >= 100 and busy >= 0.9, f"a spin on CPU in {busy:.0%} of {samples}"
    # left running: alive, no thread stopped or traced
    time.sleep(0.1)
    assert target.poll() is None
    for tid in tids:
        stat = Path(f"/proc/{target.pid}/task/{tid}/stat").read_text()
        assert stat[stat.rindex(")") + 2] not in "tT" and tracer(target.pid, tid) == 0


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="needs root and unshare (util-linux) to build a PID namespace",
)
@pytest.mark.parametrize("version", ["3.9", "3.11"])
def test_a_target_in_another_pid_namespace_says_its_states_are_estimated(
    spawn: Spawner, version: str
) -> None:
    """Inside a PID namespace of its own, the target's thread ids are not those this sidecar's
    /proc lists: no thread maps to an OS thread, and the sampler says its on-CPU states are
    estimated instead of presenting them as the OS's."""
    python = interpreter(version)
    argv = ["unshare", "--pid", "--fork", "--mount-proc", str(python), "-m", "targets.spin"]
    unshare = subprocess.Popen(
        [*argv, "--depth", "5", "--sleep"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    spawn.procs.append(unshare)
    assert unshare.stdout is not None
    ready, _, _ = select.select([unshare.stdout], [], [], 20)
    assert ready and unshare.stdout.readline().strip() == "ready"
    # the target is unshare's child, PID 1 of the namespace
    children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children").read_text().split()
    assert len(children) == 1, children
    target = int(children[0])
    try:
        with _native.Sampler(target, rate_hz=100) as sampler:
            time.sleep(1.0)
            stats = sampler.stats()
            assert sampler.on_cpu == stats["on_cpu"]
    finally:
        os.kill(target, signal.SIGKILL)  # PID 1 of its namespace ignores SIGTERM
    assert stats["samples"] > 0 and stats["errors"] == 0, stats
    assert stats["on_cpu"].startswith("estimated ("), stats["on_cpu"]
