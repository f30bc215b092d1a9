"""Reading the stalls of the event loops from the store (``stalls``: one row per stall, with the
window it ended in), and the stalls past the sampler's bound that no row keeps
(``windows.stalls_dropped``).

A range holds the stalls that overlap it: one that began before the range and ran into it is
in, as it held the loop then.
"""

from __future__ import annotations

from typing import Any

from sidecar.classify.stalls import STALL_STATES, Stall, throttled_of
from sidecar.store.query import MAX_LISTED, Range, Reader
from sidecar.store.schema import STALL_SECONDS, STALL_THROTTLE

#: The most stalls one answer lists (``limit``'s bound).
MAX_STALLS = MAX_LISTED
_COLUMNS = (
    "s.start, s.duration, s.ongoing, s.thread_id, s.thread, s.samples, s.state, "
    + ", ".join(f"s.{name}" for name in STALL_SECONDS)
    + ", s.site, s.holder, s.callback, s.task, s.request, s.tied, "
    + ", ".join(f"s.{name}" for name in STALL_THROTTLE)
    + ", s.target_id, p.pid"
)


def _stall(row: tuple[Any, ...]) -> Stall:
    start, duration, ongoing, tid, thread, samples, state, *rest = row
    seconds = rest[: len(STALL_SECONDS)]
    site, holder, callback, task, request, tied, *throttle = rest[len(STALL_SECONDS) : -2]
    return Stall(
        start=float(start),
        duration_s=float(duration),
        ongoing=bool(ongoing),
        thread_id=int(tid),
        thread=str(thread),
        samples=int(samples),
        states=dict(zip(STALL_SECONDS, map(float, seconds), strict=True)),
        state=str(state),
        site=str(site),
        holder=holder,
        callback=str(callback),
        task=task,
        request=None if request is None else bool(request),
        tied=tuple(name for name in str(tied).split(",") if name in STALL_STATES),
        throttling=throttled_of(throttle),
    )


class StallReader:
    """The stalls' side of a ``Reader``: same database, same connections."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def stalls(
        self,
        target: int | None,
        span: Range,
        *,
        min_ms: float = 0.0,
        limit: int = 1000,
        longest: bool = False,
    ) -> tuple[list[dict[str, Any]], int]:
        """The stalls of one target (or all) overlapping ``span``, at least ``min_ms`` long, at
        most ``limit``: the oldest, oldest first, or with ``longest`` the longest, longest first;
        each with its target and PID. And how many matched in all."""
        where = "s.start < ? AND s.start + s.duration > ? AND s.duration >= ?"
        params: tuple[Any, ...] = (span.end, span.start, min_ms / 1000)
        if target is not None:
            self.reader.target(target)  # an unknown target is an error, not "no stalls"
            where += " AND s.target_id = ?"
            params += (target,)
        base = f"FROM stalls s JOIN processes p ON p.id = s.process_id WHERE {where}"
        order = "s.duration DESC, s.start" if longest else "s.start"
        rows, total = self.reader.listed(_COLUMNS, base, params, order, limit)
        out = []
        for row in rows:
            entry = {"target": int(row[-2]), "pid": int(row[-1]), **_stall(row).to_json()}
            out.append(entry)
        return out, total

    def dropped(self, target: int | None, span: Range) -> int:
        """Stalls of the range's windows past the sampler's bound (100 a window), not kept."""
        return self.reader.window_sum("stalls_dropped", target, span)
