"""Sampling sessions: drive the native sampler and collect what it aggregates.

The native ``Sampler`` reads stacks on its own thread and hands over windows of unique stacks;
this module turns them into classified, folded stacks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sidecar import _native, defaults
from sidecar.classify import classify, leaf_for, state_counts
from sidecar.discover import read_cmdline
from sidecar.errors import native_errors
from sidecar.pprof import Sample
from sidecar.profile import Profile, Target

if TYPE_CHECKING:
    from sidecar._native import SamplerStats, Window


@dataclass(frozen=True)
class ClassifiedWindow:
    """A sampler's window decoded once, for ``record`` and ``serve`` alike: its rows with
    their state, summed per (folded stack, thread id, state)."""

    start: float
    end: float
    ticks: int
    #: (folded stack, thread id, state, samples): the store's rows
    rows: list[tuple[str, int, str, int]]
    thread_names: dict[int, str]
    #: busy / idle / blocked samples of every thread
    states: dict[str, int]


def classify_window(window: Window) -> ClassifiedWindow:
    """Each row of ``window`` classified busy, idle or blocked (once per unique stack)."""
    counts: dict[tuple[str, int, str], int] = {}
    states = {"busy": 0, "idle": 0, "blocked": 0}
    names: dict[int, str] = {}
    for row in window["stacks"]:
        state = classify(row.stack, row.on_cpu)
        at = (row.stack, row.thread_id, state)
        counts[at] = counts.get(at, 0) + row.count
        states[state] += row.count
        if row.thread_name:
            names[row.thread_id] = row.thread_name
    return ClassifiedWindow(
        start=float(window["start"]),
        end=float(window["end"]),
        ticks=int(window["samples"]),
        rows=[(stack, tid, state, count) for (stack, tid, state), count in counts.items()],
        thread_names=names,
        states=states,
    )


@dataclass(frozen=True)
class SampleKey:
    """One thread's stack in one state, the unit that windows count."""

    thread_id: int
    state: str
    stack: str


@dataclass
class Counts:
    """Samples per unique stack over a span of time, plus the thread names seen."""

    stacks: dict[SampleKey, int] = field(default_factory=dict)
    thread_names: dict[int, str] = field(default_factory=dict)
    #: task stacks with task-samples, and the task scans that counted them
    tasks: dict[str, int] = field(default_factory=dict)
    task_scans: int = 0
    #: tasks the scans found past their bound and did not read, summed over the scans
    task_unread: int = 0
    #: the most tasks in flight of one window ((its task-samples + unread) / its scans)
    task_peak: float = 0.0
    ticks: int = 0
    start: float | None = None
    end: float | None = None

    def add_window(self, window: Window) -> None:
        classified = classify_window(window)
        self.ticks += classified.ticks
        self.start = classified.start if self.start is None else min(self.start, classified.start)
        self.end = classified.end if self.end is None else max(self.end, classified.end)
        for stack, thread_id, state, count in classified.rows:
            key = SampleKey(thread_id, state, stack)
            self.stacks[key] = self.stacks.get(key, 0) + count
        self.thread_names.update(classified.thread_names)
        for stack, count in window.get("tasks", ()):
            self.tasks[stack] = self.tasks.get(stack, 0) + count
        scans = int(window.get("task_scans", 0))
        self.task_scans += scans
        unread = int(window.get("task_unread", 0))
        self.task_unread += unread
        if scans:
            read = sum(count for _, count in window.get("tasks", ()))
            in_flight = (read + unread) / scans
            self.task_peak = max(self.task_peak, in_flight)

    def state_counts(self) -> dict[str, int]:
        """busy / idle / blocked samples of the loop threads (all threads if none runs one)."""
        return state_counts(self.to_profile().stacks)

    def to_profile(self, *, cpu_only: bool = False, threads: bool = False) -> Profile:
        """Folded stacks with [idle]/[blocked] leaves (dropped with ``cpu_only``)."""
        profile = Profile(start=self.start, end=self.end)
        for sample in self.samples(cpu_only=cpu_only, threads=threads):
            profile.add(sample.stack, sample.count)
        profile.marked = not cpu_only
        return profile

    def samples(self, *, cpu_only: bool = False, threads: bool = False) -> list[Sample]:
        """Each counted stack with its state leaf, its state and its thread's name."""
        out: list[Sample] = []
        for key, count in self.stacks.items():
            state = key.state
            if cpu_only and state != "busy":
                continue
            parts = [key.stack]
            name = self.thread_names.get(key.thread_id, "")
            if threads:
                parts.insert(0, f"thread ({name} {key.thread_id})".replace(";", ":"))
            leaf = leaf_for(state)
            if leaf is not None:
                parts.append(leaf)
            out.append(Sample(";".join(parts), state, count, name))
        return out

    def task_profile(self) -> Profile:
        """The task stacks: one line per distinct task stack, leaf ``[running]``, ``[ready]``
        or ``[waiting]``, counted in task-samples."""
        profile = Profile(start=self.start, end=self.end)
        for stack, count in self.tasks.items():
            profile.add(stack, count)
        return profile


