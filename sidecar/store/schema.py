"""The database schema and its migrations, applied in order and recorded in ``user_version``.

Tables:
- ``targets``: logical targets, one per running copy of a command; a restart of the same
  command keeps its target, concurrent workers of one command get one target each (same group).
- ``processes``: each process a target has had, identified by PID and start time; a process
  that execs another program (same PID and start time, another command line) gets a new entry
  in the new program's target.
- ``frames``: every frame text once, found by a 64-bit hash of it.
- ``nodes``: stacks as a prefix tree of (parent node, frame); a stack is its leaf node, so
  stacks that share a prefix share its nodes (parent 0 is the root).
- ``stacks``: per stack (leaf node) that samples refer to: its loop flag and depth.
- ``windows``: one row per process and window: sampling ticks, so gaps are visible, and the
  samples of each state, of all threads and of event-loop threads (the timeline reads these).
- ``window_counts``: the bulk of the data, one row per process and window: its
  (stack, thread, state) → count entries packed into one blob (``sidecar.store.counts``).
- ``threads``: thread names per process.
- ``gil_holders``: per window and process, who held the GIL while an event-loop thread waited
  for it (``gil_hour_holders``: per hour, beside ``hour_counts``).
- ``stalls``: each stall of an event loop, with the window it ended in.
- ``hour_counts``: the counts of each complete hour, per process, packed the same way, beside
  the windows, so a long range reads one blob per process and hour; ``rollup_hours`` lists
  the hours rolled up.

Version 5 adds each target's ``role`` in a pre-fork server (``master``, ``worker``, NULL alone).

Version 6 adds the asyncio tasks, beside the threads and kept alike (retention, downsampling,
hourly rollups): ``task_counts`` and ``task_hour_counts`` pack each window's (hour's)
(task stack, 0, task state) → task-samples the same way, the stack interned like a thread's
without its state leaf; ``windows`` gains the window's task scans and its task-samples per
state, of all tasks and of requests' tasks (``sidecar.rules.tasks.is_request``), which the task
timeline reads: tasks in flight = task-samples / scans.

Version 7 adds to ``windows`` the tasks its scans found past their bound and did not read
(``task_unread``, summed over the window's scans; 0 in older rows): tasks in flight =
(task-samples + unread) / scans.

Version 8 adds the ``gil`` state (a thread waiting for the GIL another thread holds): its sums
in ``windows`` (``gil``, ``loop_gil``; 0 in older rows, whose sampler could not tell it), and
who held the GIL while an event-loop thread waited for it: ``gil_holders`` per window and
``gil_hour_holders`` per hour, kept like the counts (retention, downsampling, hourly rollups),
one row per (waiting thread, holding thread, its name, where it was) with the samples. The
holder's place is a frame of ``frames`` (0: it had no Python frame), so collection keeps the
frames they name; holder 0 means none held it at that instant (the GIL was handed over).

Version 9 adds the stalls of the event loops (``sidecar.classify.stalls``): ``stalls``, one row
per stall, keyed by target, start, process and thread, with the stored window it ended in (it
goes with that window: retention, downsampling), its length, states in seconds, and what held
it as text; ``windows`` gains the stalls past the sampler's bound a window did not keep
(``stalls_dropped``).

Version 10 adds the ``cpu_wait`` state (a thread runnable but waiting for a CPU: the kernel
runs something else): its sums in ``windows`` (``cpu_wait``, ``loop_cpu_wait``) and a stall's
seconds in it (``stalls.cpu_wait``); 0 in older rows, whose sampler counted such samples busy.

Version 11 adds what a stall says beyond its state: the states with as many samples
(``stalls.tied``, comma-separated; empty in older rows), and the CFS throttling of the
target's cgroup around it (``throttle_periods``, ``throttle_throttled``, ``throttle_lost``
seconds over ``throttle_span`` seconds of readings; NULL without a limit or a reading, and in
older rows).

Version 12 marks the file as sidecar's: SQLite's ``application_id`` (``APPLICATION_ID``).
Before anything is written, ``claim`` refuses another program's database and one whose
schema version no sidecar writes; an older sidecar database, without the id, is known by
its tables.

Version 13 adds the slow requests the task scans saw (``sidecar.classify.requests``):
``slow_requests``, one row per request, keyed by target, start, process and task, with the
stored window it ended in (it goes with that window, as a stall does), its duration's bounds,
what it was (method, path, route, trace id) and its task-samples by stack as JSON text
(``[[stack, count], ...]``, 32 at most, and ``other``); ``windows`` gains those past the
sampler's bound a window did not keep (``slow_requests_dropped``).

Schema versions 1 to 3 kept one row per (window, process, stack, thread, state) in
``samples`` and per hour in ``rollups``; version 4 packs them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from hashlib import blake2b

from sidecar.errors import StoreError
from sidecar.store import counts

STATE_CODES = {"busy": 0, "idle": 1, "blocked": 2, "gil": 3, "cpu_wait": 4}
STATE_NAMES = {code: name for name, code in STATE_CODES.items()}
TASK_STATE_CODES = {"running": 0, "ready": 1, "waiting": 2}
TASK_STATE_NAMES = {code: name for name, code in TASK_STATE_CODES.items()}


V1 = """
        CREATE TABLE targets (
            id INTEGER PRIMARY KEY,
            group_key TEXT NOT NULL,
            cmdline TEXT NOT NULL,
            framework TEXT NOT NULL DEFAULT 'unknown',
            loop TEXT NOT NULL DEFAULT 'asyncio',
            first_seen REAL NOT NULL,
            last_seen REAL NOT NULL
        );
        CREATE INDEX targets_by_group ON targets (group_key);
        CREATE TABLE processes (
            id INTEGER PRIMARY KEY,
            target_id INTEGER NOT NULL REFERENCES targets (id),
            pid INTEGER NOT NULL,
            start_time INTEGER NOT NULL,
            python_version TEXT NOT NULL DEFAULT '',
            first_seen REAL NOT NULL,
            last_seen REAL NOT NULL,
            alive INTEGER NOT NULL DEFAULT 1,
            error TEXT,
            UNIQUE (pid, start_time)
        );
        CREATE INDEX processes_by_target ON processes (target_id);
        CREATE TABLE frames (
            id INTEGER PRIMARY KEY,
            text TEXT NOT NULL UNIQUE
        );
        CREATE TABLE nodes (
            id INTEGER PRIMARY KEY,
            parent INTEGER NOT NULL,
            frame INTEGER NOT NULL,
            UNIQUE (parent, frame)
        );
        CREATE TABLE stacks (
            id INTEGER PRIMARY KEY,
            loop INTEGER NOT NULL,
            depth INTEGER NOT NULL
        );
        CREATE TABLE samples (
            window INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            stack_id INTEGER NOT NULL,
            thread_id INTEGER NOT NULL,
            state INTEGER NOT NULL,
            width INTEGER NOT NULL,
            count INTEGER NOT NULL,
            PRIMARY KEY (window, target_id, process_id, stack_id, thread_id, state)
        ) WITHOUT ROWID;
        CREATE TABLE windows (
            window INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            width INTEGER NOT NULL,
            ticks INTEGER NOT NULL,
            PRIMARY KEY (window, target_id, process_id)
        ) WITHOUT ROWID;
        CREATE TABLE threads (
            process_id INTEGER NOT NULL,
            thread_id INTEGER NOT NULL,
            name TEXT NOT NULL,
            PRIMARY KEY (process_id, thread_id)
        ) WITHOUT ROWID;
