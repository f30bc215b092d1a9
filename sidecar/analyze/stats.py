"""The stats document: what ``sidecar stats --json`` prints and ``GET /api/stats`` serves, made
here for both (the shape docs/http-api.md documents under ``GET /api/stats``).

Per target: its event loop's shares (busy, idle, blocked, gil, cpu_wait: the five sum to 1), who
held the GIL while it waited, the collector's share, stack depth, and what only sampling over
time knows: its asyncio tasks (None where they were not scanned) and its stalls (None where their
time order is not known: a profile file); per framework: the shares of its processes that serve
requests. Live, it also says how the sampler kept its clock (``Sampling``): a sampler that waited
for a CPU missed ticks, and its shares are then set beside the kernel's own count of the same
threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sidecar.analyze.threads import Analysis, by_framework
from sidecar.rules.frames import STATES
from sidecar.sample.schedstat import spent

if TYPE_CHECKING:
    from sidecar.sample.record import Recording

#: The share of its ticks the sampler may miss before ``record`` and ``stats`` set the shares
#: beside the kernel's count. Measured on 2 cores (an asyncio loop on a CPU 30 ms of 100, and a
#: spinner, 4 s at 100 Hz, 41 runs): without a load of its own the sampler missed 0 to 4.0% of
#: its ticks, the busy share within 0.022 of the kernel's on-CPU share and busy + cpu_wait
#: within 0.029 of its runnable share; beside 2 to 16 spinners, runs that missed 5 to 15% read
#: busy + cpu_wait 0.038 under the kernel on average, and those that missed more 0.077 (up to
#: 0.117): the samples lean towards idle.
MISSED_NOTED = 0.05


@dataclass(frozen=True)
class TargetStats:
    """One target's part of the document."""

    analysis: Analysis
    #: the tasks block (``analyze.tasks.task_block``), None where no scan was made
    tasks: dict[str, Any] | None = None
    #: its stalls as ``Stall.to_json`` gives them, None where their time order is unknown
    stalls: list[dict[str, Any]] | None = None
    #: what the kernel counted over a live sampling (``Recording.kernel_json``), None else
    kernel: dict[str, Any] | None = None
    #: how the sampler kept its clock over a live sampling, None else
    sampling: Sampling | None = None