def on_cpu_source(on_cpu: str) -> str:
    """Where on-CPU states come from, from the sampler's ``on_cpu`` stat, to follow "on-CPU
    state": "from the OS", "estimated (why)", or "not read yet"."""
    if on_cpu == "os":
        return "from the OS"
    return on_cpu or "not read yet"


#: The share of ticks without a sample (every read of them torn) that record's summary and
#: serve's log warn of.
TORN_SHARE = 0.05


def torn_note(errors: int, ticks: int, blocking: bool) -> str | None:
    """What to say of ``errors`` ticks of ``ticks`` that read no sample, if anything: a target
    that changes its stacks faster than a read tears every read of some ticks (each is read
    again twice), so what it ran then is under-counted; read paused, it cannot tear."""
    if blocking or not ticks or errors < TORN_SHARE * ticks:
        return None
    return (
        f"{errors / ticks:.1%} of {ticks:,} ticks read no sample: the target changed its stacks "
        "under each read and the reads again, so what it ran then is under-counted; "
        "--blocking pauses it for each read"
    )


def open_sampler(
    pid: int,
    *,
    rate_hz: float = defaults.RATE_HZ,
    blocking: bool = False,
    window: float = defaults.SAMPLER_WINDOW_S,
    clock: Literal["own", "shared"] = "own",
    tasks_hz: float = 0.0,
) -> _native.Sampler:
    """Attaches to ``pid``; native errors become sidecar's domain errors. ``clock="shared"``
    ticks it on the one sampling thread of every sampler that asks for it (``serve``);
    ``tasks_hz`` > 0 scans its asyncio tasks too, at that rate."""
    with native_errors():
        return _native.Sampler(
            pid, rate_hz=rate_hz, blocking=blocking, window=window, clock=clock, tasks_hz=tasks_hz
        )


@dataclass
class Recording:
    """The outcome of a one-shot recording."""

    counts: Counts
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


Progress = Callable[[float, "SamplerStats"], None]


def record(
    pid: int,
    *,
    duration: float | None,
    rate_hz: float = defaults.RATE_HZ,
    blocking: bool = False,
    progress: Progress | None = None,
    on_attach: Callable[[str], None] | None = None,
    poll_interval: float = 0.25,
    tasks_hz: float = 0.0,
) -> Recording:
    """Samples ``pid`` for ``duration`` seconds (until Ctrl-C when None, or until it exits).

    ``on_attach`` is told the target's Python version once sampling runs. Ctrl-C ends the
    recording early and keeps what was sampled. ``tasks_hz`` > 0 scans the asyncio tasks
    too, at that rate (``Counts.task_profile``).
    """
    cmdline = read_cmdline(pid)
    started = _native.process_start_time(pid)
    sampler = open_sampler(pid, rate_hz=rate_hz, blocking=blocking, tasks_hz=tasks_hz)
    if on_attach is not None:
        on_attach(sampler.python_version)
    counts = Counts()
    begin = time.monotonic()
    interrupted = False
    try:
        while sampler.running:
            elapsed = time.monotonic() - begin
            if duration is not None and elapsed >= duration:
                break
            wait = poll_interval
            if duration is not None:
                wait = min(wait, max(0.0, duration - elapsed))
            time.sleep(wait)
            for window in sampler.drain():
                counts.add_window(window)
            if progress is not None:
                progress(time.monotonic() - begin, sampler.stats())
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sampler.stop()
    for window in sampler.drain(flush=True):
        counts.add_window(window)
    stats = sampler.stats()
    target = Target(
        pid=pid, cmdline=cmdline, python_version=sampler.python_version, start_time=started
    )
    return Recording(
        counts=counts,
        target=target,
        rate_hz=rate_hz,
        stats=stats,
        exited=sampler.exited,
        interrupted=interrupted,
        elapsed=time.monotonic() - begin,
        task_rate_hz=tasks_hz,
        blocking=blocking,
    )