"""

V2 = """
        CREATE TABLE rollups (
            hour INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            stack_id INTEGER NOT NULL,
            thread_id INTEGER NOT NULL,
            state INTEGER NOT NULL,
            count INTEGER NOT NULL,
            PRIMARY KEY (hour, target_id, process_id, stack_id, thread_id, state)
        ) WITHOUT ROWID;
        CREATE TABLE rollup_hours (hour INTEGER PRIMARY KEY);
"""

# A process that execs another program keeps its PID and start time: one entry per program.
V3 = """
        CREATE TABLE processes_v3 (
            id INTEGER PRIMARY KEY,
            target_id INTEGER NOT NULL REFERENCES targets (id),
            pid INTEGER NOT NULL,
            start_time INTEGER NOT NULL,
            python_version TEXT NOT NULL DEFAULT '',
            first_seen REAL NOT NULL,
            last_seen REAL NOT NULL,
            alive INTEGER NOT NULL DEFAULT 1,
            error TEXT,
            UNIQUE (pid, start_time, target_id)
        );
        INSERT INTO processes_v3 SELECT id, target_id, pid, start_time, python_version,
            first_seen, last_seen, alive, error FROM processes;
        DROP TABLE processes;
        ALTER TABLE processes_v3 RENAME TO processes;
        CREATE INDEX processes_by_target ON processes (target_id);
