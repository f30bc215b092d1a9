"""Where a target thread's run state (on CPU or not) comes from: its /proc ``stat`` on every
kernel, or its ``wchan``, which costs the kernel less, once ``wchan`` has named the wait of one
of the target's threads that ``stat`` showed asleep. A kernel that names no waits reads "0"
there for a sleeping thread too, so ``stat`` stays."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from helpers import Spawner, wait_until

from sidecar import _native


def _kernel_names_waits() -> bool:
    """Whether this kernel's wchan names what a sleeping process waits in, read straight from
    /proc of a ``sleep`` (in its first moments it may still be starting) while its stat says it
    sleeps."""
    child = subprocess.Popen(["sleep", "30"])
    proc = Path(f"/proc/{child.pid}")

    def named() -> bool:
        asleep = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "S"
        return asleep and (proc / "wchan").read_text() not in ("", "0")

    try:
        return wait_until(named, timeout=2.0)
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_states_come_from_wchan_where_the_kernel_names_waits_and_stay_true(
    spawn: Spawner,
) -> None:
    """``targets/deep.py`` on CPU half of each 20 ms and in ``time.sleep`` the rest: read at
    100 Hz for 3 s, the sampler's states come from ``wchan`` where this kernel names waits
    (else from ``stat``), and its on-CPU share stays near the half."""
    target = spawn.target("deep", "--busy", "0.5")
    with _native.Sampler(target.pid, rate_hz=100) as sampler:
        time.sleep(3.0)
        stats = sampler.stats()
        windows = sampler.drain(flush=True)
    assert stats["state_file"] == ("wchan" if _kernel_names_waits() else "stat"), stats
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
