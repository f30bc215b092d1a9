"""Reading the store: targets, timelines and Profiles for any target and time range.

Readers never write: each thread opens its own read-only connection, so queries run beside the
writer (WAL) without blocking it. Ranges are aligned to the store's windows.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.errors import SidecarError
from sidecar.profile import Profile, Target
from sidecar.rules.frames import STATES, leaf_for
from sidecar.store import counts
from sidecar.store.schema import (
    COUNT_TABLES,
    HOLDER_TABLES,
    HOUR,
    STATE_CODES,
    STATE_NAMES,
    SUM_COLUMNS,
)

MAX_BUCKETS = 2000
#: Stacks whose text one query rebuilds (``Reader.stack_texts``).
TEXT_BATCH = 256


class QueryError(SidecarError):
    """A query asks for something that does not exist or makes no sense."""


class UnknownTarget(QueryError):
    """No target has this id."""


class StoreUnavailable(SidecarError):
    """The database cannot be read right now (missing, being started anew, damaged, busy)."""


@dataclass(frozen=True)
class Range:
    """A half-open time range [start, end) in unix seconds, aligned to windows."""

    start: int
    end: int

    @classmethod
    def aligned(cls, start: float | None, end: float | None, window: int) -> Range:
        """Defaults to the last hour; the start rounds down and the end up to whole windows."""
        now = time.time()
        end_f = now if end is None else end
        start_f = end_f - 3600 if start is None else start
        for value, name in ((end_f, "to"), (start_f, "from")):  # `from` defaults from `to`
            if not math.isfinite(value) or not 0 <= value < 1e11:
                raise QueryError(f"'{name}' must be a unix time in seconds, not {value}")
        if start_f >= end_f:
            raise QueryError(f"empty time range: from {start_f} is not before to {end_f}")
        return cls(int(start_f // window * window), int(math.ceil(end_f / window) * window))


#: The most events (stalls, slow requests) one answer lists.
MAX_LISTED = 10_000


def _gaps(span: Range, hours: list[int]) -> list[tuple[int, int]]:
    """The parts of the range not covered by the given whole hours."""
    out: list[tuple[int, int]] = []
    cursor = span.start
    for hour in hours:
        if hour > cursor:
            out.append((cursor, hour))
        cursor = max(cursor, hour + HOUR)
    if cursor < span.end:
        out.append((cursor, span.end))
    return out


class Reader:
    """Read-only access to one database, usable from many threads."""

    def __init__(self, path: str | Path, window: int = 10) -> None:
        self.path = Path(path)
        self.window = window
        self._local = threading.local()

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection to the file now at the path: a database deleted, replaced
        or started anew by the writer is followed, never read from a stale open file."""
        try:
            info = os.stat(self.path)
        except OSError as err:
            raise StoreUnavailable(
                f"the database {self.path} is not there ({err.strerror})"
            ) from err
        file_id = (info.st_dev, info.st_ino)
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._local.file_id != file_id:
            conn.close()
            conn = None
        if conn is None:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 5000")
            self._local.conn = conn
            self._local.file_id = file_id
        return conn

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """The reads inside see one state of the database (a read transaction): a range's
        counts and the stacks they name together, never a retention or downsampling pass
        between them (its nodes then gone: read as a damaged file). Nested, the outer one."""
        conn = self._conn()
        if conn.in_transaction:
            yield
            return
        try:
            conn.execute("BEGIN")
        except sqlite3.Error as err:
            raise StoreUnavailable(f"the database cannot be read: {err}") from err
        try:
            yield
        finally:
            if conn.in_transaction:
                conn.rollback()  # it wrote nothing

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self._conn().execute(sql, params).fetchall())
        except sqlite3.Error as err:
            raise StoreUnavailable(f"the database cannot be read: {err}") from err

    def listed(
        self, columns: str, base: str, params: tuple[Any, ...], order: str, limit: int
    ) -> tuple[list[tuple[Any, ...]], int]:
        """The rows of ``SELECT columns base`` in ``order``, at most ``limit`` (1 to
        ``MAX_LISTED``), and how many ``base`` matched in all: the events' lists (stalls, slow
        requests)."""
        if not 1 <= limit <= MAX_LISTED:
            raise QueryError(f"'limit' must be between 1 and {MAX_LISTED}, not {limit}")
        ((total,),) = self.rows(f"SELECT COUNT(*) {base}", params)
        rows = self.rows(f"SELECT {columns} {base} ORDER BY {order} LIMIT ?", (*params, limit))
        return rows, int(total)

    def window_sum(self, column: str, target: int | None, span: Range) -> int:
        """The sum of ``windows.column`` over the range's windows, of one target (or all): the
        events the sampler counted but did not keep."""
        where, params = ("AND target_id = ?", (target,)) if target is not None else ("", ())
        ((found,),) = self.rows(
            f"SELECT COALESCE(SUM({column}), 0) FROM windows WHERE window >= ? AND window < ? "
            f"{where}",
            (span.start, span.end, *params),
        )
        return int(found)

    def targets(self) -> list[dict[str, Any]]:
        """Every logical target with its newest process and sample count."""
        rows = self.rows(
            """
            SELECT t.id, t.group_key, t.cmdline, t.framework, t.loop, t.first_seen, t.last_seen,
                   (SELECT p.pid FROM processes p WHERE p.target_id = t.id
                     ORDER BY p.alive DESC, p.first_seen DESC LIMIT 1),
                   (SELECT MAX(p.alive) FROM processes p WHERE p.target_id = t.id),
                   (SELECT p.error FROM processes p WHERE p.target_id = t.id
                     ORDER BY p.last_seen DESC LIMIT 1),
                   (SELECT p.python_version FROM processes p WHERE p.target_id = t.id
                     ORDER BY p.first_seen DESC LIMIT 1),
                   (SELECT COALESCE(SUM(w.ticks), 0) FROM windows w WHERE w.target_id = t.id),
                   (SELECT COUNT(*) FROM processes p WHERE p.target_id = t.id),
                   (SELECT p.start_time FROM processes p WHERE p.target_id = t.id
                     ORDER BY p.alive DESC, p.first_seen DESC LIMIT 1),
                   t.role
            FROM targets t ORDER BY t.id
            """
        )
        return [
            {
                "id": r[0],
                "group": r[1],
                "cmdline": r[2],
                "framework": r[3],
                "loop": r[4],
                "first_seen": r[5],
                "last_seen": r[6],
                "pid": r[7],
                "alive": bool(r[8]),
                "error": r[9],
                "python_version": r[10],
                "samples": r[11],
                "processes": r[12],
                "start_time": r[13],
                "role": r[14],
            }
            for r in rows
        ]

    def target(self, target_id: int) -> dict[str, Any]:
        for row in self.targets():
            if row["id"] == target_id:
                return row
        raise UnknownTarget(f"no target with id {target_id}")

    def _threads(self, thread: str | None) -> Callable[[int], set[int]] | None:
        """The thread filter: the wanted thread ids of a process, given by id or by name."""
        if not thread:
            return None
        if thread.isdigit():
            ids = {int(thread)}
            return lambda process_id: ids
        named: dict[int, set[int]] = {}
        for process_id, thread_id in self.rows(
            "SELECT process_id, thread_id FROM threads WHERE name = ?", (thread,)
        ):
            named.setdefault(int(process_id), set()).add(int(thread_id))
        return lambda process_id: named.get(process_id, set())

    def _states(self, states: set[str] | None) -> set[int] | None:
        if states is None:
            return None
        unknown = states - set(STATES)
        if unknown:
            raise QueryError(f"unknown state {sorted(unknown)[0]!r}; use {', '.join(STATES)}")
        return {STATE_CODES[s] for s in states}

    def covering(
        self, columns: str, target: int | None, span: Range, tables: tuple[str, str]
    ) -> list[tuple[Any, ...]]:
        """``columns`` of the rows covering the range, of one target or all: whole hours
        rolled up come from the hours' table of ``tables``, the rest from the windows'."""
        windows, hour_table = tables
        where, params = ("target_id = ?", (target,)) if target is not None else ("1", ())
        hours = self.rolled_hours(span)
        pieces, values = [], []
        for start, end in _gaps(span, hours):
            pieces.append(
                f"SELECT {columns} FROM {windows} WHERE window >= ? AND window < ? AND {where}"
            )
            values += [start, end, *params]
        if hours:
            pieces.append(
                f"SELECT {columns} FROM {hour_table} WHERE hour >= ? AND hour <= ? AND {where}"
            )
            values += [hours[0], hours[-1], *params]
        if not pieces:
            return []
        return self.rows(" UNION ALL ".join(pieces), tuple(values))

    def blobs(
        self, target: int | None, span: Range, tables: tuple[str, str] = COUNT_TABLES[0]
    ) -> list[tuple[int, bytes]]:
        """(process id, packed counts) covering the range: whole hours rolled up come from
        the hours' table (``hour_counts``), the rest from the windows' (``window_counts``);
        ``tables`` names another pair (the tasks': ``COUNT_TABLES[1]``)."""
        rows = self.covering("process_id, counts", target, span, tables)
        return [(int(process), blob) for process, blob in rows]

    def gil_holders(self, target: int | None, span: Range) -> dict[tuple[str, str], int]:
        """Samples of the event-loop threads waiting for the GIL over a range, by (name of the
        thread that held it, where it was: ``function (file:line)`` or ""), for
        ``analyze(..., holders=...)``. Samples with no holder (the GIL being handed over) are
        left out; a holder the sampler had no name for is ``thread ID``."""
        found: dict[tuple[int, str, int], int] = {}
        for holder, name, site, samples in self.covering(
            "holder, thread, site, samples", target, span, HOLDER_TABLES
        ):
            if holder:
                key = (int(holder), str(name), int(site))
                found[key] = found.get(key, 0) + int(samples)
        sites = {site for _, _, site in found if site}
        texts = dict(
            self.rows(
                "SELECT id, text FROM frames WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted(sites)),),
            )
            if sites
            else []
        )
        out: dict[tuple[str, str], int] = {}
        for (holder, name, site), samples in found.items():
            named = (name or f"thread {holder}", texts.get(site, "") if site else "")
            out[named] = out.get(named, 0) + samples
        return out

    def profile(
        self,
        target: int | None,
        span: Range,
        states: set[str] | None = None,
        thread: str | None = None,
        loop_only: bool = False,
    ) -> Profile:
        """Folded stacks of one target (or all) over a range, off-CPU leaves included; with
        ``loop_only``, the samples of event-loop stacks only (the ``stacks.loop`` flag)."""
        with self.snapshot():
            return self._profile(target, span, states, thread, loop_only)

    def _profile(
        self,
        target: int | None,
        span: Range,
        states: set[str] | None,
        thread: str | None,
        loop_only: bool,
    ) -> Profile:
        if target is not None:
            info = self.target(target)
        codes, threads = self._states(states), self._threads(thread)
        totals: dict[tuple[int, int], int] = {}
        try:
            for process_id, blob in self.blobs(target, span):
                wanted = threads(process_id) if threads is not None else None
                for stack, thread_id, state, count in counts.unpack(blob):
                    if codes is not None and state not in codes:
                        continue
                    if wanted is not None and thread_id not in wanted:
                        continue
                    totals[(stack, state)] = totals.get((stack, state), 0) + count
        except counts.CountsError as err:
            raise StoreUnavailable(f"the database is damaged: {err}") from err
        if loop_only:
            loop = self.loop_stacks({stack for stack, _ in totals})
            totals = {key: count for key, count in totals.items() if key[0] in loop}
        texts = self.stack_texts({stack for stack, _ in totals})
        profile = Profile(start=float(span.start), end=float(span.end))
        for (stack_id, state), count in totals.items():
            leaf = leaf_for(STATE_NAMES[state])
            text = texts[stack_id]
            profile.add(f"{text};{leaf}" if leaf else text, count)
        if target is not None:
            profile.target = Target(
                pid=info["pid"], cmdline=info["cmdline"], python_version=info["python_version"]
            )
        return profile

    def loop_stacks(self, ids: set[int]) -> set[int]:
        """Which of these stacks run an event loop, as the writer flagged them when it stored
        them (``sidecar.classify.threads.is_loop_stack``)."""
        if not ids:
            return set()
        rows = self.rows(
            "SELECT id FROM stacks WHERE loop = 1 AND id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted(ids)),),
        )
        return {int(row[0]) for row in rows}

    def has_loop_samples(self, target: int | None, span: Range) -> bool:
        """Whether a thread ran an event loop in the range: what the loop-thread views show
        then, and every thread otherwise (the timeline's ``loop_threads_only``)."""
        where, params = "window >= ? AND window < ?", [span.start, span.end]
        if target is not None:
            where += " AND target_id = ?"
            params.append(target)
        loop = " + ".join(f"SUM({column})" for column, _, on_loop in SUM_COLUMNS if on_loop)
        ((found,),) = self.rows(f"SELECT {loop} FROM windows WHERE {where}", tuple(params))
        return bool(found)

    def entries(
        self, process_id: int | None = None
    ) -> list[tuple[int, int, int, int, int, str, int]]:
        """Every stored (window, target id, process id, stack id, thread id, state, count), of
        one process or all, from the windows (not the hourly rollups), in window order."""
        where, params = ("process_id = ?", (process_id,)) if process_id is not None else ("1", ())
        out: list[tuple[int, int, int, int, int, str, int]] = []
        for window, target_id, process, blob in self.rows(
            "SELECT window, target_id, process_id, counts FROM window_counts "
            f"WHERE {where} ORDER BY window, target_id, process_id",
            params,
        ):
            out += [
                (window, target_id, process, stack, thread_id, STATE_NAMES[state], count)
                for stack, thread_id, state, count in counts.unpack(blob)
            ]
        return out

    def rolled_hours(self, span: Range) -> list[int]:
        """Hours rolled up that lie wholly inside the range, in order."""
        return [
            int(r[0])
            for r in self.rows(
                "SELECT hour FROM rollup_hours WHERE hour >= ? AND hour + ? <= ? ORDER BY hour",
                (span.start, HOUR, span.end),
            )
        ]

    def stack_texts(self, ids: set[int]) -> dict[int, str]:
        """Folded text of stacks (leaf nodes), rebuilt from the prefix tree, ``TEXT_BATCH``
        stacks to a query: what a query holds besides the texts is one batch's nodes, not
        every node of every stack asked for (30 s of stacks that never repeat, 150 frames
        deep, are 400,000 nodes)."""
        texts: dict[int, str] = {}
        wanted = sorted(ids)
        for at in range(0, len(wanted), TEXT_BATCH):
            self._stack_texts(wanted[at : at + TEXT_BATCH], texts)
        return texts

    def _stack_texts(self, ids: list[int], texts: dict[int, str]) -> None:
        """Adds the texts of ``ids`` to ``texts``, each joined once from its frames (a stack
        whose prefix is a stack already in ``texts`` starts from that one's text)."""
        rows = self.rows(
            """
            WITH RECURSIVE chain(id) AS (
                SELECT value FROM json_each(?)
                UNION
                SELECT n.parent FROM nodes n JOIN chain ON n.id = chain.id WHERE n.parent != 0
            )
            SELECT n.id, n.parent, f.text FROM chain
            JOIN nodes n ON n.id = chain.id JOIN frames f ON f.id = n.frame
            """,
            (json.dumps(ids),),
        )
        nodes = {int(i): (int(parent), text) for i, parent, text in rows}
        for node in ids:
            path: list[str] = []
            cursor = node
            while cursor and cursor not in texts:
                if cursor not in nodes or len(path) > len(nodes):  # only a damaged file
                    raise StoreUnavailable(f"the database is damaged: stack {node} is broken")
                parent, frame = nodes[cursor]
                path.append(frame)
                cursor = parent
            if cursor:
                path.append(texts[cursor])
            path.reverse()
            texts[node] = ";".join(path)

    def timeline(
        self, target: int | None, span: Range, step: int | None = None, loop: bool = True
    ) -> dict[str, Any]:
        """busy / idle / blocked / gil samples of the loop threads (with ``loop`` False, or
        when no thread ran a loop in the range, of every thread) per bucket of ``step``
        seconds."""
        if step is None:
            step = max(self.window, (span.end - span.start) // 300 // self.window * self.window)
        if step <= 0:
            raise QueryError("'step' must be a positive number of seconds")
        if (span.end - span.start) / step > MAX_BUCKETS:
            raise QueryError(
                f"too many buckets: use a 'step' of at least "
                f"{math.ceil((span.end - span.start) / MAX_BUCKETS)} seconds"
            )
        where, params = "window >= ? AND window < ?", [span.start, span.end]
        if target is not None:
            self.target(target)
            where += " AND target_id = ?"
            params.append(target)
        columns = [column for column, _, _ in SUM_COLUMNS]
        rows = self.rows(
            f"SELECT window / ? * ? AS bucket, {', '.join(f'SUM({c})' for c in columns)} "
            f"FROM windows WHERE {where} GROUP BY bucket ORDER BY bucket",
            (step, step, *params),
        )
        # the event loop's threads when the range has any, else every thread
        loop_only = loop and any(
            row[1 + i] for row in rows for i, (_, _, loop) in enumerate(SUM_COLUMNS) if loop
        )
        chosen = [
            (i, STATE_NAMES[code])
            for i, (_, code, loop) in enumerate(SUM_COLUMNS)
            if loop == loop_only
        ]
        buckets: dict[int, dict[str, int]] = {}
        for row in rows:
            entry = {name: int(row[1 + i]) for i, name in chosen}
            if any(entry.values()):
                buckets[int(row[0])] = entry
        return {
            "from": span.start,
            "to": span.end,
            "step": step,
            "loop_threads_only": loop_only,
            "buckets": [{"t": t, **sums} for t, sums in sorted(buckets.items())],
        }
