"""Reading the asyncio tasks from the store: task profiles, tasks in flight over time, and what
the stats block of a target is made of.

The store keeps, per window and process, the task-samples of each task stack and state, and in
``windows`` the scans that counted them with their sums per state, of all tasks and of
requests' tasks (``sidecar.rules.tasks.is_request``), and the tasks the scans found past their
bound and did not read (``task_unread``). Tasks in flight over a span = (task-samples +
unread) / scans, pooled per process (a target runs one process at a time) and summed over the
processes that run side by side (all targets). A range whose processes were never scanned (``serve
--task-rate 0``, a Python before 3.11) has no scans, and a question about its tasks is refused
(``NoTaskScans``) rather than answered with an empty profile that would read as "no tasks".
"""

from __future__ import annotations

import math
from typing import Any

from sidecar.classify.tasks import InFlight
from sidecar.errors import SidecarError
from sidecar.profile import Profile, Target
from sidecar.rules.tasks import STATES, is_request, task_leaf
from sidecar.store import counts
from sidecar.store.query import MAX_BUCKETS, QueryError, Range, Reader, StoreUnavailable
from sidecar.store.schema import COUNT_TABLES, TASK_COLUMNS, TASK_STATE_CODES, TASK_STATE_NAMES

#: Which tasks a task profile keeps.
WHICH = ("all", "requests", "background")
_SUMS = ", ".join(f"SUM({column})" for column, _, _ in TASK_COLUMNS)


class NoTaskScans(SidecarError):
    """The asyncio tasks of this target were not scanned in this range."""


def _means(scans: int, sums: tuple[Any, ...]) -> tuple[dict[str, float], float]:
    """(tasks in flight per state, requests' tasks in flight) of one span's sums."""
    values = dict(zip((column for column, _, _ in TASK_COLUMNS), sums, strict=True))
    states = {state: int(values[f"tasks_{state}"] or 0) / scans for state in STATES}
    requests = sum(int(values[f"requests_{state}"] or 0) for state in STATES) / scans
    return states, requests


def _of_kind(scans: int, sums: tuple[Any, ...], which: str) -> dict[str, float]:
    """Tasks in flight per state of requests' (or background) tasks of one span's sums."""
    values = dict(zip((column for column, _, _ in TASK_COLUMNS), sums, strict=True))
    out: dict[str, float] = {}
    for state in STATES:
        requests = int(values[f"requests_{state}"] or 0)
        part = requests if which == "requests" else int(values[f"tasks_{state}"] or 0) - requests
        out[state] = max(0, part) / scans
    return out