"""

V4 = """
        ALTER TABLE windows ADD COLUMN busy INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE windows ADD COLUMN idle INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE windows ADD COLUMN blocked INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE windows ADD COLUMN loop_busy INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE windows ADD COLUMN loop_idle INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE windows ADD COLUMN loop_blocked INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE window_counts (
            window INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            counts BLOB NOT NULL,
            PRIMARY KEY (window, target_id, process_id)
        );
        CREATE TABLE hour_counts (
            hour INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            counts BLOB NOT NULL,
            PRIMARY KEY (hour, target_id, process_id)
        );
        CREATE TABLE frames_v4 (
            id INTEGER PRIMARY KEY,
            hash INTEGER NOT NULL,
            text TEXT NOT NULL
        );
        CREATE INDEX frames_by_hash ON frames_v4 (hash);
"""

V5 = """
        ALTER TABLE targets ADD COLUMN role TEXT;
"""

#: The per-state task-samples of ``windows``: (column, task state code, of requests only).
TASK_COLUMNS: tuple[tuple[str, int, bool], ...] = tuple(
    (f"{'requests' if requests else 'tasks'}_{name}", code, requests)
    for requests in (False, True)
    for name, code in TASK_STATE_CODES.items()
)

V6 = (
    "\n".join(
        f"ALTER TABLE windows ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0;"
        for column in ("task_scans", *(c for c, _, _ in TASK_COLUMNS))
    )
    + """
        CREATE TABLE task_counts (
            window INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            counts BLOB NOT NULL,
            PRIMARY KEY (window, target_id, process_id)
        );
        CREATE TABLE task_hour_counts (
            hour INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            counts BLOB NOT NULL,
            PRIMARY KEY (hour, target_id, process_id)
        );
"""
)

V7 = """
        ALTER TABLE windows ADD COLUMN task_unread INTEGER NOT NULL DEFAULT 0;
"""

V8 = """
        ALTER TABLE windows ADD COLUMN gil INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE windows ADD COLUMN loop_gil INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE gil_holders (
            window INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            waiter INTEGER NOT NULL,
            holder INTEGER NOT NULL,
            thread TEXT NOT NULL,
            site INTEGER NOT NULL,
            samples INTEGER NOT NULL,
            PRIMARY KEY (window, target_id, process_id, waiter, holder, thread, site)
        ) WITHOUT ROWID;
        CREATE TABLE gil_hour_holders (
            hour INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            waiter INTEGER NOT NULL,
            holder INTEGER NOT NULL,
            thread TEXT NOT NULL,
            site INTEGER NOT NULL,
            samples INTEGER NOT NULL,
            PRIMARY KEY (hour, target_id, process_id, waiter, holder, thread, site)
        ) WITHOUT ROWID;
"""

V9 = """
        ALTER TABLE windows ADD COLUMN stalls_dropped INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE stalls (
            window INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            thread_id INTEGER NOT NULL,
            start REAL NOT NULL,
            duration REAL NOT NULL,
            ongoing INTEGER NOT NULL,
            thread TEXT NOT NULL,
            samples INTEGER NOT NULL,
            state TEXT NOT NULL,
            busy REAL NOT NULL,
            blocked REAL NOT NULL,
            gil REAL NOT NULL,
            gc REAL NOT NULL,
            site TEXT NOT NULL,
            holder TEXT,
            callback TEXT NOT NULL,
            task TEXT,
            request INTEGER,
            PRIMARY KEY (target_id, start, process_id, thread_id)
        ) WITHOUT ROWID;
        CREATE INDEX stalls_by_window ON stalls (window);
"""

V10 = """
        ALTER TABLE windows ADD COLUMN cpu_wait INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE windows ADD COLUMN loop_cpu_wait INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE stalls ADD COLUMN cpu_wait REAL NOT NULL DEFAULT 0;
"""

V11 = """
        ALTER TABLE stalls ADD COLUMN tied TEXT NOT NULL DEFAULT '';
        ALTER TABLE stalls ADD COLUMN throttle_periods INTEGER;
        ALTER TABLE stalls ADD COLUMN throttle_throttled INTEGER;
        ALTER TABLE stalls ADD COLUMN throttle_lost REAL;
        ALTER TABLE stalls ADD COLUMN throttle_span REAL;
"""

#: SQLite's ``application_id`` of a sidecar database ("SDCR"): set when the file is made, or
#: when an older sidecar's database (before schema 12) is first opened.
APPLICATION_ID = 0x53444352
#: Tables every sidecar database has had since schema 1: an older one without the id is
#: known by them.
OWN_TABLES = frozenset({"targets", "processes", "windows", "frames"})


V12 = f"""
        PRAGMA application_id = {APPLICATION_ID};