@dataclass(frozen=True)
class Sampling:
    """How the sampler kept its clock over a live sampling, and the kernel's own share of
    the sampled threads' time beside it.

    The sampler's thread waits for a CPU as its target does; on a loaded host it misses the
    ticks that fall while it waits, and those it takes fall unevenly, at moments that depend on
    what else runs: measured, the share runnable by samples (busy and cpu_wait) then read up to
    0.12 under the kernel's (``MISSED_NOTED``). The kernel's counters of the same threads over
    the same span (``schedstat``) have no such error: where many ticks were missed, ``note``
    sets them beside the sampled shares."""

    rate_hz: float
    #: ticks that read the target (with those whose every read failed), ticks missed, late
    ticks: int
    missed: int
    late: int
    lag_max_s: float
    #: the threads the kernel's shares are of (the event loop's, else every sampled thread),
    #: read at both ends of the span
    threads: int
    #: by the kernel: the share of the span those threads spent on a CPU, and runnable (on a
    #: CPU or waiting for one), per thread; None where it keeps no such counter
    on_cpu_share: float | None
    runnable_share: float | None

    @property
    def due(self) -> int:
        """The ticks the sampler's clock came to: those it took and those it missed."""
        return self.ticks + self.missed

    @property
    def missed_share(self) -> float:
        return self.missed / self.due if self.due else 0.0

    @property
    def leans(self) -> bool:
        """Whether the sampler missed enough ticks for its shares to be set beside the
        kernel's (never when it missed none)."""
        return self.missed > 0 and self.missed_share >= MISSED_NOTED

    def note(self, analysis: Analysis) -> str | None:
        """The line ``record`` and ``stats`` print beside the shares when the sampler missed
        many ticks; None else."""
        if not self.leans:
            return None
        head = (
            f"the sampler missed {self.missed:,} of {self.due:,} ticks "
            f"({self.missed_share:.0%}), waiting for a CPU itself, so the shares may be off"
        )
        if self.on_cpu_share is None or self.runnable_share is None or not analysis.samples:
            return head + " (the kernel's counters of the threads could not be read to check them)"
        who = "the event loop was" if not analysis.no_loop_thread else "the threads were"
        runnable = analysis.share("busy") + analysis.share("cpu_wait")
        return (
            f"{head}: by the kernel {who} on a CPU {self.on_cpu_share:.1%} of the span "
            f"(busy {analysis.share('busy'):.1%} by samples) and runnable "
            f"{self.runnable_share:.1%} (busy and cpu_wait {runnable:.1%})"
        )

    def to_json(self, analysis: Analysis) -> dict[str, Any]:
        """The ``sampling`` block of ``stats --json``."""

        def share(value: float | None) -> float | None:
            return None if value is None else round(value, 4)

        return {
            "rate_hz": self.rate_hz,
            "ticks": self.ticks,
            "missed": self.missed,
            "late": self.late,
            "missed_share": round(self.missed_share, 4),
            "lag_max_s": round(self.lag_max_s, 4),
            "kernel_on_cpu_share": share(self.on_cpu_share),
            "kernel_runnable_share": share(self.runnable_share),
            "note": self.note(analysis),
        }

    @classmethod
    def of(cls, rec: Recording) -> Sampling:
        """The sampling of a recording: the sampler's counters, and the kernel's shares of the
        threads the shares are of (the event loop's, else every sampled thread)."""
        stats = rec.stats
        threads = rec.counts.loop_threads() or {key.thread_id for key in rec.counts.stacks}
        before = rec.kernel_before.threads if rec.kernel_before else {}
        after = rec.kernel_after.threads if rec.kernel_after else {}
        both = [tid for tid in after if tid in before and tid in threads]
        time = spent(before, after, threads) if both else None
        whole = rec.elapsed * len(both)
        on_cpu = runnable = None
        if time is not None and whole > 0:
            on_cpu = min(1.0, time.ran_s / whole)
            runnable = min(1.0, (time.ran_s + time.waited_s) / whole)
        return cls(
            rate_hz=rec.rate_hz,
            ticks=stats["samples"] + stats["errors"],
            missed=stats["missed"],
            late=stats["late"],
            lag_max_s=stats["lag_max"],
            threads=len(both),
            on_cpu_share=on_cpu,
            runnable_share=runnable,
        )


def stats_document(targets: Sequence[TargetStats | Analysis]) -> dict[str, Any]:
    """The document of these targets (an analysis alone: no tasks nor stalls known)."""
    parts = [t if isinstance(t, TargetStats) else TargetStats(t) for t in targets]
    return {
        "targets": [
            {
                "pid": one.analysis.pid,
                "role": one.analysis.role,
                "framework": one.analysis.framework,
                "loop": one.analysis.loop,
                **_shares(one.analysis),
                "tasks": one.tasks,
                "stalls": one.stalls,
                "kernel": one.kernel,
                "sampling": None if one.sampling is None else one.sampling.to_json(one.analysis),
            }
            for one in parts
        ],
        "frameworks": {
            name: _shares(merged)
            for name, merged in by_framework([one.analysis for one in parts]).items()
        },
    }


def _shares(analysis: Analysis) -> dict[str, Any]:
    return {
        "samples": analysis.samples,
        # a state the profile does not tell (a py-spy file's busy) has no share: null
        **{
            f"{state}_share": round(analysis.share(state), 4) if analysis.is_told(state) else None
            for state in STATES
        },
        # samples of no told state (of them, in frames too narrow to draw)
        "untold_share": round(analysis.untold_share, 4),
        "pruned_share": round(analysis.pruned / analysis.samples, 4) if analysis.samples else 0.0,
        "gil_holders": [
            {"thread": thread, "site": site, "share": round(share, 4)}
            for thread, site, _, share in analysis.top_holders()
        ],
        "gc_share": round(analysis.gc_share, 4),
        "depth": analysis.depth.to_json(),
    }
