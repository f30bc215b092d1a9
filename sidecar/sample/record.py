"""A one-shot recording, as ``record`` and ``stats --pid`` make it: one process sampled for a
while, its windows classified and counted per unique stack, thread and state.

The native ``Sampler`` reads stacks on its own thread and hands over windows of unique stacks,
classified once each (``classify.window``); ``Tally`` sums them and gives them back as a
Profile, or as pprof samples. ``sidecar serve``'s long-running sessions are in
``sidecar.serve.sessions``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sidecar import _native, defaults
from sidecar.classify.requests import SlowRequest
from sidecar.classify.stalls import Stall
from sidecar.classify.tasks import InFlight
from sidecar.classify.threads import holder_name, is_loop_stack, state_counts
from sidecar.classify.window import Window, window_of
from sidecar.discover import prefork_group, read_cmdline
from sidecar.errors import SidecarError, TargetGone, signal_of
from sidecar.formats.pprof import Sample
from sidecar.profile import Profile, Target
from sidecar.rules.frames import leaf_for
from sidecar.rules.tasks import task_leaf
from sidecar.sample.cgroup import CgroupCpu, CpuUnknown, ThrottleLog, probe_cpu
from sidecar.sample.cgroup import cpu_line as throttling_line
from sidecar.sample.fate import Fate
from sidecar.sample.launch import Launched
from sidecar.sample.sampler import open_sampler
from sidecar.sample.schedstat import CpuTime, Reading, read_threads, spent
from sidecar.sample.schedstat import cpu_line as cpu_time_line

if TYPE_CHECKING:
    from sidecar._native import SamplerStats


@dataclass(frozen=True)
class SampleKey:
    """One thread's stack in one state, the unit that windows count."""

    thread_id: int
    state: str
    stack: str


@dataclass
class Tally:
    """Windows summed over a span of time: samples per unique stack, thread and state, the
    thread names seen, who held the GIL, the stalls and the task-samples (a ``Consumer``)."""

    stacks: dict[SampleKey, int] = field(default_factory=dict)
    thread_names: dict[int, str] = field(default_factory=dict)
    #: task stacks (leaf ``[running]``, ``[ready]`` or ``[waiting]``) with task-samples, and
    #: the task scans that counted them
    tasks: dict[str, int] = field(default_factory=dict)
    task_scans: int = 0
    #: tasks the scans found past their bound and did not read, summed over the scans
    task_unread: int = 0
    #: the most tasks in flight of one window (``Window.in_flight``)
    task_peak: float = 0.0
    #: loop samples waiting for the GIL by (holder's thread id, where it was)
    gil_holders: dict[tuple[int, str], int] = field(default_factory=dict)
    #: the stalls of the event loops, and those the sampler left out
    stall_list: list[Stall] = field(default_factory=list)
    stalls_dropped: int = 0
    #: the slow requests the task scans saw, and those the sampler left out
    slow_requests: list[SlowRequest] = field(default_factory=list)
    slow_requests_dropped: int = 0
    ticks: int = 0
    start: float | None = None
    end: float | None = None

    def add(self, window: Window) -> None:
        self.ticks += window.ticks
        self.start = window.start if self.start is None else min(self.start, window.start)
        self.end = window.end if self.end is None else max(self.end, window.end)
        for stack, thread_id, state, count in window.rows:
            key = SampleKey(thread_id, state, stack)
            self.stacks[key] = self.stacks.get(key, 0) + count
        self.thread_names.update(window.thread_names)
        for holder in window.gil_holders:
            at = (holder.holder, holder.site)
            self.gil_holders[at] = self.gil_holders.get(at, 0) + holder.samples
        self.stall_list += window.stalls
        self.stalls_dropped += window.stalls_dropped
        self.slow_requests += window.slow_requests
        self.slow_requests_dropped += window.slow_requests_dropped
        for body, state, count in window.tasks:
            stack = f"{body};{task_leaf(state)}"
            self.tasks[stack] = self.tasks.get(stack, 0) + count
        self.task_scans += window.task_scans
        self.task_unread += window.task_unread
        self.task_peak = max(self.task_peak, window.in_flight)

    def state_counts(self) -> dict[str, int]:
        """busy / idle / blocked / gil samples of the loop threads (all threads if none runs
        one)."""
        return state_counts(self.to_profile().stacks)

    def holders(self) -> dict[tuple[str, str], int]:
        """Loop samples waiting for the GIL by (name of the thread that held it, where it
        was), as ``analyze`` takes them."""
        out: dict[tuple[str, str], int] = {}
        for (tid, site), count in self.gil_holders.items():
            name = holder_name(tid, self.thread_names)
            out[name, site] = out.get((name, site), 0) + count
        return out

    def stalls(self) -> list[Stall]:
        """The stalls, oldest first, with what held each."""
        return sorted(self.stall_list, key=lambda s: s.start)

    def to_profile(
        self, *, cpu_only: bool = False, threads: bool = False, root: str | None = None
    ) -> Profile:
        """Folded stacks with [idle]/[blocked]/[gil] leaves (dropped with ``cpu_only``)."""
        profile = Profile(start=self.start, end=self.end)
        for sample in self.samples(cpu_only=cpu_only, threads=threads, root=root):
            profile.add(sample.stack, sample.count)
        profile.marked = not cpu_only
        return profile

    def samples(
        self, *, cpu_only: bool = False, threads: bool = False, root: str | None = None
    ) -> list[Sample]:
        """Each counted stack with its state leaf, its state and its thread's name; under a
        thread's root frame with ``threads``, and under ``root`` first (a process's, in a
        profile of several)."""
        out: list[Sample] = []
        for key, count in self.stacks.items():
            state = key.state
            if cpu_only and state != "busy":
                continue
            parts = [key.stack]
            name = self.thread_names.get(key.thread_id, "")
            if threads:
                parts.insert(0, f"thread ({name} {key.thread_id})".replace(";", ":"))
            if root is not None:
                parts.insert(0, root)
            leaf = leaf_for(state)
            if leaf is not None:
                parts.append(leaf)
            out.append(Sample(";".join(parts), state, count, name))
        return out

    def loop_threads(self) -> set[int]:
        """The threads whose samples show an event loop."""
        return {key.thread_id for key in self.stacks if is_loop_stack(key.stack)}

    def in_flight(self) -> InFlight | None:
        """The tasks in flight over the span, pooled over every scan; None without a scan."""
        if not self.task_scans:
            return None
        return InFlight.of(self.tasks, self.task_scans, self.task_peak, self.task_unread)

    def task_profile(self, root: str | None = None) -> Profile:
        """The task stacks: one line per distinct task stack, leaf ``[running]``, ``[ready]``
        or ``[waiting]``, counted in task-samples (under ``root`` if given)."""
        profile = Profile(start=self.start, end=self.end)
        for stack, count in self.tasks.items():
            profile.add(f"{root};{stack}" if root is not None else stack, count)
        return profile


