"""The writer side of the store: one connection, WAL, every write in a short transaction.

Only the writer thread (``sidecar.store.writer``) uses a ``Store``; readers open their own
read-only connections (``sidecar.query``). A lock file next to the database keeps a second
sidecar from writing to it. When the file is deleted, replaced or corrupted under a running
store, ``check_file`` says so and ``recreate`` starts over at the same path.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from sqlite_utils import Database

from sidecar.classify import code_frames, is_loop_stack
from sidecar.errors import StoreError
from sidecar.store import counts
from sidecar.store.counts import Counts
from sidecar.store.schema import (
    COUNT_TABLES,
    STATE_CODES,
    SUM_COLUMNS,
    SUMS_OF,
    TASK_COLUMNS,
    TASK_STATE_CODES,
    WINDOW_SUMS,
    frame_hash,
    migrate,
)
from sidecar.tasks import is_request

HOUR = 3600
SQLITE_HEADER = b"SQLite format 3\x00"
#: WAL pages between checkpoints (SQLite's default: 1000). The WAL is a second copy of recent
#: pages; kept small, a full disk leaves room to evict old windows and write on.
WAL_PAGES = 128
#: SQLite result codes (primary, the low byte) that mean the file is not a sound database.
CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
#: Interning caches: characters of stack text, and rows of nodes and frames, kept in memory.
#: Bounded by size, not count: a count of deep stacks is no bound on memory.
CACHE_CHARS = 16 * 2**20
CACHE_ROWS = 200_000
#: What ``Store.check_file`` finds; each is a reason for ``Store.recreate``.
DELETED = "the database file was deleted"
REPLACED = "the database file was replaced by another file"
CORRUPT = "the database file is corrupt"

#: (age in seconds, window width): data older than the age is merged into windows that wide.
DOWNSAMPLE_TIERS: tuple[tuple[int, int], ...] = ((3600, 300), (3 * 3600, 1800))


class StoreLocked(StoreError):
    """Another sidecar already writes to this database."""


ProcessKey = tuple[int, int]


@dataclass(frozen=True)
class ProcessRecord:
    """A process as discovery sees it; (pid, start_time) is its identity."""

    pid: int
    start_time: int
    cmdline: str
    seen: float
    framework: str = "unknown"
    loop: str = "asyncio"
    python_version: str = ""
    error: str | None = None
    #: ``master`` / ``worker`` in a pre-fork server, None for a lone process.
    role: str | None = None
    #: What groups it with the other processes of its program (``discover.group_of``); its
    #: command line when not given.
    group: str = ""

    @property
    def key(self) -> ProcessKey:
        return (self.pid, self.start_time)

    @property
    def group_key(self) -> str:
        return self.group or self.cmdline


@dataclass
class WindowBatch:
    """One window of one process: rows of (stack, thread id, state, count), and of its asyncio
    tasks (task stack without its leaf, task state, task-samples) with the scans that counted
    them and the tasks they found past their bound."""

    process: ProcessKey
    start: int
    width: int
    ticks: int
    rows: list[tuple[str, int, str, int]]
    thread_names: dict[int, str] = field(default_factory=dict)
    tasks: list[tuple[str, str, int]] = field(default_factory=list)
    task_scans: int = 0
    #: tasks the scans found past their bound and did not read, summed over them
    task_unread: int = 0


def is_corrupt(err: Exception) -> bool:
    """The error says the database file is damaged (not busy, not full, not an I/O hiccup)."""
    return getattr(err, "sqlite_errorcode", 0) & 0xFF in CORRUPT_CODES


def _file_id(path: Path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


class Store:
    """The single writer of one sidecar database."""

    def __init__(self, path: str | Path, *, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._lock = self._acquire_lock()
        try:
            self._open()
        except (sqlite3.DatabaseError, StoreError) as err:
            self._release_lock()
            fix = " (move the file aside or delete it)" if is_corrupt(err) else ""
            raise StoreError(f"cannot open database {self.path}: {err}{fix}") from err
        except Exception:
            self._release_lock()
            raise

    def _open(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db = Database(conn)
        try:
            self.db.execute("PRAGMA busy_timeout = 5000")
            migrate(self.db)  # first: a database it cannot read is left as it was
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
            self.db.execute(f"PRAGMA wal_autocheckpoint = {WAL_PAGES}")
            if self.max_bytes is not None:
                page = int(self.db.execute("PRAGMA page_size").fetchone()[0])
                self.db.execute(f"PRAGMA max_page_count = {max(16, self.max_bytes // page)}")
            # Processes are re-attached as discovery finds them again.
            with self.transaction():
                self.db.execute("UPDATE processes SET alive = 0 WHERE alive = 1")
            self._rolled: set[int] = {
                int(r[0]) for r in self.db.execute("SELECT hour FROM rollup_hours").fetchall()
            }
            self.file_id = _file_id(self.path)
        except BaseException:
            with suppress(sqlite3.Error):
                conn.close()
            raise
        self._stacks: dict[str, tuple[int, bool]] = {}
        self._stack_chars = 0
        self._nodes: dict[tuple[int, int], int] = {}
        self._frames: dict[str, int] = {}
        self._processes: dict[ProcessKey, tuple[int, int]] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def check_file(self, probe: bool = False) -> str | None:
        """What happened to the database file under this store, if anything (DELETED,
        REPLACED or CORRUPT, as a message): a stat and a read of 16 bytes, and with ``probe``
        a small query on a new read-only connection."""
        try:
            file_id = _file_id(self.path)
            with open(self.path, "rb") as handle:
                header = handle.read(len(SQLITE_HEADER))
        except FileNotFoundError:
            return DELETED
        except OSError:
            return None  # not something to start over for; writes will tell
        if file_id != self.file_id:
            return REPLACED
        if header != SQLITE_HEADER:
            return f"{CORRUPT} (its SQLite header is gone)"
        if probe:  # what a new reader sees: the writer's own cache hides damage from it
            try:
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=1)
                try:
                    conn.execute("SELECT COUNT(*) FROM targets").fetchone()
                    conn.execute("SELECT COUNT(*) FROM processes").fetchone()
                finally:
                    conn.close()
            except sqlite3.Error as err:
                if is_corrupt(err):
                    return f"{CORRUPT} ({err})"
        return None

    def recreate(self, reason: str) -> Path | None:
        """Starts over at the same path, keeping the lock: a corrupt file (and its WAL) is
        moved aside to ``NAME.corrupt-TIME``, whose path is returned; the leftover WAL of a
        deleted file is removed, so the new database never replays it. A replacement that is
        a sound database is used as it is. Known processes must be attached again."""
        with suppress(sqlite3.Error):
            self.db.conn.close()
        aside: Path | None = None
        if self.path.exists() and reason == REPLACED:
            try:
                self._open()
                return None
            except (sqlite3.DatabaseError, StoreError):
                pass  # not a database it can write: moved aside like a corrupt one
        if self.path.exists():
            aside = self.path.with_name(
                f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"
            )
            for suffix in ("", "-wal", "-shm"):
                with suppress(FileNotFoundError):
                    os.rename(f"{self.path}{suffix}", f"{aside}{suffix}")
        else:
            for suffix in ("-wal", "-shm"):
                with suppress(FileNotFoundError):
                    os.unlink(f"{self.path}{suffix}")
        self._open()
        return aside

    def checkpoint(self) -> None:
        """Copies the WAL into the database and truncates it (frees its disk space)."""
        with suppress(sqlite3.Error):
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _acquire_lock(self) -> int:
        # the real path: a symlink to a database must find the same lock as the database
        lock_path = f"{self.path.resolve()}.lock"
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as err:
            raise StoreError(f"cannot create {lock_path}: {err.strerror}") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(fd)
            raise StoreLocked(
                f"database {self.path} is in use by another sidecar (lock {lock_path}); "
                "give each sidecar its own --db"
            ) from err
        return fd

    def _release_lock(self) -> None:
        if self._lock >= 0:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            os.close(self._lock)
            self._lock = -1

    def close(self) -> None:
        with suppress(sqlite3.Error):
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.conn.close()
        self._release_lock()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            with suppress(sqlite3.Error):
                self.db.conn.rollback()
            # ids cached inside the transaction name rows that no longer exist (and will be
            # given to other rows): kept, they would tie stacks into loops
            self._forget()
            raise
        self.db.execute("COMMIT")

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
            key = frame_hash(text)
            row = self.db.execute(
                "SELECT id FROM frames WHERE hash = ? AND text = ?", (key, text)
            ).fetchone()
            if row is None:
                cursor = self.db.execute(
                    "INSERT INTO frames (hash, text) VALUES (?, ?)", (key, text)
                )
                frame_id = int(cursor.lastrowid or 0)
            else:
                frame_id = int(row[0])
            self._frames[text] = frame_id
        return frame_id

    def _node(self, parent: int, frame: int) -> int:
        node_id = self._nodes.get((parent, frame))
        if node_id is None:
            row = self.db.execute(
                "SELECT id FROM nodes WHERE parent = ? AND frame = ?", (parent, frame)
            ).fetchone()
            if row is None:
                cursor = self.db.execute(
                    "INSERT INTO nodes (parent, frame) VALUES (?, ?)", (parent, frame)
                )
                node_id = int(cursor.lastrowid or 0)
            else:
                node_id = int(row[0])
            self._nodes[(parent, frame)] = node_id
        return node_id

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

    def _forget(self) -> None:
        """Empties the interning caches (bounded memory; the database still has it all)."""
        self._stacks = {}
        self._nodes = {}
        self._frames = {}
        self._stack_chars = 0

    def _add_counts(self, table: str, key: str, row: tuple[int, int, int], add: Counts) -> None:
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
                entries: Counts = {}
                sums = [0] * len(SUM_COLUMNS)
                for stack, thread_id, state, count in batch.rows:
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
                        batch.ticks,
                        *sums,
                        batch.task_scans,
                        *task_sums,
                        batch.task_unread,
                    ),
                )
                if batch.thread_names:
                    self.db.conn.executemany(
                        "INSERT INTO threads VALUES (?, ?, ?) ON CONFLICT DO UPDATE "
                        "SET name = excluded.name",
                        [(process_id, tid, name) for tid, name in batch.thread_names.items()],
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

    def _task_entries(self, batch: WindowBatch) -> tuple[Counts, list[int]]:
        """A window's task counts, packed like a thread's (thread id 0), and its task-samples
        per TASK_COLUMNS."""
        entries: Counts = {}
        sums = [0] * len(TASK_COLUMNS)
        for stack, state, count in batch.tasks:
            node, _ = self._intern(stack)
            code = TASK_STATE_CODES[state]
            entries[(node, 0, code)] = entries.get((node, 0, code), 0) + count
            request = is_request(stack)
            for index, (_, wanted, requests_only) in enumerate(TASK_COLUMNS):
                if wanted == code and (request or not requests_only):
                    sums[index] += count
        return entries, sums

    # -- retention -------------------------------------------------------------------------

    def prune(self, cutoff: float, max_windows: int = 50) -> int:
        """Deletes up to ``max_windows`` of the oldest windows starting before ``cutoff``."""
        with self.transaction():
            starts = [
                int(r[0])
                for r in self.db.execute(
                    "SELECT DISTINCT window FROM windows WHERE window < ? ORDER BY window LIMIT ?",
                    (int(cutoff), max_windows),
                ).fetchall()
            ]
            if not starts:
                return 0
            last = starts[-1]
            for table, hours in COUNT_TABLES:
                self.db.execute(f"DELETE FROM {table} WHERE window <= ?", (last,))
                # an hour that lost any window is no longer whole: its rollup goes too
                self.db.execute(f"DELETE FROM {hours} WHERE hour <= ?", (last,))
            self.db.execute("DELETE FROM windows WHERE window <= ?", (last,))
            self.db.execute("DELETE FROM rollup_hours WHERE hour <= ?", (last,))
        self._rolled = {hour for hour in self._rolled if hour > last}
        return len(starts)

    def evict_oldest(self, fraction: float = 0.1) -> int:
        """Frees room when the disk or the size cap is full: drops the oldest windows."""
        total = int(self.db.execute("SELECT COUNT(DISTINCT window) FROM windows").fetchone()[0])
        if total == 0:
            return 0
        count = max(1, int(total * fraction))
        row = self.db.execute(
            "SELECT window FROM (SELECT DISTINCT window FROM windows ORDER BY window LIMIT ?) "
            "ORDER BY window DESC LIMIT 1",
            (count,),
        ).fetchone()
        return self.prune(float(row[0]) + 1, max_windows=count) if row else 0

    def downsample(self, now: float, max_spans: int = 20) -> int:
        """Merges old windows into coarser ones (DOWNSAMPLE_TIERS); returns spans merged."""
        merged = 0
        for age, width in DOWNSAMPLE_TIERS:
            cutoff = int(now - age) // width * width
            spans = self.db.execute(
                "SELECT DISTINCT window / ? * ? FROM windows WHERE window < ? AND width < ? "
                "ORDER BY 1 LIMIT ?",
                (width, width, cutoff, width, max_spans),
            ).fetchall()
            for (span,) in spans:
                self._merge_span(int(span), width)
                merged += 1
        return merged

    def _packed(self, table: str, key: str, start: int, end: int) -> dict[tuple[int, int], bytes]:
        """The counts of every (target, process) over [start, end), merged into one blob each."""
        blobs: dict[tuple[int, int], list[bytes]] = {}
        for target_id, process_id, blob in self.db.execute(
            f"SELECT target_id, process_id, counts FROM {table} WHERE {key} >= ? AND {key} < ?",
            (start, end),
        ).fetchall():
            blobs.setdefault((int(target_id), int(process_id)), []).append(blob)
        return {ids: counts.merge(parts) for ids, parts in blobs.items()}

    def _merge_span(self, span: int, width: int) -> None:
        end = span + width
        names = ", ".join(WINDOW_SUMS)
        with self.transaction():
            for table, _ in COUNT_TABLES:
                merged = self._packed(table, "window", span, end)
                self.db.execute(
                    f"DELETE FROM {table} WHERE window >= ? AND window < ?", (span, end)
                )
                self.db.conn.executemany(
                    f"INSERT INTO {table} VALUES (?, ?, ?, ?)",
                    [(span, *ids, blob) for ids, blob in merged.items()],
                )
            sums = self.db.execute(
                "SELECT target_id, process_id, "
                + ", ".join(f"SUM({column})" for column in WINDOW_SUMS)
                + " FROM windows WHERE window >= ? AND window < ? GROUP BY target_id, process_id",
                (span, end),
            ).fetchall()
            self.db.execute("DELETE FROM windows WHERE window >= ? AND window < ?", (span, end))
            self.db.conn.executemany(
                f"INSERT INTO windows (window, target_id, process_id, width, {names}) "
                f"VALUES (?, ?, ?, ?, {', '.join('?' * len(WINDOW_SUMS))})",
                [(span, t, p, width, *rest) for t, p, *rest in sums],
            )

    def roll_up(self, now: float, settle: float = 30.0, max_hours: int = 6) -> int:
        """Sums each complete hour (``settle`` seconds past its end) into ``hour_counts``."""
        cutoff = int(now - settle) // HOUR * HOUR
        hours = [
            int(r[0])
            for r in self.db.execute(
                "SELECT DISTINCT window / ? * ? AS h FROM windows WHERE window < ? "
                "AND h NOT IN (SELECT hour FROM rollup_hours) ORDER BY h LIMIT ?",
                (HOUR, HOUR, cutoff, max_hours),
            ).fetchall()
        ]
        for hour in hours:
            with self.transaction():
                for table, hour_table in COUNT_TABLES:
                    merged = self._packed(table, "window", hour, hour + HOUR)
                    self.db.conn.executemany(
                        f"INSERT INTO {hour_table} VALUES (?, ?, ?, ?)",
                        [(hour, *ids, blob) for ids, blob in merged.items()],
                    )
                self.db.execute("INSERT INTO rollup_hours VALUES (?)", (hour,))
            self._rolled.add(hour)
        return len(hours)

    def collect_stacks(self) -> int:
        """Deletes stacks, nodes and frames no sample needs any more (after retention)."""
        with self.transaction():
            self.db.execute("CREATE TEMP TABLE IF NOT EXISTS live_stacks (id INTEGER PRIMARY KEY)")
            self.db.execute("DELETE FROM temp.live_stacks")
            for table in (name for pair in COUNT_TABLES for name in pair):
                for (blob,) in self.db.conn.execute(f"SELECT counts FROM {table}"):
                    self.db.conn.executemany(
                        "INSERT OR IGNORE INTO temp.live_stacks VALUES (?)",
                        [(stack,) for stack in counts.stack_ids(blob)],
                    )
            self.db.execute("DELETE FROM stacks WHERE id NOT IN (SELECT id FROM temp.live_stacks)")
            cursor = self.db.execute(
                """
                WITH RECURSIVE live(id) AS (
                    SELECT id FROM stacks
                    UNION
                    SELECT n.parent FROM nodes n JOIN live ON n.id = live.id WHERE n.parent != 0
                )
                DELETE FROM nodes WHERE id NOT IN (SELECT id FROM live)
                """
            )
            self.db.execute("DELETE FROM frames WHERE id NOT IN (SELECT DISTINCT frame FROM nodes)")
            self.db.execute("DELETE FROM temp.live_stacks")
        self._forget()
        return cursor.rowcount

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            with suppress(OSError):
                total += os.path.getsize(f"{self.path}{suffix}")
        return total