"""

V13 = """
        ALTER TABLE windows ADD COLUMN slow_requests_dropped INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE slow_requests (
            window INTEGER NOT NULL,
            target_id INTEGER NOT NULL,
            process_id INTEGER NOT NULL,
            start REAL NOT NULL,
            task TEXT NOT NULL,
            start_from TEXT NOT NULL,
            duration REAL NOT NULL,
            duration_max REAL NOT NULL,
            ongoing INTEGER NOT NULL,
            framework TEXT NOT NULL,
            method TEXT NOT NULL,
            path TEXT NOT NULL,
            route TEXT NOT NULL,
            handler TEXT,
            trace TEXT,
            trace_header TEXT,
            scans INTEGER NOT NULL,
            stacks TEXT NOT NULL,
            other INTEGER NOT NULL,
            PRIMARY KEY (target_id, start, process_id, task)
        ) WITHOUT ROWID;
        CREATE INDEX slow_requests_by_window ON slow_requests (window);
        CREATE INDEX slow_requests_by_trace ON slow_requests (trace);
"""

#: The columns of ``slow_requests``, in the order rows are written.
REQUEST_COLUMNS = (
    "window",
    "target_id",
    "process_id",
    "start",
    "task",
    "start_from",
    "duration",
    "duration_max",
    "ongoing",
    "framework",
    "method",
    "path",
    "route",
    "handler",
    "trace",
    "trace_header",
    "scans",
    "stacks",
    "other",
)

#: A stall's seconds in each state, its columns of ``stalls``.
STALL_SECONDS = ("busy", "blocked", "gil", "cpu_wait", "gc")
#: The throttling around a stall, its columns of ``stalls`` (``classify.stalls.Throttled``'s
#: fields in order).
STALL_THROTTLE = ("throttle_periods", "throttle_throttled", "throttle_lost", "throttle_span")
#: The columns of ``stalls``, in the order rows are written.
STALL_COLUMNS = (
    "window",
    "target_id",
    "process_id",
    "thread_id",
    "start",
    "duration",
    "ongoing",
    "thread",
    "samples",
    "state",
    *STALL_SECONDS,
    "site",
    "holder",
    "callback",
    "task",
    "request",
    "tied",
    *STALL_THROTTLE,
)
#: Seconds in an hour: the key of ``hour_counts`` (and ``rollup_hours``) is a multiple of it.
HOUR = 3600
#: The packed counts per window and per hour, of the threads and of the tasks.
COUNT_TABLES: tuple[tuple[str, str], ...] = (
    ("window_counts", "hour_counts"),
    ("task_counts", "task_hour_counts"),
)
#: Who held the GIL while a loop thread waited, per window and per hour.
HOLDER_TABLES = ("gil_holders", "gil_hour_holders")
#: The columns of a holder row besides its window (or hour) and its samples: its key.
HOLDER_KEY = ("target_id", "process_id", "waiter", "holder", "thread", "site")


def frame_hash(text: str) -> int:
    """The 64-bit key frames are found by (their text is stored once, not again in an index)."""
    return int.from_bytes(blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


#: The per-state sums of ``windows``: (column, state code, event-loop threads only).
SUM_COLUMNS: tuple[tuple[str, int, bool], ...] = tuple(
    (f"{'loop_' if loop else ''}{name}", code, loop)
    for loop in (False, True)
    for name, code in STATE_CODES.items()
)
#: (state code, on an event-loop stack) → the indexes in SUM_COLUMNS its samples add to.
SUMS_OF: dict[tuple[int, bool], tuple[int, ...]] = {
    (code, on_loop): tuple(
        i
        for i, (_, state, loop) in enumerate(SUM_COLUMNS)
        if state == code and (on_loop or not loop)
    )
    for code in STATE_CODES.values()
    for on_loop in (False, True)
}


#: Every summed column of ``windows`` (downsampling adds them up).
WINDOW_SUMS: tuple[str, ...] = (
    "ticks",
    *(c for c, _, _ in SUM_COLUMNS),
    "task_scans",
    *(c for c, _, _ in TASK_COLUMNS),
    "task_unread",
    "stalls_dropped",
    "slow_requests_dropped",
)


def _pack_rows(conn: sqlite3.Connection, source: str, key: str, target: str) -> None:
    """Packs the rows of ``source`` into one blob per (``key``, target, process)."""
    cursor = conn.execute(
        f"SELECT {key}, target_id, process_id, stack_id, thread_id, state, count FROM {source} "
        f"ORDER BY {key}, target_id, process_id"
    )
    current: tuple[int, int, int] | None = None
    entries: counts.Entries = {}
    out: list[tuple[int, int, int, bytes]] = []
    for when, target_id, process_id, stack, thread, state, count in cursor:
        if (when, target_id, process_id) != current:
            if current is not None:
                out.append((*current, counts.pack(entries)))
            current, entries = (when, target_id, process_id), {}
        entries[(stack, thread, state)] = entries.get((stack, thread, state), 0) + count
        if len(out) >= 500:
            conn.executemany(f"INSERT INTO {target} VALUES (?, ?, ?, ?)", out)
            out = []
    if current is not None:
        out.append((*current, counts.pack(entries)))
    conn.executemany(f"INSERT INTO {target} VALUES (?, ?, ?, ?)", out)


#: The sums version 4 added: the states there were then (gil came with version 8, cpu_wait
#: with version 10).
V4_SUM_COLUMNS = tuple(
    (column, code, loop)
    for column, code, loop in SUM_COLUMNS
    if code in (STATE_CODES["busy"], STATE_CODES["idle"], STATE_CODES["blocked"])
)


def v4(conn: sqlite3.Connection) -> None:
    """Packs the rows of ``samples`` and ``rollups`` into blobs, fills the windows' sums, and
    finds frames by a hash of their text instead of a second copy of it."""
    for statement in V4.split(";"):
        if statement.strip():  # one by one: a script would commit the transaction
            conn.execute(statement)
    _pack_rows(conn, "samples", "window", "window_counts")
    _pack_rows(conn, "rollups", "hour", "hour_counts")
    for column, code, loop in V4_SUM_COLUMNS:
        conn.execute(
            f"UPDATE windows SET {column} = (SELECT COALESCE(SUM(s.count), 0) FROM samples s "
            "JOIN stacks st ON st.id = s.stack_id WHERE s.window = windows.window AND "
            "s.target_id = windows.target_id AND s.process_id = windows.process_id AND "
            f"s.state = ? AND st.loop >= ?)",
            (code, int(loop)),
        )
    conn.execute("DROP TABLE samples")
    conn.execute("DROP TABLE rollups")
    conn.executemany(
        "INSERT INTO frames_v4 VALUES (?, ?, ?)",
        ((i, frame_hash(text), text) for i, text in conn.execute("SELECT id, text FROM frames")),
    )
    conn.execute("DROP TABLE frames")
    conn.execute("ALTER TABLE frames_v4 RENAME TO frames")


#: Migrations in order (SQL scripts, or functions of a connection in a transaction); the
#: database's ``user_version`` counts those applied.
MIGRATIONS: tuple[str | Callable[[sqlite3.Connection], None], ...] = (
    V1,
    V2,
    V3,
    v4,
    V5,
    V6,
    V7,
    V8,
    V9,
    V10,
    V11,
    V12,
    V13,
)


def claim(conn: sqlite3.Connection) -> None:
    """Makes sure the file is a sidecar database, or a new empty one, before anything is
    written to it; raises ``StoreError`` in one line, changing nothing, for another program's
    database or one whose schema version no sidecar writes."""
    app = int(conn.execute("PRAGMA application_id").fetchone()[0])
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    tables = {
        str(name) for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    if app not in (0, APPLICATION_ID):
        raise StoreError(
            f"it is another program's database (SQLite application_id {app:#010x}, not "
            "sidecar's): use another --db"
        )
    if version < 0 or (version == 0 and tables):
        listed = ", ".join(sorted(tables)[:3]) + (", …" if len(tables) > 3 else "")
        raise StoreError(
            f"it is not a sidecar database (schema version {version}"
            + (f", tables {listed}" if tables else "")
            + "): use another --db"
        )
    if app == 0 and version > 0 and not OWN_TABLES.issubset(tables):
        raise StoreError(
            f"it is not a sidecar database (schema version {version} without sidecar's "
            "tables): use another --db"
        )


def migrate(conn: sqlite3.Connection) -> int:
    """Applies pending migrations, each in its own transaction, to a file ``claim`` takes;
    returns the schema version."""
    claim(conn)
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > len(MIGRATIONS):
        raise StoreError(
            f"it has schema version {version}, newer than this sidecar's ({len(MIGRATIONS)}): "
            "upgrade sidecar or use another --db"
        )
    for number in range(version, len(MIGRATIONS)):
        step = MIGRATIONS[number]
        try:
            if isinstance(step, str):
                conn.executescript(f"BEGIN;\n{step}\nPRAGMA user_version = {number + 1};\nCOMMIT;")
            else:
                conn.execute("BEGIN")
                step(conn)
                conn.execute(f"PRAGMA user_version = {number + 1}")
                conn.execute("COMMIT")
        except Exception:
            if conn.in_transaction:
                conn.rollback()
            raise
    return len(MIGRATIONS)
