"""Writing to the store: processes attached to their targets, windows of samples and tasks.

A window's stacks are interned as they are written: every frame text once (``frames``), every
stack as a path of nodes in a prefix tree (``nodes``), its leaf with the stack's loop flag and
depth (``stacks``); ids already seen are cached in memory, within a bound (``CACHE_CHARS``,
``CACHE_ROWS``). A window's counts are packed (``sidecar.store.counts``) into one row per
process, and added to its hour's rollup too when that hour is already rolled up. Who held the
GIL while a loop thread waited goes to ``gil_holders`` (and its hour's ``gil_hour_holders``
alike), the holder's place interned as a frame.
"""

from __future__ import annotations

import json

from sidecar.classify.stalls import throttle_row
from sidecar.classify.threads import is_loop_stack
from sidecar.rules.frames import code_frames
from sidecar.rules.tasks import is_request
from sidecar.sample.messages import ProcessKey, ProcessRecord, WindowBatch
from sidecar.store import counts
from sidecar.store.counts import Entries
from sidecar.store.file import StoreFile
from sidecar.store.schema import (
    COUNT_TABLES,
    HOLDER_KEY,
    HOLDER_TABLES,
    HOUR,
    REQUEST_COLUMNS,
    STALL_COLUMNS,
    STALL_SECONDS,
    STATE_CODES,
    SUM_COLUMNS,
    SUMS_OF,
    TASK_COLUMNS,
    TASK_STATE_CODES,
    WINDOW_SUMS,
    frame_hash,
)

#: Interning caches: characters of stack text, and rows of nodes and frames, kept in memory.
#: Bounded by size, not count: a count of deep stacks is no bound on memory.
CACHE_CHARS = 16 * 2**20
CACHE_ROWS = 200_000


