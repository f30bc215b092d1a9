"""The database schema and its migrations, applied in order and recorded in ``user_version``.

Tables:
- ``targets``: logical targets, one per running copy of a command; a restart of the same
  command keeps its target, concurrent workers of one command get one target each (same group).
- ``processes``: each process a target has had, identified by PID and start time; a process
  that execs another program (same PID and start time, another command line) gets a new entry
  in the new program's target.
- ``frames``: every frame text once.
- ``nodes``: stacks as a prefix tree of (parent node, frame); a stack is its leaf node, so
  stacks that share a prefix share its nodes (parent 0 is the root).
- ``stacks``: per stack (leaf node) that samples refer to: its loop flag and depth.
- ``samples``: (window, target, process, stack, thread, state) → count, the bulk of the data.
- ``windows``: one row per process and window: sampling ticks, so gaps are visible.
- ``threads``: thread names per process.
- ``rollups``: the samples of each complete hour summed per (target, process, stack, thread,
  state), beside the windows, so a long range reads one row per stack and hour;
  ``rollup_hours`` lists the hours rolled up.
"""

from __future__ import annotations

from sqlite_utils import Database

STATE_CODES = {"busy": 0, "idle": 1, "blocked": 2}
STATE_NAMES = {code: name for name, code in STATE_CODES.items()}


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

#: Migrations in order (SQL scripts); the database's ``user_version`` counts those applied.
MIGRATIONS: tuple[str, ...] = (V1, V2, V3)


def migrate(db: Database) -> int:
    """Applies pending migrations, each in its own transaction; returns the schema version."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > len(MIGRATIONS):
        raise RuntimeError(
            f"the database has schema version {version}, newer than this sidecar knows "
            f"({len(MIGRATIONS)}); upgrade sidecar or use another --db"
        )
    for number in range(version, len(MIGRATIONS)):
        script = f"BEGIN;\n{MIGRATIONS[number]}\nPRAGMA user_version = {number + 1};\nCOMMIT;"
        try:
            db.conn.executescript(script)
        except Exception:
            if db.conn.in_transaction:
                db.conn.rollback()
            raise
    return len(MIGRATIONS)
