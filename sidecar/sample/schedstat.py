"""The kernel's own accounting of a process's threads over a span: time on a CPU and time
runnable but waiting for one (``/proc/PID/task/TID/schedstat``: nanoseconds run, nanoseconds
waited on a run queue, timeslices).

A sample of a runnable thread reads busy whether it ran or waited for a CPU (the OS's R state
tells them apart from neither); these totals, read when sampling starts and when it ends, say how
much of the threads' runnable time was waiting: a container at its CPU limit, or more runnable
threads than cores. A kernel without scheduler statistics has no such file, or one whose wait
never moves: then nothing is said, never a guess.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from sidecar.discover import read_proc_or_empty

#: (ns on a CPU, ns waiting on a run queue) of each thread, by thread id
Reading = dict[int, tuple[int, int]]


def read_threads(pid: int) -> Reading:
    """Each live thread's schedstat totals; a thread gone meanwhile, or a line that is not three
    numbers, is left out; empty when the process is gone or has no such files."""
    out: Reading = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for name in tids:
        if not name.isdigit():
            continue
        fields = read_proc_or_empty(pid, f"task/{name}/schedstat").split()
        if len(fields) != 3 or not all(f.isdigit() for f in fields):
            continue
        out[int(name)] = (int(fields[0]), int(fields[1]))
    return out


@dataclass(frozen=True)
class CpuTime:
    """Seconds on a CPU and waiting for one, of some threads over a span."""

    ran_s: float
    waited_s: float

    @property
    def waited_share(self) -> float:
        """The share of the runnable time spent waiting for a CPU."""
        whole = self.ran_s + self.waited_s
        return self.waited_s / whole if whole else 0.0


def spent(before: Reading, after: Reading, tids: set[int] | None = None) -> CpuTime | None:
    """What the threads (``tids``, or all) spent between two readings: each thread read at
    both ends counts (a thread started or ended between them is left out); None when no thread
    was read at both ends or no wait was ever counted (a kernel without scheduler statistics)."""
    ran = waited = 0
    both = [tid for tid in after if tid in before and (tids is None or tid in tids)]
    if not both:
        return None
    for tid in both:
        ran += max(0, after[tid][0] - before[tid][0])
        waited += max(0, after[tid][1] - before[tid][1])
    if not waited and not any(after[tid][1] for tid in both):
        return None  # the wait counter never moved in any thread: not kept by this kernel
    return CpuTime(ran / 1e9, waited / 1e9)


def cpu_line(spans: Mapping[str, CpuTime | None], elapsed_s: float) -> str | None:
    """One line for ``record`` and ``stats``: per group of threads ("loop thread", "all
    threads"), seconds on a CPU and waiting for one over ``elapsed_s``; None with nothing read."""
    parts = [
        f"{who} {t.ran_s:.2f} s on a CPU, {t.waited_s:.2f} s waiting for one "
        f"({t.waited_share:.0%} of runnable time)"
        for who, t in spans.items()
        if t is not None
    ]
    if not parts:
        return None
    return f"kernel's accounting over {elapsed_s:.1f} s (schedstat): " + " · ".join(parts)