class WindowWriter(StoreFile):
    """The writing half of ``Store``: processes and windows."""

    # -- processes and targets -------------------------------------------------------------

    def attach(self, record: ProcessRecord) -> tuple[int, int]:
        """(target id, process id) for a process, creating or reusing its logical target.

        A new process of a command whose target has no live process (a restart) joins that
        target; one that runs beside a live process of the same command (a worker) gets a new
        target in the same group. A process that exec'd another program (same PID and start
        time, another command line) is a new process of that program's target.
        """
        with self.transaction():
            row = self.db.execute(
                "SELECT p.target_id, p.id FROM processes p JOIN targets t ON t.id = p.target_id "
                "WHERE p.pid = ? AND p.start_time = ? AND t.group_key = ?",
                (*record.key, record.group_key),
            ).fetchone()
            if row is not None:
                target_id, process_id = int(row[0]), int(row[1])
                self.db.execute(
                    "UPDATE processes SET alive = 1, last_seen = ?, error = ?, "
                    "python_version = COALESCE(NULLIF(?, ''), python_version) WHERE id = ?",
                    (record.seen, record.error, record.python_version, process_id),
                )
            else:
                # a restarted master takes the master's target, a new worker a worker's
                found = self.db.execute(
                    "SELECT t.id FROM targets t WHERE t.group_key = ? AND NOT EXISTS "
                    "(SELECT 1 FROM processes p WHERE p.target_id = t.id AND p.alive = 1) "
                    "ORDER BY t.role IS ? DESC, t.last_seen DESC LIMIT 1",
                    (record.group_key, record.role),
                ).fetchone()
                if found is not None:
                    target_id = int(found[0])
                else:
                    target_id = int(
                        self.db.execute(
                            "INSERT INTO targets (group_key, cmdline, first_seen, last_seen) "
                            "VALUES (?, ?, ?, ?)",
                            (record.group_key, record.cmdline, record.seen, record.seen),
                        ).lastrowid
                        or 0
                    )
                process_id = int(
                    self.db.execute(
                        "INSERT INTO processes (target_id, pid, start_time, python_version, "
                        "first_seen, last_seen, alive, error) VALUES (?, ?, ?, ?, ?, ?, 1, ?)",
                        (
                            target_id,
                            record.pid,
                            record.start_time,
                            record.python_version,
                            record.seen,
                            record.seen,
                            record.error,
                        ),
                    ).lastrowid
                    or 0
                )
            self.db.execute(
                "UPDATE targets SET last_seen = ?, "
                "framework = CASE WHEN ? != 'unknown' THEN ? ELSE framework END, "
                "loop = ?, role = ? WHERE id = ?",
                (
                    record.seen,
                    record.framework,
                    record.framework,
                    record.loop,
                    record.role,
                    target_id,
                ),
            )
        self._processes[record.key] = (target_id, process_id)
        return target_id, process_id

    def mark_gone(self, key: ProcessKey, when: float) -> None:
        with self.transaction():
            self.db.execute(
                "UPDATE processes SET alive = 0, last_seen = ? WHERE pid = ? AND start_time = ?",
                (when, *key),
            )
        self._processes.pop(key, None)

    # -- samples ---------------------------------------------------------------------------

    def _frame(self, text: str) -> int:
        frame_id = self._frames.get(text)
        if frame_id is None:
            frame_id = self._row_id(
                "SELECT id FROM frames WHERE hash = ? AND text = ?",
                "INSERT INTO frames (hash, text) VALUES (?, ?)",
                (frame_hash(text), text),
            )
            self._frames[text] = frame_id
        return frame_id

    def _node(self, parent: int, frame: int) -> int:
        node_id = self._nodes.get((parent, frame))
        if node_id is None:
            node_id = self._row_id(
                "SELECT id FROM nodes WHERE parent = ? AND frame = ?",
                "INSERT INTO nodes (parent, frame) VALUES (?, ?)",
                (parent, frame),
            )
            self._nodes[(parent, frame)] = node_id
        return node_id

    def _row_id(self, select: str, insert: str, values: tuple[int | str, ...]) -> int:
        """The id of the row ``select`` finds with ``values``, or of the one ``insert`` adds
        with them."""
        row = self.db.execute(select, values).fetchone()
        if row is not None:
            return int(row[0])
        return int(self.db.execute(insert, values).lastrowid or 0)

    def _intern(self, text: str) -> tuple[int, bool]:
        """The leaf node of a folded stack, adding the nodes and frames it lacks, and whether
        it runs an event loop."""
        cached = self._stacks.get(text)
        if cached is not None:
            return cached
        node = 0
        for frame in text.split(";"):
            node = self._node(node, self._frame(frame))
        loop = is_loop_stack(text)
        self.db.execute(
            "INSERT OR IGNORE INTO stacks (id, loop, depth) VALUES (?, ?, ?)",
            (node, int(loop), len(code_frames(text))),
        )
        if self._stack_chars > CACHE_CHARS or len(self._nodes) + len(self._frames) > CACHE_ROWS:
            self._forget()
        self._stacks[text] = (node, loop)
        self._stack_chars += len(text) + 64
        return node, loop

    def _add_counts(self, table: str, key: str, row: tuple[int, int, int], add: Entries) -> None:
        """Adds counts to the packed counts of one (window or hour, target, process): a new
        row, or (rarely: a window flushed in two parts) the sum with the one stored."""
        inserted = self.db.execute(
            f"INSERT INTO {table} VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (*row, counts.pack(add)),
        )
        if inserted.rowcount:
            return
        match = f"{key} = ? AND target_id = ? AND process_id = ?"
        (stored,) = self.db.execute(f"SELECT counts FROM {table} WHERE {match}", row).fetchone()
        total = counts.unpack_dict(stored)
        for entry, count in add.items():
            total[entry] = total.get(entry, 0) + count
        self.db.execute(f"UPDATE {table} SET counts = ? WHERE {match}", (counts.pack(total), *row))

    def write(self, batches: list[WindowBatch]) -> int:
        """Writes windows in one transaction; returns the windows kept out because their
        process was never attached."""
        orphaned = 0
        with self.transaction():
            for batch in batches:
                ids = self._processes.get(batch.process)
                if ids is None:  # never attached (cannot happen in order); kept out, counted
                    orphaned += 1
                    continue
                target_id, process_id = ids
                entries: Entries = {}
                sums = [0] * len(SUM_COLUMNS)
                for stack, thread_id, state, count in batch.window.rows:
                    node, loop = self._intern(stack)
                    code = STATE_CODES[state]
                    entries[(node, thread_id, code)] = (
                        entries.get((node, thread_id, code), 0) + count
                    )
                    for index in SUMS_OF[code, loop]:
                        sums[index] += count
                task_entries, task_sums = self._task_entries(batch)
                hour = batch.start // HOUR * HOUR
                for (table, hours), added in zip(
                    COUNT_TABLES, (entries, task_entries), strict=True
                ):
                    if added is task_entries and not added:
                        continue  # no task scanned: no row (a thread window always has one)
                    self._add_counts(table, "window", (batch.start, target_id, process_id), added)
                    if hour in self._rolled:  # a late window of an hour already rolled up
                        self._add_counts(hours, "hour", (hour, target_id, process_id), added)
                holders = self._batch_holders(batch)
                if holders:
                    where = (target_id, process_id)
                    self._add_holders(HOLDER_TABLES[0], "window", batch.start, where, holders)
                    if hour in self._rolled:
                        self._add_holders(HOLDER_TABLES[1], "hour", hour, where, holders)
                names = ", ".join(WINDOW_SUMS)
                self.db.execute(
                    f"INSERT INTO windows (window, target_id, process_id, width, {names}) "
                    f"VALUES (?, ?, ?, ?, {', '.join('?' * len(WINDOW_SUMS))}) "
                    "ON CONFLICT DO UPDATE SET "
                    + ", ".join(f"{c} = {c} + excluded.{c}" for c in WINDOW_SUMS),
                    (
                        batch.start,
                        target_id,
                        process_id,
                        batch.width,
                        batch.window.ticks,
                        *sums,
                        batch.window.task_scans,
                        *task_sums,
                        batch.window.task_unread,
                        batch.window.stalls_dropped,
                        batch.window.slow_requests_dropped,
                    ),
                )
                if batch.window.stalls:
                    self._add_stalls(batch, target_id, process_id)
                if batch.window.slow_requests:
                    self._add_slow_requests(batch, target_id, process_id)
                names_of = batch.window.thread_names
                if names_of:
                    self.db.executemany(
                        "INSERT INTO threads VALUES (?, ?, ?) ON CONFLICT DO UPDATE "
                        "SET name = excluded.name",
                        [
                            (process_id, tid, name)
                            for tid, name in batch.window.thread_names.items()
                        ],
                    )
                end = float(batch.start + batch.width)
                self.db.execute(
                    "UPDATE processes SET last_seen = MAX(last_seen, ?) WHERE id = ?",
                    (end, process_id),
                )
                self.db.execute(
                    "UPDATE targets SET last_seen = MAX(last_seen, ?) WHERE id = ?",
                    (end, target_id),
                )
        return orphaned

    def _add_stalls(self, batch: WindowBatch, target_id: int, process_id: int) -> None:
        """A window's stalls, each once (a window flushed in two parts names none twice: a
        stall is handed over once, by the window it ended in)."""
        self.db.executemany(
            f"INSERT INTO stalls ({', '.join(STALL_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(STALL_COLUMNS))}) ON CONFLICT DO NOTHING",
            [
                (
                    batch.start,
                    target_id,
                    process_id,
                    s.thread_id,
                    s.start,
                    s.duration_s,
                    int(s.ongoing),
                    s.thread,
                    s.samples,
                    s.state,
                    *(s.states.get(name, 0.0) for name in STALL_SECONDS),
                    s.site,
                    s.holder,
                    s.callback,
                    s.task,
                    s.request,
                    ",".join(s.tied),
                    *throttle_row(s.throttling),
                )
                for s in batch.window.stalls
            ],
        )

    def _add_slow_requests(self, batch: WindowBatch, target_id: int, process_id: int) -> None:
        """A window's slow requests, each once (handed over by the window it ended in)."""
        self.db.executemany(
            f"INSERT INTO slow_requests ({', '.join(REQUEST_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(REQUEST_COLUMNS))}) ON CONFLICT DO NOTHING",
            [
                (
                    batch.start,
                    target_id,
                    process_id,
                    r.start,
                    r.task,
                    r.start_from,
                    r.duration_s,
                    r.duration_max_s,
                    int(r.ongoing),
                    r.framework,
                    r.method,
                    r.path,
                    r.route,
                    r.handler,
                    r.trace,
                    r.trace_header,
                    r.scans,
                    json.dumps(r.stacks),
                    r.other,
                )
                for r in batch.window.slow_requests
            ],
        )

    def _batch_holders(self, batch: WindowBatch) -> dict[tuple[int, int, str, int], int]:
        """A window's GIL holders: (waiter, holder, holder's name, site's frame id or 0) →
        samples."""
        out: dict[tuple[int, int, str, int], int] = {}
        for waiter, holder, name, site, samples in batch.gil_holdings():
            if samples > 0:
                key = (waiter, holder, name, self._frame(site) if site else 0)
                out[key] = out.get(key, 0) + samples
        return out

    def _add_holders(
        self,
        table: str,
        key: str,
        when: int,
        where: tuple[int, int],
        holders: dict[tuple[int, int, str, int], int],
    ) -> None:
        """Adds holders' samples to a window's (or an hour's) rows: new rows, or summed with
        those stored (a window flushed in two parts, a late window of a rolled-up hour)."""
        columns = ", ".join((key, *HOLDER_KEY, "samples"))
        self.db.executemany(
            f"INSERT INTO {table} ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT DO UPDATE SET samples = samples + excluded.samples",
            [(when, *where, *at, samples) for at, samples in holders.items()],
        )

    def _task_entries(self, batch: WindowBatch) -> tuple[Entries, list[int]]:
        """A window's task counts, packed like a thread's (thread id 0), and its task-samples
        per TASK_COLUMNS."""
        entries: Entries = {}
        sums = [0] * len(TASK_COLUMNS)
        for stack, state, count in batch.window.tasks:
            node, _ = self._intern(stack)
            code = TASK_STATE_CODES[state]
            entries[(node, 0, code)] = entries.get((node, 0, code), 0) + count
            request = is_request(stack)
            for index, (_, wanted, requests_only) in enumerate(TASK_COLUMNS):
                if wanted == code and (request or not requests_only):
                    sums[index] += count
        return entries, sums
