"""Where a target thread's run state (on CPU or not) comes from: its /proc ``stat`` on every
kernel, or its ``syscall``, which costs the kernel less, once ``syscall`` has named the system
call of one of the target's threads that ``stat`` showed asleep. Where the file cannot say (a
kernel without it, a reader that may not read it), ``stat`` stays."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from helpers import Spawner, wait_until

from sidecar import _native


def _kernel_names_calls() -> bool:
    """Whether this kernel's ``syscall`` file names the system call a sleeping process waits
    in, read straight from /proc of a ``sleep`` (in its first moments it may still be starting)
    while its stat says it sleeps."""
    child = subprocess.Popen(["sleep", "30"])
    proc = Path(f"/proc/{child.pid}")

    def named() -> bool:
        asleep = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "S"
        if not asleep:
            return False
        try:
            call = (proc / "syscall").read_text()
        except OSError:
            return False
        return call[:1].isdigit() or call.startswith("-")

    try:
        return wait_until(named, timeout=2.0)
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_states_come_from_syscall_where_the_kernel_names_calls_and_stay_true(
    spawn: Spawner,
) -> None:
    """``targets/deep.py`` on CPU half of each 20 ms and in ``time.sleep`` the rest: read at
    100 Hz for 3 s, the sampler's states come from ``syscall`` where this kernel names the
    calls (else from ``stat``), and its on-CPU share stays near the half."""
    target = spawn.target("deep", "--busy", "0.5")
    with _native.Sampler(target.pid, rate_hz=100) as sampler:
        time.sleep(3.0)
        stats = sampler.stats()
        windows = sampler.drain(flush=True)
    assert stats["state_file"] == ("syscall" if _kernel_names_calls() else "stat"), stats
    rows = [row for window in windows for row in window["stacks"]]
    total = sum(row.count for row in rows)
    on_cpu = sum(row.count for row in rows if row.on_cpu)
    assert total >= 150, total
    assert 0.3 <= on_cpu / total <= 0.7, (on_cpu, total)
    # the samples off CPU are those in deep.py's sleeps
    off = [row for row in rows if not row.on_cpu]
    sleeping = sum(
        row.count
        for row in off
        if "(targets/deep.py:" in row.stack.rsplit(";", 2)[-2]
        and ("wait_backend" in row.stack or "wait_cache" in row.stack)
    )
    assert sleeping >= 0.95 * (total - on_cpu), [row.stack for row in off][:3]