@dataclass
class Recording:
    """The outcome of a one-shot recording."""

    counts: Tally
    target: Target
    rate_hz: float
    stats: SamplerStats
    exited: bool
    interrupted: bool
    elapsed: float
    #: Task scans per second asked for (0: none).
    task_rate_hz: float = 0.0
    #: Whether the target was paused for each read.
    blocking: bool = False
    #: The shortest stall reported (ms).
    stall_ms: float = defaults.STALL_MS
    #: The shortest slow request reported (ms).
    slow_ms: float = defaults.SLOW_MS
    #: What the kernel counted of the target when sampling began and ended (None: not read,
    #: the end's when the target exited).
    kernel_before: KernelReading | None = None
    kernel_after: KernelReading | None = None
    #: what became of it meanwhile: stopped, or another program (None: not watched)
    fate: Fate | None = None
    #: the signal that ended the recording early (SIGINT: Ctrl-C; SIGTERM), 0 when none did
    stopped_by: int = 0

    def fate_lines(self) -> list[str]:
        """What became of the target while it was sampled, if anything (``Fate.lines``)."""
        return self.fate.lines(self.elapsed) if self.fate else []

    def no_samples(self) -> str:
        """Why the recording holds no sample, in one line."""
        if said := self.fate_lines():
            return f"no samples: {said[0]}"
        if self.exited:
            return f"PID {self.target.pid} exited before a sample was taken"
        return "no samples"

    def cpu_spent(self) -> dict[str, CpuTime | None]:
        """What the event-loop threads (those whose stacks show a loop) and all threads spent
        on a CPU and waiting for one over the recording, by the kernel's own counters."""
        before = self.kernel_before.threads if self.kernel_before else {}
        after = self.kernel_after.threads if self.kernel_after else {}
        loop = self.counts.loop_threads()
        return {
            "loop threads": spent(before, after, loop) if loop else None,
            "all threads": spent(before, after),
        }

    def kernel_json(self) -> dict[str, Any]:
        """What the kernel counted over the recording, as ``stats --json`` gives it: the
        threads' seconds on a CPU and waiting for one, the cgroup's limit and throttling (None
        where unknown)."""
        spent_by = self.cpu_spent()
        before, after = self.kernel_before, self.kernel_after
        cgroup = None
        if (
            before
            and after
            and isinstance(before.cgroup, CgroupCpu)
            and isinstance(after.cgroup, CgroupCpu)
        ):
            span = after.cgroup.since(before.cgroup)
            cgroup = {
                "version": after.cgroup.version,
                "path": after.cgroup.path,
                "cpu_limit_cores": after.cgroup.cores,
                "periods": span.periods,
                "throttled_periods": span.throttled_periods,
                "throttled_share": round(span.share, 4),
                "throttled_s": round(span.seconds_lost, 3),
            }

        def time_of(spent: CpuTime | None) -> dict[str, float] | None:
            if spent is None:
                return None
            return {
                "on_cpu_s": round(spent.ran_s, 3),
                "waiting_s": round(spent.waited_s, 3),
                "waiting_share": round(spent.waited_share, 4),
            }

        return {
            "span_s": round(self.elapsed, 3),
            "all_threads": time_of(spent_by["all threads"]),
            "loop_threads": time_of(spent_by["loop threads"]),
            "cgroup": cgroup,
        }

    def cpu_lines(self) -> list[str]:
        """What ``record`` and ``stats`` say of the kernel's counters over the recording: the
        threads' time on a CPU and waiting for one, the cgroup's CPU limit and throttling."""
        lines = [cpu_time_line(self.cpu_spent(), self.elapsed)]
        before, after = self.kernel_before, self.kernel_after
        if before and after and before.cgroup is not None and after.cgroup is not None:
            lines.append(throttling_line(before.cgroup, after.cgroup))
        return [line for line in lines if line]


