"""Stalls: each callback of an event loop that kept the loop from its poll for at least a
threshold (100 ms by default, asyncio's own ``slow_callback_duration``), as the sampler found
them in a loop thread's samples in time order (``sidecar._native.Stall``).

What each one was held by: the state most of its samples were in (busy, blocked, gil: waiting
for the GIL another thread held, or cpu_wait: runnable, waiting for a CPU the kernel gave to
something else; gc when most were in a garbage collection), and the code at fault, where
``classify.threads.stall_site`` puts it (of the frames above the loop's entry, the innermost
application frame, else the innermost framework frame, else the innermost; never the program's
entry below the loop): for a blocked stall the blocking call's, for a busy one the frame that
took most of its samples, for a gil stall the GIL holder's. Where two states have as many
samples, the first of busy, blocked, gil, cpu_wait names it and the others are said (``tied``).
The sampler's period is the resolution of a stall's length: it reads within a period of the
truth at either end.

Where the target's cgroup sets a CPU limit, a stall carries the throttling the cgroup counted
around it (``throttling``: ``sample.cgroup.ThrottleLog``, from readings taken about once a
second, so over the stall and up to a second either side, which it says).

Decoded once per stall, for ``record``, ``stats`` and ``serve`` alike; ``analyze.stalls``
sums them up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sidecar.classify.threads import holder_name, holder_site, stall_site
from sidecar.rules.tasks import is_request

if TYPE_CHECKING:
    from sidecar._native import Stall as NativeStall

#: The states a stall's samples are in, and the collector's share within them.
STALL_STATES = ("busy", "blocked", "gil", "cpu_wait")


@dataclass(frozen=True)
class Stall:
    """One stall of one loop thread."""

    #: its first sample's time (unix seconds) and its length: to the sample that ended it, or
    #: for one still running when sampling ended (``ongoing``), to its last sample
    start: float
    duration_s: float
    ongoing: bool
    thread_id: int
    thread: str
    samples: int
    #: seconds in each of busy / blocked / gil / cpu_wait, and in collections (within those)
    states: dict[str, float]
    #: the state most of its samples were in: busy, blocked, gil or cpu_wait; gc when most were
    #: taken in a collection (busy, collecting garbage)
    state: str
    #: the code that held the loop (``function (file:line)``); for a gil stall, the holder's
    site: str
    #: for a gil stall, the thread that held the GIL most of it
    holder: str | None
    #: the loop's callback: the frame of what the loop called (a task's coroutine, a handler)
    callback: str
    #: the asyncio task a task scan found running in it (``serve``, ``record --tasks``): its
    #: name, and whether it serves a request (``rules.tasks.is_request``); None when no scan
    #: fell in it
    task: str | None = None
    request: bool | None = None
    #: the other states with as many samples as ``state`` (in STALL_STATES' order)
    tied: tuple[str, ...] = ()
    #: what the cgroup's CPU limit throttled around it; None without a limit or a reading
    throttling: Throttled | None = None

    @property
    def end(self) -> float:
        return self.start + self.duration_s

    def to_json(self) -> dict[str, Any]:
        """The shape of ``stats --json`` and ``GET /api/stalls``."""
        return {
            "start": round(self.start, 3),
            "duration_s": round(self.duration_s, 3),
            "ongoing": self.ongoing,
            "thread": self.thread,
            "thread_id": self.thread_id,
            "samples": self.samples,
            "state": self.state,
            "states": {name: round(seconds, 3) for name, seconds in self.states.items()},
            "site": self.site,
            "holder": self.holder,
            "callback": self.callback,
            "task": None if self.task is None else {"name": self.task, "request": self.request},
            "tied": list(self.tied),
            "throttling": None if self.throttling is None else self.throttling.to_json(),
        }


@dataclass(frozen=True)
class Throttled:
    """The CFS throttling of a target's cgroup over a span of readings around a stall: from
    the last reading before it began to the first after it ended (``span_s`` long)."""

    periods: int
    throttled_periods: int
    seconds_lost: float
    span_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "periods": self.periods,
            "throttled_periods": self.throttled_periods,
            "seconds_lost": round(self.seconds_lost, 3),
            "span_s": round(self.span_s, 3),
        }

    def line(self) -> str:
        """``the cgroup throttled 5 of 6 periods, 0.41 s lost, over 1.3 s around it``."""
        if not self.throttled_periods:
            return f"the cgroup was not throttled in {self.periods} periods around it"
        return (
            f"the cgroup throttled {self.throttled_periods} of {self.periods} periods, "
            f"{self.seconds_lost:.2f} s lost, over {self.span_s:.1f} s around it"
        )


def throttle_row(throttled: Throttled | None) -> tuple[int | float | None, ...]:
    """``throttled`` as the store's four columns (``store.schema.STALL_THROTTLE``)."""
    if throttled is None:
        return (None, None, None, None)
    return (
        throttled.periods,
        throttled.throttled_periods,
        throttled.seconds_lost,
        throttled.span_s,
    )


def throttled_of(row: Sequence[Any]) -> Throttled | None:
    """The store's four columns back as a ``Throttled`` (None where any is NULL)."""
    periods, throttled, lost, span = row
    if periods is None or throttled is None or lost is None or span is None:
        return None
    return Throttled(int(periods), int(throttled), float(lost), float(span))


def _most(counts: Counter[str]) -> str:
    """The most counted key (the first met of those tied); empty for none."""
    return counts.most_common(1)[0][0] if counts else ""


def stall_of(native: NativeStall, names: Mapping[int, str]) -> Stall:
    """A sampler's stall with what held it worked out; ``names`` are thread names by id."""
    samples = max(int(native["samples"]), 1)
    duration = max(float(native["end"]) - float(native["start"]), 0.0)
    by_state: Counter[str] = Counter()
    sites: dict[str, Counter[str]] = {state: Counter() for state in STALL_STATES}
    for state, stack, count in native["stacks"]:
        by_state[state] += count
        sites[state][stall_site(stack)] += count
    state = max(STALL_STATES, key=lambda s: by_state[s])
    tied = tuple(s for s in STALL_STATES if s != state and by_state[s] == by_state[state])
    holder = None
    site = _most(sites[state])
    if 2 * int(native["gc"]) > samples:
        state = "gc"  # a collection is busy time, set off by the code at `site`
    if state == "gil":
        holders: Counter[tuple[int, str]] = Counter()
        for tid, stack, count in native["holders"]:
            holders[tid, holder_site(stack)] += count
        if holders:
            (tid, site), _ = holders.most_common(1)[0]
            holder = holder_name(tid, names)
    states = {name: duration * by_state[name] / samples for name in STALL_STATES}
    states["gc"] = duration * int(native["gc"]) / samples
    tid = int(native["thread_id"])
    task = native.get("task")
    return Stall(
        start=float(native["start"]),
        duration_s=duration,
        ongoing=bool(native["ongoing"]),
        thread_id=tid,
        thread=names.get(tid) or f"thread {tid}",
        samples=int(native["samples"]),
        states=states,
        state=state,
        site=site,
        holder=holder,
        callback=native["callback"],
        task=None if task is None else task[0],
        request=None if task is None else is_request(task[1]),
        tied=tied,
    )
