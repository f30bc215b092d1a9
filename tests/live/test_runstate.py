"""Where a target thread's run state (on CPU or not) comes from: its /proc ``stat`` on every
kernel, or its ``syscall``, which costs the kernel less, once ``syscall`` has named the system
call of one of the target's threads that ``stat`` showed asleep. Where the file cannot say (a
kernel without it, a reader that may not read it), ``stat`` stays."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from sidecar import _native
from tests.support.helpers import Spawner, wait_until
from tests.support.ptrace_only import AS_APP_USER, needs_setpriv, run_with_ptrace_only


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


#: A sampler of the PID in argv[1] for 3 s: whether this process can read the target's syscall
#: file, where the states came from, and the samples on CPU of all.
_SAMPLE_WITH_PTRACE_ONLY = """
import json, sys, time
from sidecar import _native

pid = int(sys.argv[1])
try:
    open(f"/proc/{pid}/task/{pid}/syscall").read()
    syscall = "read"
except OSError as err:
    syscall = type(err).__name__
with _native.Sampler(pid, rate_hz=100) as sampler:
    time.sleep(3.0)
    stats = sampler.stats()
    rows = [row for window in sampler.drain(flush=True) for row in window["stacks"]]
print(json.dumps({
    "syscall": syscall,
    "state_file": stats["state_file"],
    "on_cpu": stats["on_cpu"],
    "total": sum(row.count for row in rows),
    "running": sum(row.count for row in rows if row.on_cpu),
}))
"""


@pytest.mark.slow
@needs_setpriv
def test_a_sampler_that_may_not_read_syscall_keeps_stat_and_its_states_true(
    spawn: Spawner,
) -> None:
    """As the Kubernetes manifests deploy sidecar: the app under a user of its own, sidecar as
    root with CAP_SYS_PTRACE its only capability. The target's ``syscall`` file is for its
    user alone (mode 0400, and no CAP_DAC_OVERRIDE), so the sampler reads ``stat``, and
    ``targets/deep.py`` on CPU half of each 20 ms reads so."""
    target = spawn.target("deep", "--busy", "0.5", prefix=AS_APP_USER)
    result = run_with_ptrace_only(_SAMPLE_WITH_PTRACE_ONLY, target.pid)
    assert result["syscall"] == "PermissionError", result
    assert result["state_file"] == "stat", result
    assert result["on_cpu"] == "os", result
    assert result["total"] >= 150, result
    assert 0.3 <= result["running"] / result["total"] <= 0.7, result