@dataclass(frozen=True)
class KernelReading:
    """What the kernel counts of a process at one instant: its threads' time on a CPU and
    waiting for one (``schedstat``), its cgroup's CPU limit and throttling (None once the
    process is gone)."""

    threads: Reading
    cgroup: CgroupCpu | CpuUnknown | None

    @classmethod
    def of(cls, pid: int) -> KernelReading:
        try:
            cgroup: CgroupCpu | CpuUnknown | None = probe_cpu(pid)
        except TargetGone:
            cgroup = None
        return cls(read_threads(pid), cgroup)


Progress = Callable[[float, "SamplerStats"], None]

#: How often a recording of a pre-fork group looks for workers that joined it (seconds): a
#: master replaces the workers that exit.
REGROUP_S = 1.0


@dataclass
class _Sampled:
    """One process of a recording while it runs: its sampler and what was read of it."""

    pid: int
    sampler: _native.Sampler
    cmdline: str
    started: int | None
    kernel_before: KernelReading
    throttle: ThrottleLog
    fate: Fate
    counts: Tally = field(default_factory=Tally)
    #: when its sampling began, and when it was seen to have ended (monotonic clock)
    begin: float = field(default_factory=time.monotonic)
    ended: float | None = None

    @classmethod
    def of(cls, pid: int, sampler: _native.Sampler) -> _Sampled:
        kernel_before = KernelReading.of(pid)
        throttle = ThrottleLog(bound=1_000_000)
        throttle.note(kernel_before.cgroup)
        return cls(
            pid,
            sampler,
            read_cmdline(pid),
            _native.process_start_time(pid),
            kernel_before,
            throttle,
            Fate.of(pid),
        )

    def poll(self) -> None:
        if self.ended is None and not self.sampler.running:
            self.ended = time.monotonic()
        if self.throttle.readings:
            self.throttle.read(self.pid)
        self.fate.poll()
        self.drain()

    def drain(self, flush: bool = False) -> None:
        for window in self.sampler.drain(flush=flush):
            self.counts.add(window_of(window))

    def recording(self, common: dict[str, Any]) -> Recording:
        """What was recorded of it, once its sampler has stopped: over its own span (from
        when it joined the recording to when it exited, or the recording ended)."""
        self.drain(flush=True)
        sampler, counts = self.sampler, self.counts
        kernel_after = KernelReading.of(self.pid) if not sampler.exited else None
        if kernel_after is not None:
            self.throttle.note(kernel_after.cgroup)
        counts.stall_list = self.throttle.mark(counts.stall_list)
        target = Target(
            pid=self.pid,
            cmdline=self.cmdline,
            python_version=sampler.python_version,
            start_time=self.started,
        )
        return Recording(
            counts=counts,
            target=target,
            stats=sampler.stats(),
            exited=sampler.exited,
            elapsed=(self.ended or time.monotonic()) - self.begin,
            kernel_before=self.kernel_before,
            kernel_after=kernel_after,
            fate=self.fate,
            **common,
        )