class TaskReader:
    """The tasks' side of a ``Reader``: same database, same connections."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def _where(self, target: int | None, span: Range) -> tuple[str, tuple[Any, ...]]:
        if target is None:
            return "window >= ? AND window < ?", (span.start, span.end)
        self.reader.target(target)  # an unknown target is told so
        return "window >= ? AND window < ? AND target_id = ?", (span.start, span.end, target)

    def require_scans(self, target: int | None, span: Range) -> int:
        """The task scans of the range; none is ``NoTaskScans``, saying why it may be."""
        where, params = self._where(target, span)
        rows = self.reader.rows(
            f"SELECT COALESCE(SUM(task_scans), 0) FROM windows WHERE {where}", params
        )
        scans = int(rows[0][0])
        if scans == 0:
            who = f"target {target}" if target is not None else "any target"
            raise NoTaskScans(
                f"the asyncio tasks of {who} were not scanned in this range (serve "
                "--task-rate 0, or CPython before 3.11): ask for kind=threads"
            )
        return scans

    def profile(
        self,
        target: int | None,
        span: Range,
        states: set[str] | None = None,
        which: str = "all",
    ) -> Profile:
        """Folded task stacks (leaf ``[running]``, ``[ready]`` or ``[waiting]``) of one target
        (or all) over a range, counted in task-samples; ``which`` keeps requests' or
        background tasks only."""
        if which not in WHICH:
            raise QueryError(f"unknown tasks {which!r}; use all, requests or background")
        unknown = (states or set()) - set(STATES)
        if unknown:
            raise QueryError(f"unknown task state {sorted(unknown)[0]!r}; use {', '.join(STATES)}")
        codes = {TASK_STATE_CODES[s] for s in states} if states else None
        info = self.reader.target(target) if target is not None else None
        self.require_scans(target, span)
        totals: dict[tuple[int, int], int] = {}
        with self.reader.snapshot():  # the counts and their stacks' nodes as of one instant
            try:
                for _, blob in self.reader.blobs(target, span, COUNT_TABLES[1]):
                    for stack, _, state, count in counts.unpack(blob):
                        if codes is None or state in codes:
                            totals[(stack, state)] = totals.get((stack, state), 0) + count
            except counts.CountsError as err:
                raise StoreUnavailable(f"the database is damaged: {err}") from err
            texts = self.reader.stack_texts({stack for stack, _ in totals})
        profile = Profile(start=float(span.start), end=float(span.end))
        for (stack, state), count in totals.items():
            text = texts[stack]
            if which != "all" and is_request(text) != (which == "requests"):
                continue
            profile.add(f"{text};{task_leaf(TASK_STATE_NAMES[state])}", count)
        if info is not None:
            profile.target = Target(
                pid=info["pid"], cmdline=info["cmdline"], python_version=info["python_version"]
            )
        return profile

    def in_flight(self, target: int, span: Range) -> InFlight:
        """Tasks in flight of one target over a range (``NoTaskScans`` without scans)."""
        scans = self.require_scans(target, span)
        where, params = self._where(target, span)
        (row,) = self.reader.rows(
            f"SELECT {_SUMS}, SUM(task_unread) FROM windows WHERE {where}", params
        )
        states, requests = _means(scans, tuple(row[:-1]))
        unread = int(row[-1] or 0) / scans
        peak = self.reader.rows(
            "SELECT MAX(total) FROM (SELECT 1.0 * ("
            + " + ".join((*(f"SUM(tasks_{state})" for state in STATES), "SUM(task_unread)"))
            + f") / SUM(task_scans) AS total FROM windows WHERE {where} "
            "GROUP BY window HAVING SUM(task_scans) > 0)",
            params,
        )
        return InFlight(
            scans,
            sum(states.values()) + unread,
            float(peak[0][0] or 0.0),
            states,
            requests,
            unread,
        )

    def timeline(
        self, target: int | None, span: Range, step: int | None = None, which: str = "all"
    ) -> dict[str, Any]:
        """Mean tasks in flight per bucket of ``step`` seconds: by state (running, ready,
        waiting; of requests' or background tasks only with ``which``), by kind (requests,
        background), and those past the scans' bound, not read (``unread``: of no state nor
        kind, whatever ``which``); buckets without scans are left out."""
        if which not in WHICH:
            raise QueryError(f"unknown tasks {which!r}; use all, requests or background")
        if step is None:
            step = max(
                self.reader.window,
                (span.end - span.start) // 300 // self.reader.window * self.reader.window,
            )
        if (span.end - span.start) / step > MAX_BUCKETS:
            raise QueryError(
                f"too many buckets: use a 'step' of at least "
                f"{math.ceil((span.end - span.start) / MAX_BUCKETS)} seconds"
            )
        self.require_scans(target, span)
        where, params = self._where(target, span)
        rows = self.reader.rows(
            f"SELECT window / ? * ? AS bucket, SUM(task_scans), SUM(task_unread), {_SUMS} "
            "FROM windows "
            f"WHERE {where} GROUP BY bucket, process_id HAVING SUM(task_scans) > 0 "
            "ORDER BY bucket",
            (step, step, *params),
        )
        buckets: dict[int, dict[str, float]] = {}
        for bucket, scans, unread, *sums in rows:
            states, requests = _means(int(scans), tuple(sums))
            total = sum(states.values())
            if which != "all":
                states = _of_kind(int(scans), tuple(sums), which)
            entry = buckets.setdefault(
                int(bucket), dict.fromkeys((*STATES, "requests", "background", "unread"), 0.0)
            )
            entry["unread"] += int(unread or 0) / int(scans)
            for state, mean in states.items():
                entry[state] += mean
            entry["requests"] += requests
            entry["background"] += max(0.0, total - requests)
        return {
            "from": span.start,
            "to": span.end,
            "step": step,
            "kind": "tasks",
            "tasks": which,
            "buckets": [
                {"t": t, **{k: round(v, 3) for k, v in sums.items()}}
                for t, sums in sorted(buckets.items())
            ],
        }
