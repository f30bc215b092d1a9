"""Opening the native sampler, and what its stats say about the reads: where on-CPU states
came from, and whether too many ticks read no sample."""

from __future__ import annotations

from typing import Literal

from sidecar import _native, defaults
from sidecar.errors import native_errors
from sidecar.sample.fate import refuse_stopped, said_if_stopped


def on_cpu_source(on_cpu: str) -> str:
    """Where on-CPU states come from, from the sampler's ``on_cpu`` stat, to follow "on-CPU
    state": "from the OS", "estimated (why)", or "not read yet"."""
    if on_cpu == "os":
        return "from the OS"
    return on_cpu or "not read yet"


def clock_words(clock: str) -> str:
    """Where a sampler ticks, from its ``clock`` ("own", "shared", or "own (moved off the
    shared clock: why)"), in words that follow "ticks on"."""
    for name, words in (("own", "a thread of its own"), ("shared", "the shared clock")):
        if clock == name or clock.startswith(name + " "):
            return words + clock[len(name) :]
    return clock


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


def errors_note(errors: int, ticks: int, blocking: bool, last: str) -> str | None:
    """Ticks that read no sample, put in proportion, when ``torn_note`` has nothing to say:
    a few torn reads of a busy target are expected, and each costs one sample."""
    if not errors or torn_note(errors, ticks, blocking):
        return None
    return (
        f"{errors:,} of {ticks:,} ticks could not be read ({errors / ticks:.1%}), each a sample "
        "missed: reads torn by stacks that changed under them are expected on a busy target "
        f"(last: {last})"
    )


def open_sampler(
    pid: int,
    *,
    rate_hz: float = defaults.RATE_HZ,
    blocking: bool = False,
    window: float = defaults.SAMPLER_WINDOW_S,
    clock: Literal["own", "shared"] = "own",
    tasks_hz: float = 0.0,
    stall_ms: float = defaults.STALL_MS,
    task_bound: int | None = None,
    task_cache: bool = True,
    slow_ms: float = defaults.SLOW_MS,
) -> _native.Sampler:
    """Attaches to ``pid``; native errors become sidecar's domain errors. ``clock="shared"``
    ticks it on the one sampling thread of every sampler that asks for it (``serve``);
    ``tasks_hz`` > 0 scans its asyncio tasks too, at that rate; ``stall_ms`` is the shortest
    stall of its event loops reported, ``slow_ms`` the shortest slow request (of the task
    scans). ``task_bound`` lowers the most tasks a scan reads
    (20,000) for tests; ``task_cache=False`` reads every await chain again at each scan (for
    benchmarks)."""
    if blocking:
        refuse_stopped(pid)
    with said_if_stopped(pid), native_errors(pid):
        return _native.Sampler(
            pid,
            rate_hz=rate_hz,
            blocking=blocking,
            window=window,
            clock=clock,
            tasks_hz=tasks_hz,
            stall_ms=stall_ms,
            task_bound=task_bound,
            task_cache=task_cache,
            slow_ms=slow_ms,
        )
