"""The cgroup reader against the kernel: a real Python spinner in a cgroup v1 limited to 0.2 CPU
(``cpu.cfs_quota_us`` 20000 of ``cpu.cfs_period_us`` 100000) reads 0.2 cores; its throttled share
and seconds lost over a span agree with the kernel's own ``cpu.stat`` read over the same span,
and its own CPU time over the span (/proc/PID/stat) is about 0.2 of the wall time. An unlimited
process reads no limit. The test makes its own cgroup and removes it.

It needs root and a writable v1 cpu hierarchy at /sys/fs/cgroup/cpu: without them it fails in CI
(``CI=true``) and is skipped elsewhere, with the reason either way.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from sidecar.sample.cgroup import CgroupCpu, cpu_line, read_cpu
from tests.support.cgroups import CPU, kernel_stat, needed
from tests.support.helpers import Spawner, sidecar

SPAN = 2.5
TICK = os.sysconf("SC_CLK_TCK")
_needed = needed


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def bracketed(pid: int, group: Path) -> tuple[CgroupCpu, tuple[int, int, int]]:
    """A reading by the module with the kernel's counters read straight on either side of it,
    taken when they did not move in between (a period ends every 100 ms), so both are of the
    same instant."""
    for _ in range(50):
        first = kernel_stat(group)
        reading = read_cpu(pid)
        if kernel_stat(group) == first:
            return reading, first
    raise AssertionError("the kernel's cpu.stat moved during every one of 50 readings")


@pytest.mark.slow
def test_a_spinner_limited_to_a_fifth_of_a_cpu(limited: Path, spawn: Spawner) -> None:
    spinner = spawn.command(sys.executable, "-c", "while True: pass")
    (limited / "cgroup.procs").write_text(f"{spinner.pid}\n")
    time.sleep(0.3)  # a few periods under the quota first
    before, kernel_before = bracketed(spinner.pid, limited)
    cpu_before, wall_before = cpu_seconds(spinner.pid), time.monotonic()
    time.sleep(SPAN)
    after, kernel_after = bracketed(spinner.pid, limited)
    cpu_after, wall_after = cpu_seconds(spinner.pid), time.monotonic()

    assert after.version == 1
    assert after.path == f"/{limited.name}"
    assert after.directory == limited
    assert after.cores == pytest.approx(0.2)
    assert after.period_seconds == pytest.approx(0.1)
    span = after.since(before)
    periods = kernel_after[0] - kernel_before[0]
    throttled = kernel_after[1] - kernel_before[1]
    lost = (kernel_after[2] - kernel_before[2]) / 1e9
    figures = (
        f"module: {span.throttled_periods}/{span.periods} periods, {span.seconds_lost:.3f} s lost; "
        f"kernel: {throttled}/{periods}, {lost:.3f} s"
    )
    assert periods > 0, figures
    assert abs(span.share - throttled / periods) <= 0.05, figures
    assert abs(span.seconds_lost - lost) <= 0.05, figures
    assert span.share > 0.5, f"a spinner at a 0.2 quota is throttled in most periods: {figures}"
    share_of_wall = (cpu_after - cpu_before) / (wall_after - wall_before)
    assert abs(share_of_wall - 0.2) <= 0.05, f"the spinner ran {share_of_wall:.3f} of the wall"
    line = cpu_line(before, after)
    assert line.startswith(f"cpu limit 0.20 cores (cgroup v1 /{limited.name}): throttled in ")
    assert f"throttled in {span.throttled_periods} of {span.periods} periods" in line
    print(line, "|", figures, f"| cpu/wall {share_of_wall:.3f}")


@pytest.mark.slow
def test_record_says_a_throttled_target_waits_for_a_cpu(
    limited: Path, spawn: Spawner, tmp_path: Path
) -> None:
    """What ``record`` prints of a spinner at a 0.2 quota: most of its samples read cpu_wait
    (tests/live/test_cpu_wait.py checks the share), the kernel's accounting beside them says
    it waited for a CPU most of its runnable time, and
    its cgroup's line names the limit and the throttling, as the kernel's cpu.stat counted it
    over the same span."""
    spinner = spawn.command(sys.executable, "-c", "while True: pass")
    (limited / "cgroup.procs").write_text(f"{spinner.pid}\n")
    time.sleep(0.3)
    before = kernel_stat(limited)
    out = tmp_path / "p.txt"
    result = sidecar("record", "--pid", str(spinner.pid), "-d", "3", "-f", "folded", "-o", str(out))
    after = kernel_stat(limited)
    assert result.returncode == 0, result.stderr
    waits = re.search(
        r"all threads [\d.]+ s on a CPU, [\d.]+ s waiting for one \((\d+)% ", result.stderr
    )
    assert waits and int(waits[1]) > 50, result.stderr
    share = re.search(r"cpu_wait ([\d.]+)%", result.stderr)
    assert share and float(share[1]) > 50, result.stderr
    line = re.search(
        rf"cpu limit 0\.20 cores \(cgroup v1 /{limited.name}\): throttled in (\d+) of (\d+) "
        r"periods \(\d+%\), ([\d.]+) s lost over ([\d.]+) s",
        result.stderr,
    )
    assert line, result.stderr
    throttled, periods = int(line[1]), int(line[2])
    assert periods > 0 and throttled / periods > 0.5, line[0]
    # the kernel's counters around the whole command hold record's span
    assert throttled <= after[1] - before[1] and periods <= after[0] - before[0], (line[0], after)
    assert float(line[3]) <= (after[2] - before[2]) / 1e9 + 0.01, (line[0], after)


def test_an_unlimited_process_reads_no_limit() -> None:
    """This test's own process, whose cgroup and those above it set no quota (read straight
    from the v1 files, the oracle), reads no limit."""
    if not (CPU / "cpu.cfs_quota_us").is_file():
        _needed(f"no cgroup v1 cpu hierarchy at {CPU} to read the oracle from")
    own = next(
        line.split(":", 2)[2]
        for line in Path("/proc/self/cgroup").read_text().splitlines()
        if "cpu" in line.split(":")[1].split(",")
    )
    parts = [part for part in own.split("/") if part]
    quotas = {
        "/" + "/".join(parts[:depth]): int(
            CPU.joinpath(*parts[:depth], "cpu.cfs_quota_us").read_text()
        )
        for depth in range(len(parts) + 1)
    }
    if any(quota != -1 for quota in quotas.values()):
        _needed(f"this test runs in a cgroup with a cpu quota: {quotas}")
    reading = read_cpu(os.getpid())
    assert (reading.version, reading.path, reading.cores) == (1, own, None)
    assert cpu_line(reading, reading) == f"no cpu limit (cgroup v1 {own})"