def record(pid: int, **options: Any) -> Recording:
    """Samples ``pid`` alone (``record_group``'s recording of one process)."""
    return record_group(pid, **options)[0]


def record_group(
    pid: int,
    *,
    duration: float | None,
    rate_hz: float = defaults.RATE_HZ,
    blocking: bool = False,
    progress: Progress | None = None,
    on_attach: Callable[[str], None] | None = None,
    poll_interval: float = 0.25,
    tasks_hz: float = 0.0,
    launched: Launched | None = None,
    stall_ms: float = defaults.STALL_MS,
    task_bound: int | None = None,
    slow_ms: float = defaults.SLOW_MS,
    group: bool = False,
    on_join: Callable[[int, str | None], None] | None = None,
    sampler: _native.Sampler | None = None,
) -> list[Recording]:
    """Samples ``pid`` for ``duration`` seconds (until Ctrl-C when None, or until it exits);
    with ``group``, every process of its pre-fork group too (a gunicorn master and its
    workers), each with a sampler of its own, and the workers that join it while it runs. One
    recording per process, ``pid``'s first.

    ``on_attach`` is told ``pid``'s Python version once sampling runs, ``on_join`` each other
    process sampled (its PID, or why it could not be: it exited, it cannot be traced). Ctrl-C
    ends the recording early and keeps what was sampled. ``tasks_hz`` > 0 scans the asyncio
    tasks too, at that rate (``Tally.task_profile``); stalls of ``stall_ms`` or more are kept
    (``Tally.stalls``), and with task scans requests in flight ``slow_ms`` or more
    (``Tally.slow_requests``); ``task_bound`` lowers a task scan's bound (tests). ``launched``:
    ``pid`` is a program sidecar just started, attached to once its interpreter can be read.
    ``sampler``: one already opened on ``pid`` (``open_sampler`` with these options), which
    has sampled since: a caller that attaches first takes its first sample before it imports
    this module; it is stopped when the recording ends, as one opened here is.
    """

    def attach(one: int) -> _native.Sampler:
        return open_sampler(
            one,
            rate_hz=rate_hz,
            blocking=blocking,
            tasks_hz=tasks_hz,
            stall_ms=stall_ms,
            task_bound=task_bound,
            slow_ms=slow_ms,
        )

    if sampler is not None:
        first = sampler
    else:
        first = launched.attach(lambda: attach(pid)) if launched is not None else attach(pid)
    sampled = [_Sampled.of(pid, first)]
    tried = {pid}
    begin = time.monotonic()
    regrouped = -REGROUP_S
    interrupted = False
    stopped_by = 0

    def join() -> None:
        for other in prefork_group(pid):
            if other in tried:
                continue
            tried.add(other)
            try:
                sampled.append(_Sampled.of(other, attach(other)))
            except SidecarError as err:
                if on_join is not None:
                    on_join(other, str(err))
                continue
            if on_join is not None:
                on_join(other, None)

    try:
        # told within: a Ctrl-C as soon as "sampling" is said ends the recording like any other
        if on_attach is not None:
            on_attach(first.python_version)
        while any(one.sampler.running for one in sampled):
            elapsed = time.monotonic() - begin
            if duration is not None and elapsed >= duration:
                break
            if group and elapsed - regrouped >= REGROUP_S:
                regrouped = elapsed
                join()
            wait = poll_interval
            if duration is not None:
                wait = min(wait, max(0.0, duration - elapsed))
            time.sleep(wait)
            for one in sampled:
                one.poll()
            if progress is not None:
                progress(time.monotonic() - begin, first.stats())
    except KeyboardInterrupt as interrupt:
        interrupted = True
        stopped_by = signal_of(interrupt)
    finally:
        for one in sampled:
            one.sampler.stop()
    common: dict[str, Any] = {
        "rate_hz": rate_hz,
        "interrupted": interrupted,
        "stopped_by": stopped_by,
        "task_rate_hz": tasks_hz,
        "blocking": blocking,
        "stall_ms": stall_ms,
        "slow_ms": slow_ms,
    }
    return [one.recording(common) for one in sampled]
