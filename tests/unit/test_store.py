"""The store on real SQLite files: interning, downsampling, retention, collection, locking."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.store import ProcessRecord, Store, StoreLocked, WindowBatch, counts
from sidecar.store.query import Range, Reader, StoreUnavailable
from sidecar.store.schema import MIGRATIONS, frame_hash
from tests.support.batches import window_batch

FRAME = st.text(
    alphabet=st.characters(blacklist_characters=";\n", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)
STACK = st.lists(FRAME, min_size=1, max_size=12).map(";".join)


def open_store(path: Path) -> tuple[Store, ProcessRecord]:
    store = Store(path)
    record = ProcessRecord(4242, 99, "python app.py", time.time())
    store.attach(record)
    return store, record


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(stacks=st.dictionaries(STACK, st.integers(1, 1000), min_size=1, max_size=30))
def test_stacks_come_back_exactly(tmp_path: Path, stacks: dict[str, int]) -> None:
    db = tmp_path / f"{abs(hash(frozenset(stacks.items())))}.db"
    store, record = open_store(db)
    now = int(time.time()) // 10 * 10
    rows = [(stack, 1, "busy", count) for stack, count in stacks.items()]
    store.write([window_batch(record.key, now, 10, 100, rows)])
    store.close()
    profile = Reader(db).profile(None, Range.aligned(now - 10, now + 10, 10))
    assert profile.stacks == stacks


def test_deep_and_shared_stacks_share_their_prefix(tmp_path: Path) -> None:
    db = tmp_path / "deep.db"
    store, record = open_store(db)
    base = ";".join(f"f{i} (m.py:{i})" for i in range(2000))
    stacks = {f"{base};leaf{i} (m.py:1)": i + 1 for i in range(50)}
    now = int(time.time()) // 10 * 10
    store.write(
        [window_batch(record.key, now, 10, 10, [(s, 1, "idle", c) for s, c in stacks.items()])]
    )
    store.close()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0] == 2000 + 50
    conn.close()
    profile = Reader(db).profile(None, Range.aligned(now, now + 10, 10))
    assert profile.stacks == {f"{s};[idle]": c for s, c in stacks.items()}


def test_downsampling_keeps_every_count(tmp_path: Path) -> None:
    db = tmp_path / "down.db"
    store, record = open_store(db)
    end = int(time.time()) // 1800 * 1800 - 6 * 3600
    start = end - 2 * 3600
    for window in range(start, end, 10):
        rows = [("a;b", 1, "busy", 2), (f"a;c{window % 3}", 2, "blocked", 1)]
        store.write([window_batch(record.key, window, 10, 3, rows)])
    while store.downsample(time.time()):
        pass
    store.close()
    conn = sqlite3.connect(db)
    widths = {w for (w,) in conn.execute("SELECT DISTINCT width FROM windows")}
    assert widths == {1800}
    assert conn.execute("SELECT SUM(ticks) FROM windows").fetchone()[0] == 3 * 720
    conn.close()
    profile = Reader(db).profile(None, Range.aligned(start, end, 10))
    assert profile.stacks["a;b"] == 2 * 720
    assert sum(c for s, c in profile.stacks.items() if s.endswith("[blocked]")) == 720


def test_retention_and_collection_free_what_is_old(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    store, record = open_store(db)
    now = int(time.time()) // 10 * 10
    store.write([window_batch(record.key, now - 1000, 10, 1, [("old;frame", 1, "busy", 1)])])
    store.write([window_batch(record.key, now, 10, 1, [("new;frame", 1, "busy", 1)])])
    while store.prune(now - 500):
        pass
    store.collect_stacks()
    store.close()
    conn = sqlite3.connect(db)
    frames = {t for (t,) in conn.execute("SELECT text FROM frames")}
    assert frames == {"new", "frame"}
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_one_writer_per_database(tmp_path: Path) -> None:
    db = tmp_path / "locked.db"
    store = Store(db)
    with pytest.raises(StoreLocked, match="in use by another sidecar"):
        Store(db)
    store.close()
    Store(db).close()  # free again once the first closed


def test_readers_in_other_processes_see_each_window_once_committed(tmp_path: Path) -> None:
    """The store's checks of its file (``check_file``) keep SQLite's locks on it: a reader
    in another process that closes its connection never takes the store for gone and deletes
    the WAL it writes to (writes after that went unseen until the next checkpoint)."""
    db = tmp_path / "seen.db"
    store, record = open_store(db)
    count = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); " + (
        "print(c.execute('SELECT COUNT(*) FROM windows').fetchone()[0]); c.close()"
    )
    now = int(time.time())
    for n in range(3):
        store.write(
            [window_batch(record.key, now + n, 1, 100, [("main (app.py:1)", 1, "busy", 1)])]
        )
        assert store.check_file(probe=True) is None
        seen = subprocess.run(
            [sys.executable, "-c", count, str(db)], capture_output=True, text=True, check=True
        )
        assert int(seen.stdout) == n + 1
    store.close()


def test_restarted_command_keeps_its_target_and_workers_get_their_own(tmp_path: Path) -> None:
    store = Store(tmp_path / "t.db")
    now = time.time()
    first = store.attach(ProcessRecord(1, 10, "python app.py", now))
    worker = store.attach(ProcessRecord(2, 11, "python app.py", now))
    assert worker[0] != first[0]
    store.mark_gone((1, 10), now + 1)
    restarted = store.attach(ProcessRecord(3, 12, "python app.py", now + 2))
    assert restarted[0] == first[0] and restarted[1] != first[1]
    again = store.attach(ProcessRecord(3, 12, "python app.py", now + 3))
    assert again == restarted
    store.close()


def test_rollups_give_the_same_profiles_as_the_windows(tmp_path: Path) -> None:
    db = tmp_path / "roll.db"
    store, record = open_store(db)
    hour = 3600
    base = (int(time.time()) // hour - 5) * hour  # five whole hours ago
    for window in range(base - 600, base + 3 * hour + 600, 10):
        rows = [(f"main;h{window // hour % 4}", 1, "busy", 2), ("main;io", 7, "idle", 1)]
        store.write([window_batch(record.key, window, 10, 3, rows)])
    spans = [
        Range(base - 600, base + 3 * hour + 600),  # whole hours and ragged edges
        Range(base + 1200, base + 2 * hour + 30),
        Range(base, base + hour),
    ]
    before = [Reader(db).profile(None, span).stacks for span in spans]
    threads_before = Reader(db).profile(None, spans[0], thread="7").stacks
    assert store.roll_up(time.time()) >= 3
    reader = Reader(db)
    assert reader.rolled_hours(spans[0]) == [base, base + hour, base + 2 * hour]
    assert [reader.profile(None, span).stacks for span in spans] == before
    assert reader.profile(None, spans[0], thread="7").stacks == threads_before
    # a window that arrives after its hour was rolled up still counts once
    store.write([window_batch(record.key, base + 5, 10, 1, [("main;late", 1, "busy", 4)])])
    assert Reader(db).profile(None, spans[0]).stacks["main;late"] == 4
    # retention that takes part of an hour takes its rollup too
    while store.prune(base + 30):
        pass
    assert Reader(db).rolled_hours(spans[0]) == [base + hour, base + 2 * hour]
    late = Reader(db).profile(None, spans[0]).stacks
    assert "main;late" not in late
    store.close()


ENTRY = st.tuples(st.integers(1, 2**40), st.integers(0, 2**63), st.sampled_from([0, 1, 2]))


@given(st.dictionaries(ENTRY, st.integers(1, 2**62), max_size=300))
def test_packed_counts_round_trip(entries: dict[tuple[int, int, int], int]) -> None:
    blob = counts.pack(entries)
    assert counts.unpack_dict(blob) == entries
    assert counts.merge([blob, None, blob]) == counts.pack({k: 2 * c for k, c in entries.items()})


ONE = counts.pack({(1, 2, 0): 3})


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"not zlib",
        zlib.compress(b"\x01\x00"),  # a short header
        zlib.compress(b"\x09" + bytes(8)),  # another version
        ONE[:-2],  # cut short
        zlib.compress(zlib.decompress(ONE) + b"x"),  # a byte too many
    ],
)
def test_damaged_packed_counts_are_refused(blob: bytes) -> None:
    with pytest.raises(counts.CountsError):
        list(counts.unpack(blob))


def test_a_damaged_window_is_one_clear_error_for_readers(tmp_path: Path) -> None:
    db = tmp_path / "damaged.db"
    store, record = open_store(db)
    now = int(time.time()) // 10 * 10
    store.write([window_batch(record.key, now, 10, 1, [("main;f", 1, "busy", 1)])])
    store.db.execute("UPDATE window_counts SET counts = x'00'")
    store.close()
    with pytest.raises(StoreUnavailable, match="damaged"):
        Reader(db).profile(None, Range.aligned(now, now + 10, 10))


def test_a_window_written_twice_adds_up(tmp_path: Path) -> None:
    """A window flushed in two parts (a sampler stopped and started again within it)."""
    db = tmp_path / "twice.db"
    store, record = open_store(db)
    now = int(time.time()) // 10 * 10
    for _ in range(2):
        rows = [
            ("loop;select", 1, "idle", 5),
            ("loop;handler", 1, "busy", 2),
            ("w;x", 9, "busy", 1),
        ]
        store.write([window_batch(record.key, now, 10, 8, rows)])
    store.close()
    reader = Reader(db)
    span = Range.aligned(now, now + 10, 10)
    assert reader.profile(None, span).stacks == {
        "loop;select;[idle]": 10,
        "loop;handler": 4,
        "w;x": 2,
    }
    assert reader.targets()[0]["samples"] == 16
    buckets = reader.timeline(None, span)["buckets"]
    assert buckets == [{"t": now, "busy": 6, "idle": 10, "blocked": 0, "gil": 0, "cpu_wait": 0}]


V3_STACKS = {
    1: "main (app.py:1)",
    2: "main (app.py:1);run (asyncio/base_events.py:600)",
    3: "w (t.py:2)",
}


def test_a_version_3_database_keeps_its_profiles_and_timeline(tmp_path: Path) -> None:
    """Schema 4 packs the rows of schema 3: the same profiles, filters and timeline after."""
    db = tmp_path / "v3.db"
    conn = sqlite3.connect(db)
    for number, script in enumerate(MIGRATIONS[:3]):
        assert isinstance(script, str)
        conn.executescript(f"BEGIN;{script};PRAGMA user_version = {number + 1};COMMIT;")
    conn.execute("INSERT INTO targets VALUES (1, 'app', 'app', 'aiohttp', 'asyncio', 1, 2)")
    conn.execute("INSERT INTO processes VALUES (1, 1, 42, 7, '3.11', 1, 2, 0, NULL)")
    conn.executemany(
        "INSERT INTO frames VALUES (?, ?)",
        [(1, "main (app.py:1)"), (2, "run (asyncio/base_events.py:600)"), (3, "w (t.py:2)")],
    )
    conn.executemany("INSERT INTO nodes VALUES (?, ?, ?)", [(1, 0, 1), (2, 1, 2), (3, 0, 3)])
    conn.executemany("INSERT INTO stacks VALUES (?, ?, ?)", [(1, 0, 1), (2, 1, 2), (3, 0, 1)])
    conn.execute("INSERT INTO threads VALUES (1, 11, 'MainThread')")
    hour = 3600 * 100
    rows = []
    for window in range(hour - 20, hour + 3600 + 20, 10):
        rows += [(window, 1, 1, 2, 11, 1, 10, 7), (window, 1, 1, 1, 11, 0, 10, 2)]
        rows += [(window, 1, 1, 3, 12, 2, 10, 1)]
    conn.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.executemany(
        "INSERT INTO windows VALUES (?, 1, 1, 10, 10)", [(w,) for w in {r[0] for r in rows}]
    )
    conn.execute(
        "INSERT INTO rollups SELECT ?, target_id, process_id, stack_id, thread_id, state, "
        "SUM(count) FROM samples WHERE window >= ? AND window < ? "
        "GROUP BY target_id, process_id, stack_id, thread_id, state",
        (hour, hour, hour + 3600),
    )
    conn.execute("INSERT INTO rollup_hours VALUES (?)", (hour,))
    conn.commit()
    conn.close()

    Store(db).close()
    assert query_one(db, "PRAGMA user_version") == len(MIGRATIONS)
    assert query_one(db, "PRAGMA integrity_check") == "ok"
    reader = Reader(db)
    span = Range(hour - 20, hour + 3600 + 20)
    assert reader.rolled_hours(span) == [hour]
    windows = 364
    assert reader.profile(1, span).stacks == {
        f"{V3_STACKS[2]};[idle]": 7 * windows,
        V3_STACKS[1]: 2 * windows,
        f"{V3_STACKS[3]};[blocked]": windows,
    }
    assert reader.profile(1, span, {"busy"}).stacks == {V3_STACKS[1]: 2 * windows}
    assert reader.profile(1, span, thread="MainThread").total == 9 * windows
    assert reader.profile(1, span, thread="12").total == windows
    timeline = reader.timeline(1, span, step=3600)
    assert timeline["loop_threads_only"] is True  # only stack 2 runs the event loop
    assert [b["idle"] for b in timeline["buckets"]] == [14, 7 * 360, 14]
    assert {b["busy"] + b["blocked"] for b in timeline["buckets"]} == {0}
    assert {text for (text,) in query_all(db, "SELECT text FROM frames")} == {
        "main (app.py:1)", "run (asyncio/base_events.py:600)", "w (t.py:2)"
    }  # fmt: skip
    store, record = open_store(db)  # new stacks reuse the migrated frames
    store.write([window_batch(record.key, hour, 10, 1, [(V3_STACKS[1], 11, "busy", 1)])])
    store.close()
    assert query_one(db, "SELECT COUNT(*) FROM frames") == 3


def query_all(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return list(conn.execute(sql).fetchall())
    finally:
        conn.close()


def query_one(db: Path, sql: str) -> object:
    return query_all(db, sql)[0][0]


TASKS = [
    ("RequestHandler.start (aiohttp/web_protocol.py:1);RequestHandler._handle_request "
     "(aiohttp/web_protocol.py:2);fetch (app.py:3)", "waiting", 4),
    ("RequestHandler.start (aiohttp/web_protocol.py:1);RequestHandler._handle_request "
     "(aiohttp/web_protocol.py:2);fetch (app.py:3)", "ready", 1),
    ("ticker (app.py:9)", "running", 2),
]  # fmt: skip


def task_batch(record: ProcessRecord, window: int, scans: int = 2, unread: int = 0) -> WindowBatch:
    """A window with one thread stack and the TASKS counted over ``scans`` scans, which found
    ``unread`` tasks past their bound."""
    rows = [("main (app.py:1)", 1, "busy", 3)]
    return window_batch(
        record.key, window, 10, 3, rows, tasks=list(TASKS), task_scans=scans, task_unread=unread
    )


def test_tasks_are_stored_beside_threads_and_kept_alike(tmp_path: Path) -> None:
    """Task windows are read back as task profiles (with their leaves), their scans give
    tasks in flight, requests are told by their root; downsampling and hourly rollups keep
    every task-sample, retention takes them, and collection keeps the stacks tasks use."""
    from sidecar.store.taskquery import NoTaskScans, TaskReader

    db = tmp_path / "tasks.db"
    store, record = open_store(db)
    hour = 3600
    base = (int(time.time()) // hour - 5) * hour
    for window in range(base, base + 2 * hour, 10):
        store.write([task_batch(record, window)])
    windows = 720
    tasks = TaskReader(Reader(db))
    span = Range(base, base + 2 * hour)
    expected = {f"{stack};[{state}]": count * windows for stack, state, count in TASKS}
    assert tasks.profile(1, span).stacks == expected
    assert tasks.profile(1, span, which="background").stacks == {
        "ticker (app.py:9);[running]": 2 * windows
    }
    assert tasks.profile(1, span, {"ready"}).total == windows
    flight = tasks.in_flight(1, span)
    assert (flight.scans, flight.mean, flight.max, flight.requests) == (2 * windows, 3.5, 3.5, 2.5)
    assert flight.states == {"running": 1.0, "ready": 0.5, "waiting": 2.0}
    line = tasks.timeline(1, span, step=hour)["buckets"]
    assert line == [
        {
            "t": t,
            "running": 1.0,
            "ready": 0.5,
            "waiting": 2.0,
            "requests": 2.5,
            "background": 1.0,
            "unread": 0.0,
        }
        for t in (base, base + hour)
    ]
    assert store.roll_up(time.time()) == 2
    while store.downsample(time.time()):
        pass
    tasks = TaskReader(Reader(db))
    assert Reader(db).rolled_hours(span) == [base, base + hour]
    assert tasks.profile(1, span).stacks == expected
    assert tasks.profile(1, Range(base + 1800, base + 2 * hour)).total == 3.5 * 2 * windows * 3 / 4
    assert tasks.in_flight(1, span).mean == 3.5
    store.collect_stacks()
    assert tasks.profile(1, span).stacks == expected
    while store.prune(base + hour):
        pass
    store.collect_stacks()
    assert tasks.profile(1, span).total == 3.5 * windows
    while store.prune(base + 2 * hour):
        pass
    store.collect_stacks()
    with pytest.raises(NoTaskScans, match="not scanned in this range"):
        tasks.profile(1, span)
    assert query_one(db, "SELECT COUNT(*) FROM task_counts") == 0
    assert query_one(db, "SELECT COUNT(*) FROM frames") == 0
    store.close()


def at_schema(db: Path, version: int) -> sqlite3.Connection:
    """A new database made by the first ``version`` migrations, as an older sidecar left it."""
    conn = sqlite3.connect(db, isolation_level=None)
    for number, step in enumerate(MIGRATIONS[:version]):
        conn.execute("BEGIN")
        if isinstance(step, str):
            for statement in step.split(";"):
                if statement.strip():
                    conn.execute(statement)
        else:
            step(conn)
        conn.execute(f"PRAGMA user_version = {number + 1}")
        conn.execute("COMMIT")
    return conn


def seed_one_stack(conn: sqlite3.Connection) -> None:
    """Target 1 (aiohttp), its process 1 and one stored stack (id 1): ``main (app.py:1)``,
    rows as every schema from 5 on keeps them."""
    conn.execute(
        "INSERT INTO targets VALUES "
        "(1, 'python app.py', 'python app.py', 'aiohttp', 'asyncio', 1, 2, NULL)"
    )
    conn.execute("INSERT INTO processes VALUES (1, 1, 4242, 99, '3.11', 1, 2, 0, NULL)")
    conn.execute(
        "INSERT INTO frames VALUES (1, ?, 'main (app.py:1)')", (frame_hash("main (app.py:1)"),)
    )
    conn.execute("INSERT INTO nodes VALUES (1, 0, 1)")
    conn.execute("INSERT INTO stacks VALUES (1, 0, 1)")


def test_a_version_5_database_gains_tasks_and_keeps_its_threads(tmp_path: Path) -> None:
    """Schema 6 adds the tasks to a database of schema 5: its thread windows read the same,
    they have no task scans (a clear refusal, not an empty task profile), and new windows
    store tasks."""
    from sidecar.store.taskquery import NoTaskScans, TaskReader

    db = tmp_path / "v5.db"
    conn = at_schema(db, 5)
    now = int(time.time()) // 10 * 10
    seed_one_stack(conn)
    conn.execute(
        "INSERT INTO windows (window, target_id, process_id, width, ticks, busy) "
        "VALUES (?, 1, 1, 10, 3, 3)",
        (now - 100,),
    )
    conn.execute(
        "INSERT INTO window_counts VALUES (?, 1, 1, ?)", (now - 100, counts.pack({(1, 1, 0): 3}))
    )
    conn.close()
    before = Reader(db).profile(1, Range(now - 100, now + 10)).stacks
    assert before == {"main (app.py:1)": 3}
    store, record = open_store(db)
    assert query_one(db, "PRAGMA user_version") == len(MIGRATIONS)
    assert query_one(db, "PRAGMA integrity_check") == "ok"
    assert Reader(db).profile(1, Range(now - 100, now + 10)).stacks == before
    assert Reader(db).timeline(1, Range(now - 100, now + 10))["buckets"][0]["busy"] == 3
    with pytest.raises(NoTaskScans):
        TaskReader(Reader(db)).profile(1, Range(now - 100, now))
    store.write([task_batch(record, now)])
    store.close()
    assert TaskReader(Reader(db)).in_flight(1, Range(now - 100, now + 10)).mean == 3.5


def test_a_version_6_database_gains_unread_tasks_and_keeps_its_tasks(tmp_path: Path) -> None:
    """Schema 7 adds each window's tasks past the scans' bound: a window of schema 6 reads
    the same (none unread, every task read), new windows count their unread tasks in flight,
    and downsampling keeps them."""
    from sidecar.store.taskquery import TaskReader

    db = tmp_path / "v6.db"
    conn = at_schema(db, 6)
    old = (int(time.time()) // 3600 - 24) * 3600  # old enough to be downsampled, in one span
    seed_one_stack(conn)
    conn.execute(
        "INSERT INTO windows (window, target_id, process_id, width, ticks, busy, task_scans, "
        "tasks_waiting) VALUES (?, 1, 1, 10, 3, 3, 2, 8)",
        (old,),
    )
    conn.execute("INSERT INTO task_counts VALUES (?, 1, 1, ?)", (old, counts.pack({(1, 0, 2): 8})))
    conn.close()
    store, record = open_store(db)
    assert query_one(db, "PRAGMA user_version") == len(MIGRATIONS)
    assert query_one(db, "PRAGMA integrity_check") == "ok"
    assert query_one(db, "SELECT task_unread FROM windows") == 0
    before = TaskReader(Reader(db)).in_flight(1, Range(old, old + 10))
    assert (before.scans, before.mean, before.unread, before.sampled) == (2, 4.0, 0.0, 1.0)
    # two windows of the same minute, 3.5 tasks read and 10.5 unread a scan: 14 in flight
    for window in (old + 10, old + 20):
        store.write([task_batch(record, window, unread=21)])
    later = Range(old + 10, old + 30)
    flight = TaskReader(Reader(db)).in_flight(1, later)
    assert (flight.mean, flight.max, flight.unread, flight.sampled) == (14.0, 14.0, 10.5, 0.25)
    assert flight.background == 1.0  # of the tasks read: the unread are of no kind
    while store.downsample(time.time()):
        pass
    assert query_one(db, "SELECT SUM(task_unread) FROM windows") == 42
    assert query_one(db, "SELECT COUNT(*) FROM windows") == 1
    whole = TaskReader(Reader(db)).in_flight(1, Range(old - 3600, old + 3600))
    assert whole.unread == pytest.approx(42 / 6)
    assert whole.mean == pytest.approx((8 + 2 * 7 + 42) / 6)
    store.close()
