"""What ``record`` and ``stats`` say of the kernel's accounting of a target's threads: their time
on a CPU and their time runnable but waiting for one (``/proc/PID/task/TID/schedstat``), beside
the shares, where a runnable thread still reads busy.

Real spinners pinned to one CPU: beside another on the same CPU, a spinner waits half its
runnable time or more, and what ``record`` says agrees with the kernel's counters, read here by
the test itself over the same span, alone and beside the other.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.support.helpers import Spawner, sidecar

LINE = re.compile(
    r"kernel's accounting over (?P<span>[\d.]+) s \(schedstat\): .*all threads "
    r"(?P<ran>[\d.]+) s on a CPU, (?P<waited>[\d.]+) s waiting for one \((?P<share>\d+)% "
)


def pin(pid: int, cpu: int) -> None:
    """Every thread of ``pid`` on ``cpu`` alone."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})


def waited_and_ran(pid: int) -> tuple[int, int]:
    """The kernel's nanoseconds waiting for a CPU and on one, summed over the threads."""
    waited = ran = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as file:
            run, wait, _ = (int(field) for field in file.read().split())
        ran, waited = ran + run, waited + wait
    return waited, ran


def recorded(pid: int, out: Path) -> tuple[re.Match[str], float]:
    """``record``'s line of the kernel's accounting, and the waited share the test read."""
    before = waited_and_ran(pid)
    result = sidecar("record", "--pid", str(pid), "-d", "3", "-f", "folded", "-o", str(out))
    after = waited_and_ran(pid)
    assert result.returncode == 0, result.stderr
    match = LINE.search(result.stderr)
    assert match, result.stderr
    waited, ran = after[0] - before[0], after[1] - before[1]
    assert waited + ran > 0
    return match, waited / (waited + ran)


def test_a_spinner_beside_another_on_its_cpu_waits_half_its_time(
    spawn: Spawner, tmp_path: Path
) -> None:
    cpu = max(os.sched_getaffinity(0))
    alone = spawn.target("spin")
    pin(alone.pid, cpu)
    match, truth = recorded(alone.pid, tmp_path / "alone.txt")
    # alone, it waits only while other work runs on its CPU (the sampler, a loaded machine)
    alone_share = int(match["share"]) / 100
    assert abs(alone_share - truth) < 0.05, (match[0], truth)

    other = spawn.target("spin")
    pin(other.pid, cpu)
    match, truth = recorded(alone.pid, tmp_path / "shared.txt")
    share = int(match["share"]) / 100
    # two spinners on one CPU: each runs half the time at most, whatever else runs there
    assert share > 0.4, match[0]
    assert share > alone_share or alone_share > 0.4, (match[0], alone_share)
    # the span the test read holds the sidecar's start and end too: a few tenths of a second
    assert abs(share - truth) < 0.05, (match[0], truth)
    assert float(match["waited"]) > 1.0, match[0]


def test_stats_says_it_too(spawn: Spawner) -> None:
    target = spawn.target("spin")
    result = sidecar("stats", "--pid", str(target.pid), "--duration", "1")
    assert result.returncode == 0, result.stderr
    match = LINE.search(result.stdout)
    assert match, result.stdout
    assert float(match["ran"]) + float(match["waited"]) > 0.8, match[0]
