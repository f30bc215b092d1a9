"""The ``gil`` state in the store (schema 8) on real SQLite files: a database of schema 7
migrated with its data intact, gil samples summed and read back with their ``[gil]`` leaf, and
who held the GIL while the loop waited, kept by downsampling, hourly rollups, retention and
collection like the samples themselves."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from sidecar.sample.messages import HolderRow
from sidecar.store import ProcessRecord, Store, WindowBatch, counts
from sidecar.store.query import Range, Reader
from sidecar.store.schema import MIGRATIONS, STATE_CODES, frame_hash
from tests.support.batches import window_batch
from tests.unit.test_store import at_schema, open_store, query_all, query_one

#: An event loop's frames (asyncio's run_forever enters it) and where it waits.
LOOP = "main (app.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:600)"
POLL = f"{LOOP};select (selectors.py:468)"
HANDLER = f"{LOOP};handler (app.py:20)"
#: The thread that crunches, and its innermost frame: the holder's site.
CRUNCH = "run (threading.py:1010);crunch (app.py:7)"
SITE = "crunch (app.py:7)"
LOOP_TID, CRUNCHER_TID = 11, 12


def gil_batch(
    record: ProcessRecord,
    window: int,
    waited: int = 6,
    unnamed: HolderRow | None = None,
    more: tuple[HolderRow, ...] = (),
) -> WindowBatch:
    """A window of a loop starved by a crunching thread: the loop waits for the GIL in
    ``waited`` samples (5 of 6 held by 'cruncher' in crunch, 1 with no holder at that instant,
    a GIL being handed over), busy in 2 of them (one while it collected garbage) and idle in 1;
    the cruncher is busy throughout; ``unnamed`` takes the place of the second holding, and
    ``more`` holdings follow."""
    rows = [
        (HANDLER, LOOP_TID, "gil", waited),
        (HANDLER, LOOP_TID, "busy", 1),
        (f"{HANDLER};[gc]", LOOP_TID, "busy", 1),
        (POLL, LOOP_TID, "idle", 1),
        (CRUNCH, CRUNCHER_TID, "busy", 9),
    ]
    holders = [
        (LOOP_TID, CRUNCHER_TID, "cruncher", SITE, waited * 5 // 6),
        unnamed or (LOOP_TID, 0, "", "", waited - waited * 5 // 6),
        *more,
    ]
    names = {LOOP_TID: "MainThread", CRUNCHER_TID: "cruncher"}
    return window_batch(record.key, window, 10, 9, rows, names, gil_holders=holders)


def test_gil_samples_and_their_holders_come_back(tmp_path: Path) -> None:
    """gil rows are summed per window (of all threads and of the loop's), read back with
    their [gil] leaf and [gc] frames as written, kept by a state filter of gil; the holders
    come back by thread name and site, without the samples that had none; a holder the sampler
    had no name for is named by its id."""
    db = tmp_path / "gil.db"
    store, record = open_store(db)
    now = int(time.time()) // 10 * 10
    store.write([gil_batch(record, now)])
    # a window flushed in two parts adds up; a thread without a name holds the GIL in it
    late = gil_batch(record, now, waited=12, unnamed=(LOOP_TID, 77, "", "spin (other.py:3)", 2))
    store.write([late])
    store.close()
    reader = Reader(db)
    span = Range.aligned(now, now + 10, 10)
    assert reader.profile(1, span).stacks == {
        f"{HANDLER};[gil]": 18,
        HANDLER: 2,
        f"{HANDLER};[gc]": 2,
        f"{POLL};[idle]": 2,
        CRUNCH: 18,
    }
    assert reader.profile(1, span, {"gil"}).stacks == {f"{HANDLER};[gil]": 18}
    assert reader.profile(1, span, {"busy"}, thread="MainThread").total == 4
    (bucket,) = reader.timeline(1, span)["buckets"]
    assert bucket == {"t": now, "busy": 4, "idle": 2, "blocked": 0, "gil": 18, "cpu_wait": 0}
    assert query_all(db, "SELECT busy, gil, loop_busy, loop_gil FROM windows") == [(22, 18, 4, 18)]
    assert reader.gil_holders(1, span) == {
        ("cruncher", SITE): 5 + 10,
        ("thread 77", "spin (other.py:3)"): 2,
    }
    assert reader.gil_holders(None, span) == reader.gil_holders(1, span)
    assert reader.gil_holders(1, Range(now + 10, now + 20)) == {}
    # every holder row as written, the one without a holder too: nothing is lost
    assert query_all(db, "SELECT holder, SUM(samples) FROM gil_holders GROUP BY holder") == [
        (0, 1),
        (CRUNCHER_TID, 15),
        (77, 2),
    ]


def test_a_version_7_database_gains_gil_and_keeps_its_windows(tmp_path: Path) -> None:
    """Schema 8 adds the gil sums and the holders' tables to a database of schema 7: its
    windows, rollups and timeline read the same (none of them gil: that sampler could not tell
    it), and the windows written after it keep gil samples and who held the GIL."""
    db = tmp_path / "v7.db"
    conn = at_schema(db, 7)
    hour = (int(time.time()) // 3600 - 3) * 3600
    conn.execute("BEGIN")  # one commit for all the rows below
    conn.execute(
        "INSERT INTO targets VALUES "
        "(1, 'python app.py', 'python app.py', 'aiohttp', 'asyncio', 1, 2, NULL)"
    )
    conn.execute("INSERT INTO processes VALUES (1, 1, 4242, 99, '3.11', 1, 2, 0, NULL)")
    frames = ["main (app.py:1)", "BaseEventLoop.run_forever (asyncio/base_events.py:600)"]
    for number, text in enumerate(frames, start=1):
        conn.execute("INSERT INTO frames VALUES (?, ?, ?)", (number, frame_hash(text), text))
    conn.executemany("INSERT INTO nodes VALUES (?, ?, ?)", [(1, 0, 1), (2, 1, 2)])
    conn.executemany("INSERT INTO stacks VALUES (?, ?, ?)", [(1, 0, 1), (2, 1, 2)])
    conn.execute("INSERT INTO threads VALUES (1, 11, 'MainThread')")
    busy, idle = STATE_CODES["busy"], STATE_CODES["idle"]
    windows = range(hour, hour + 3600, 10)
    for window in windows:
        conn.execute(
            "INSERT INTO windows (window, target_id, process_id, width, ticks, busy, idle, "
            "loop_busy, loop_idle) VALUES (?, 1, 1, 10, 5, 2, 3, 2, 3)",
            (window,),
        )
        blob = counts.pack({(2, 11, busy): 2, (2, 11, idle): 3})
        conn.execute("INSERT INTO window_counts VALUES (?, 1, 1, ?)", (window, blob))
    conn.execute(
        "INSERT INTO hour_counts VALUES (?, 1, 1, ?)",
        (hour, counts.pack({(2, 11, busy): 2 * 360, (2, 11, idle): 3 * 360})),
    )
    conn.execute("INSERT INTO rollup_hours VALUES (?)", (hour,))
    conn.execute("COMMIT")
    conn.close()
    span = Range(hour, hour + 3600)
    before = Reader(db).profile(1, span).stacks
    assert before == {LOOP: 720, f"{LOOP};[idle]": 1080}

    store, record = open_store(db)
    assert query_one(db, "PRAGMA user_version") == len(MIGRATIONS)
    assert query_one(db, "PRAGMA integrity_check") == "ok"
    tables = {name for (name,) in query_all(db, "SELECT name FROM sqlite_master")}
    assert {"gil_holders", "gil_hour_holders"} <= tables
    reader = Reader(db)
    assert reader.rolled_hours(span) == [hour]
    assert reader.profile(1, span).stacks == before
    line = reader.timeline(1, span, step=600)["buckets"]
    assert line == [
        {"t": t, "busy": 120, "idle": 180, "blocked": 0, "gil": 0, "cpu_wait": 0}
        for t in range(hour, hour + 3600, 600)
    ]
    assert query_one(db, "SELECT SUM(gil) + SUM(loop_gil) FROM windows") == 0
    assert reader.gil_holders(1, span) == {}

    now = int(time.time()) // 10 * 10
    store.write([gil_batch(record, now)])
    store.close()
    later = Range(now, now + 10)
    assert Reader(db).profile(1, later, {"gil"}).stacks == {f"{HANDLER};[gil]": 6}
    assert Reader(db).gil_holders(1, later) == {("cruncher", SITE): 5}
    assert Reader(db).profile(1, span).stacks == before


def test_holders_are_kept_like_the_samples(tmp_path: Path) -> None:
    """Two hours of windows with holders: an hourly rollup and downsampling keep every
    holder's samples, a late window of a rolled-up hour counts once, retention takes the
    holders with their windows, and collection keeps the frames holders name (the site of a
    holder whose stack no sample has) until their windows are gone."""
    db = tmp_path / "kept.db"
    store, record = open_store(db)
    hour = 3600
    base = (int(time.time()) // hour - 6) * hour
    for window in range(base, base + 2 * hour, 10):
        reaper = (LOOP_TID, 13, "reaper", "reap (gone.py:5)", 1)
        store.write([gil_batch(record, window, more=(reaper,))])
    windows = 720
    span = Range(base, base + 2 * hour)
    expected = {("cruncher", SITE): 5 * windows, ("reaper", "reap (gone.py:5)"): windows}
    assert Reader(db).gil_holders(1, span) == expected
    assert store.roll_up(time.time()) == 2
    reader = Reader(db)
    assert reader.rolled_hours(span) == [base, base + hour]
    assert query_one(db, "SELECT SUM(samples) FROM gil_hour_holders") == 7 * windows
    assert reader.gil_holders(1, span) == expected
    # the hour rolled up from its windows reads as they do, a ragged range too
    ragged = Range(base + 1800, base + 2 * hour)
    assert reader.gil_holders(1, ragged) == {k: v * 3 // 4 for k, v in expected.items()}
    # a window arriving after its hour was rolled up counts once, in both
    store.write([gil_batch(record, base + 5)])
    assert Reader(db).gil_holders(1, span)[("cruncher", SITE)] == 5 * windows + 5
    while store.downsample(time.time()):
        pass
    assert query_one(db, "SELECT COUNT(DISTINCT window) FROM gil_holders") == 2 * 2
    assert {w for (w,) in query_all(db, "SELECT DISTINCT width FROM windows")} == {1800}
    assert Reader(db).gil_holders(1, span)[("cruncher", SITE)] == 5 * windows + 5
    assert Reader(db).gil_holders(1, ragged)[("reaper", "reap (gone.py:5)")] == windows * 3 // 4
    assert Reader(db).profile(1, span, {"gil"}).total == 6 * windows + 6
    # the site of no stored stack is a frame of its own, kept by collection while named
    store.collect_stacks()
    texts = {t for (t,) in query_all(db, "SELECT text FROM frames")}
    assert "reap (gone.py:5)" in texts
    assert Reader(db).gil_holders(1, span) == {
        ("cruncher", SITE): 5 * windows + 5,
        ("reaper", "reap (gone.py:5)"): windows,
    }
    # retention takes the first hour's windows, their holders and that hour's rollup
    while store.prune(base + hour):
        pass
    store.collect_stacks()
    assert query_one(db, "SELECT MIN(window) FROM gil_holders") == base + hour
    assert query_one(db, "SELECT MIN(hour) FROM gil_hour_holders") == base + hour
    assert Reader(db).gil_holders(1, span) == {
        ("cruncher", SITE): 5 * windows // 2,
        ("reaper", "reap (gone.py:5)"): windows // 2,
    }
    while store.prune(base + 2 * hour):
        pass
    store.collect_stacks()
    assert query_one(db, "SELECT COUNT(*) FROM gil_holders") == 0
    assert query_one(db, "SELECT COUNT(*) FROM gil_hour_holders") == 0
    assert query_one(db, "SELECT COUNT(*) FROM frames") == 0
    assert query_one(db, "PRAGMA integrity_check") == "ok"
    store.close()


def test_a_database_of_schema_8_opens_as_it_is(tmp_path: Path) -> None:
    """Reopened, a database of this schema is left at it, holders and all."""
    db = tmp_path / "again.db"
    store, record = open_store(db)
    now = int(time.time()) // 10 * 10
    store.write([gil_batch(record, now)])
    store.close()
    Store(db).close()
    assert query_one(db, "PRAGMA user_version") == len(MIGRATIONS)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT SUM(samples) FROM gil_holders").fetchone() == (6,)
    finally:
        conn.close()
