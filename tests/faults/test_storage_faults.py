"""Storage faults under a running ``sidecar serve``: kill -9 during heavy writes, a full disk,
the database file deleted or corrupted, a second sidecar on the same database (also through a
symlink). The service reports, starts over or refuses cleanly, and keeps what was committed.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.serve.writer import Writer
from sidecar.store import ProcessRecord, Store, StoreLocked, WindowBatch
from sidecar.store.query import Range, Reader
from tests.support.batches import window_batch
from tests.support.faultkit import Entry, integrity, query, record, window_ticks
from tests.support.helpers import LoadDriver, Servers, Spawner, free_port, sidecar, wait_until

pytestmark = pytest.mark.faults

KILL_ROUNDS = int(os.environ.get("SIDECAR_KILL_ROUNDS", "10"))


@pytest.fixture
def heavy(spawn: Spawner, load: LoadDriver) -> list[int]:
    """Targets that keep the writer busy: new stacks all the time, many threads, a service
    under load."""
    aio = spawn.target("aiohttp_app")
    load.start(aio.url + "/cpu?repeat=5", seconds=240, connections=2)
    fresh = spawn.target("generated", "--threads", "2")
    many = spawn.target("threads", "--threads", "100", "--busy", "2")
    return [aio.pid, fresh.pid, many.pid]


def windows_now(db: Path) -> int:
    """Windows in the database now; 0 while it is missing or has no tables yet."""
    try:
        return len(window_ticks(db))
    except sqlite3.Error:
        return 0


def selecting(pids: list[int]) -> list[str]:
    return [arg for pid in pids for arg in ("--pid", str(pid))]


def test_kill_9_during_heavy_writes_in_a_loop(
    heavy: list[int], sidecars: Servers, tmp_path: Path
) -> None:
    """kill -9 at a random moment of heavy writing, KILL_ROUNDS times on one database: the
    database passes integrity_check after each, and every window committed before the kill is
    there, with at least the ticks it had."""
    db = tmp_path / "crash.db"
    entry = Entry("kill -9 during heavy writes", "storage faults", rounds=KILL_ROUNDS)
    committed_total = 0
    for _ in range(KILL_ROUNDS):
        before = len(window_ticks(db)) if db.exists() else 0
        server = sidecars(db, "--window", "1", "--rate", "300", *selecting(heavy))
        assert wait_until(lambda n=before: len(window_ticks(db)) >= n + 3, timeout=30)
        time.sleep(random.uniform(0.0, 1.5))
        committed = window_ticks(db)
        server.kill()
        entry.fault("SIGKILL while writing")
        assert integrity(db) == "ok"
        after = window_ticks(db)
        missing = [key for key, ticks in committed.items() if after.get(key, -1) < ticks]
        assert not missing, missing[:5]
        committed_total = len(after)
    assert query(db, "SELECT COUNT(DISTINCT process_id) FROM windows")[0][0] >= 3
    entry.note(f"{committed_total} windows committed across the kills, all present afterwards")
    record(entry)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs, unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a tmpfs")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Fills the disk to the last byte with one file."""
    filler = disk / "filler"
    # unbuffered: a buffered file would try the failed bytes again on close and raise there
    with open(filler, "wb", buffering=0) as handle:
        chunk = b"\0" * 65536
        while True:
            try:
                if handle.write(chunk) == 0:
                    break
            except OSError:
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]  # the last bytes, down to the last one
    return filler


def test_full_disk_keeps_sampling_reports_and_recovers(
    heavy: list[int], sidecars: Servers, tiny_disk: Path
) -> None:
    """The disk under the database fills up (another file takes the space): sampling goes
    on, /healthz and /metrics say so, the API answers; once there is room again the backlog
    is written: no second of the outage is missing from the database."""
    db = tiny_disk / "sidecar.db"
    log = tiny_disk.parent / "sidecar.log"  # not on the full disk
    server = sidecars(db, "--window", "1", "--rate", "200", *selecting(heavy), log=log)

    # A full disk makes the writer evict the oldest windows to write new ones: enough history
    # first that none of the outage's own windows is the oldest when it ends.
    def history() -> int:
        return len({window for window, _, _ in window_ticks(db)})

    assert wait_until(lambda: history() >= 15, timeout=40)
    filler = fill(tiny_disk)
    filled_at = int(time.time())

    def failing() -> bool:
        store = server.health()["store"]
        return not store["writing"] and "full" in (store["last_error"] or "")

    assert wait_until(failing, timeout=30), server.health()
    # evicting the oldest windows lets some writes through meanwhile: health stays degraded
    health = server.health()
    assert health["status"] == "degraded" and health["store"]["disk_full"], health
    assert wait_until(lambda: server.metric("sidecar_store_writing") == 0, timeout=10)
    sampled = server.metric("sidecar_sampler_samples_total")
    assert wait_until(lambda: server.metric("sidecar_sampler_samples_total") > sampled + 300)
    assert server.request("/api/targets")[0] == 200  # readers are not stopped by it
    time.sleep(3)  # a few seconds of outage to catch up with
    filler.unlink()
    freed_at = int(time.time())

    def caught_up() -> bool:
        store = server.health()["store"]
        return bool(store["writing"]) and store["backlog"] <= 3

    assert wait_until(caught_up, timeout=40), server.health()
    assert server.stop() == 0, server.log_text()
    assert integrity(db) == "ok"
    process_windows: dict[int, set[int]] = {}
    for window, _, process in window_ticks(db):
        process_windows.setdefault(process, set()).add(window)
    for process, windows in process_windows.items():
        gap = [w for w in range(filled_at + 1, freed_at) if w not in windows]
        assert not gap, (process, gap)  # the outage was written after it ended
    entry = Entry("disk full, then room again", "storage faults", rounds=1)
    entry.fault("disk filled under the database")
    entry.note(
        f"4 MB tmpfs filled for {freed_at - filled_at} s: sampling went on, health degraded, "
        "every window of the outage written once there was room"
    )
    record(entry)


def test_database_file_deleted_under_the_running_service(
    heavy: list[int], sidecars: Servers, tmp_path: Path
) -> None:
    db = tmp_path / "deleted.db"
    server = sidecars(db, "--window", "1", *selecting(heavy[:2]))
    assert wait_until(lambda: len(window_ticks(db)) >= 4, timeout=30)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)

    def recreated() -> bool:
        store = server.health()["store"]
        return store["recreated"] == 1 and "deleted" in (store["last_error"] or "")

    assert wait_until(recreated, timeout=15), server.health()
    # a new database at the same path, the known processes in it, windows flowing again
    assert wait_until(lambda: windows_now(db) >= 4, timeout=15)
    assert wait_until(lambda: len(server.targets()) == 2, timeout=10), server.targets()
    assert server.health()["status"] == "degraded"
    assert server.metric("sidecar_store_recreated_total") == 1
    assert server.stop() == 0
    assert integrity(db) == "ok"
    assert "the database file was deleted: started a new database" in server.log_text()
    entry = Entry("database file deleted under the service", "storage faults", rounds=1)
    entry.fault("database, WAL and shared memory files deleted")
    entry.note(
        "the deleted file's data went with it (deleted from outside); the writer's backlog, "
        "the processes and every window after it are in the new database"
    )
    record(entry)


@pytest.mark.parametrize("damage", ["header", "pages"])
def test_database_corrupted_under_the_running_service(
    heavy: list[int], sidecars: Servers, tmp_path: Path, damage: str
) -> None:
    """Garbage over the header, or over every page but the first two (database and WAL): the
    API answers 503 with the error shape meanwhile, never 500; the writer moves the damaged
    file aside and starts a new one; the service never crashes or loops."""
    db = tmp_path / "corrupt.db"
    server = sidecars(db, "--window", "1", *selecting(heavy[:2]))
    assert wait_until(lambda: len(window_ticks(db)) >= 4, timeout=30)
    for name in (db, Path(f"{db}-wal")):
        size = name.stat().st_size
        start = 0 if damage == "header" else 8192
        with open(name, "r+b") as handle:
            handle.seek(start)
            handle.write(os.urandom(max(0, min(size, 1 << 20) - start)))
    statuses: set[int] = set()

    def recreated() -> bool:
        status, body, _ = server.request("/api/targets")
        statuses.add(status)
        if status != 200:
            assert status == 503 and b'"code":"store_unavailable"' in body, body
        return int(server.health()["store"]["recreated"]) == 1

    assert wait_until(recreated, timeout=20), server.health()
    store = server.health()["store"]
    assert "corrupt" in store["last_error"] and ".corrupt-" in store["last_error"]
    aside = list(tmp_path.glob("corrupt.db.corrupt-*"))
    assert aside, os.listdir(tmp_path)
    assert wait_until(lambda: len(server.targets()) == 2, timeout=15)
    assert 500 not in statuses
    assert server.stop() == 0
    assert integrity(db) == "ok"
    log = server.log_text()
    assert log.count("started a new database") == 1 and "Traceback" not in log
    # started again on a corrupt file, it refuses in one line and says what to do
    (aside_db,) = [p for p in aside if p.name.count("-") == 2 and not p.name.endswith("-wal")]
    refused = sidecar("serve", "--db", str(aside_db), "--port", str(free_port()), timeout=30)
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("sidecar: error: cannot open database") and "move the file" in last
    entry = Entry(f"database corrupted under the service ({damage})", "storage faults")
    entry.rounds = 1
    entry.fault(f"random bytes over the {damage} of the database and its WAL")
    entry.fault("start on the corrupt file (refused)")
    entry.note(
        f"{damage}: the corrupt file is kept aside as NAME.corrupt-TIME; the API answered "
        f"{sorted(statuses)} meanwhile, never 500"
    )
    record(entry)


def test_a_second_sidecar_on_the_same_database_refuses_even_through_a_symlink(
    spawn: Spawner, sidecars: Servers, tmp_path: Path
) -> None:
    target = spawn.target("tornado_app")
    db = tmp_path / "shared.db"
    first = sidecars(db, "--window", "1", "--pid", str(target.pid))
    assert wait_until(lambda: len(window_ticks(db)) >= 2, timeout=20)
    link = tmp_path / "link.db"
    link.symlink_to(db)
    (tmp_path / "dir").symlink_to(tmp_path, target_is_directory=True)
    # the real CLI through a symlink (test_serve covers the same path) ...
    result = sidecar("serve", "--db", str(link), "--port", str(free_port()), timeout=30)
    assert result.returncode == 1, result.stderr
    assert "in use by another sidecar" in result.stderr.strip().splitlines()[-1]
    # ... and the store under every other name of the same file
    others = [tmp_path / "dir" / "shared.db", tmp_path / "dir" / "link.db"]
    others.append(Path(os.path.relpath(db)))
    for path in others:
        with pytest.raises(StoreLocked, match="in use by another sidecar"):
            Store(path)
    assert first.health()["status"] == "ok"  # the first is untouched and goes on writing
    written = len(window_ticks(db))
    assert wait_until(lambda: len(window_ticks(db)) > written, timeout=10)
    entry = Entry("a second sidecar on the same database", "storage faults")
    entry.rounds = 1 + len(others)
    entry.fault("second sidecar through a symlink (CLI)")
    entry.fault("second store under another name (symlinked directory, relative path)", 3)
    record(entry)


def test_writer_survives_what_it_cannot_write(tmp_path: Path) -> None:
    """A window of a process the store never saw is kept out and counted, and the writer
    thread goes on (it used to die on it, silently, and write nothing more)."""
    writer = Writer(tmp_path / "w.db")
    writer.start()
    try:
        now = int(time.time())
        writer.submit(window_batch((1, 1), now, 1, 1, [("a;b", 1, "busy", 1)]))
        writer.submit(ProcessRecord(2, 2, "python x.py", now))
        writer.submit(window_batch((2, 2), now, 1, 1, [("a;c", 1, "busy", 1)]))
        assert wait_until(lambda: writer.health.windows_written == 1, timeout=10)
        assert writer.health.dropped_windows == 1
        assert writer._thread.is_alive()
    finally:
        writer.stop()
    assert query(tmp_path / "w.db", "SELECT COUNT(*) FROM windows") == [(1,)]


def unique_window(key: tuple[int, int], start: int, number: int) -> WindowBatch:
    """A window of stacks never seen before (generated code)."""
    stacks = {
        f"root (a.py:1);gen_{number} (g{number}.py:{number});leaf_{number}_{j} (l.py:{j})": j + 1
        for j in range(20)
    }
    return window_batch(key, start, 10, 1, [(s, 1, "busy", c) for s, c in stacks.items()])


def test_a_write_that_failed_leaves_no_stale_ids_behind(tmp_path: Path) -> None:
    """A transaction that fails (here: the size cap) is rolled back; the ids it had interned
    must go with it. They stayed cached and were given to other rows on the retry: stacks
    named the wrong frames, or looped, and reading them hung the API at 100% CPU."""
    db = tmp_path / "rollback.db"
    store = Store(db, max_bytes=100_000)
    record_ = ProcessRecord(1, 1, "python x.py", time.time())
    store.attach(record_)
    start = int(time.time()) // 10 * 10 - 4000
    written: dict[int, WindowBatch] = {}
    for number in range(400):
        batch = unique_window(record_.key, start + 10 * number, number)
        try:
            store.write([batch])
        except sqlite3.OperationalError as err:
            assert "full" in str(err)
            break
        written[batch.start] = batch
    else:
        raise AssertionError("the cap was never reached")
    store.db.execute("PRAGMA max_page_count = 1000000")  # room again: the same window retried
    store.write([batch])
    written[batch.start] = batch
    store.close()
    reader = Reader(db, 10)
    for begin, batch in written.items():
        profile = reader.profile(None, Range(begin, begin + 10))
        assert profile.stacks == {stack: count for stack, _, _, count in batch.window.rows}
    entry = Entry("a failed write, retried", "storage faults", rounds=len(written))
    entry.fault("transaction rolled back by a full database")
    record(entry)


def test_a_full_database_of_unique_stacks_makes_room_and_writes_on(tmp_path: Path) -> None:
    """--max-db-size with stacks that never repeat: evicting old windows alone frees nothing
    (their stacks, nodes and frames stay), so eviction collects those too; the writer keeps
    writing the newest windows, exactly."""
    db = tmp_path / "capped.db"
    writer = Writer(db, max_bytes=400_000)
    writer.start()
    key = (7, 7)
    start = int(time.time()) // 10 * 10 - 20_000
    try:
        writer.submit(ProcessRecord(*key, "python gen.py", time.time()))
        for number in range(600):
            writer.submit(unique_window(key, start + 10 * number, number))
            if number % 50 == 49:
                assert wait_until(lambda: writer.health.backlog == 0, timeout=30), writer.health
        # evicting at the cap is what the cap is for: not a write error
        assert writer.health.evicted_windows > 0 and writer.health.write_errors == 0
        assert writer.health.windows_written == 600 and not writer.health.failing
    finally:
        writer.stop()
    newest = [unique_window(key, start + 10 * n, n) for n in range(590, 600)]
    reader = Reader(db, 10)
    for batch in newest:
        profile = reader.profile(None, Range(batch.start, batch.start + 10))
        assert profile.stacks == {stack: count for stack, _, _, count in batch.window.rows}
    assert integrity(db) == "ok"
    entry = Entry("a size-capped database of unique stacks", "storage faults", rounds=600)
    entry.fault("database full (--max-db-size)", writer.health.evicted_windows)
    entry.note(
        "the oldest windows are evicted by design to make room (--max-db-size); the "
        "newest 10 are read back exactly"
    )
    record(entry)


def test_a_window_too_big_for_the_size_cap_is_dropped_not_waited_for(tmp_path: Path) -> None:
    """Under --max-db-size, a window that does not fit even in a database with no other window
    can never be written: it is dropped and counted, and the windows after it are written
    (waiting would stall the writer for good)."""
    db = tmp_path / "tiny.db"
    writer = Writer(db, max_bytes=160_000)
    writer.start()
    key = (8, 8)
    start = int(time.time()) // 10 * 10 - 100
    huge = window_batch(
        key,
        start,
        10,
        1,
        [(f"root (a.py:1);big_{j} ({'x' * 200}.py:{j})", 1, "busy", 1) for j in range(2000)],
    )
    small = [unique_window(key, start + 10 * n, n) for n in range(1, 4)]
    try:
        writer.submit(ProcessRecord(*key, "python big.py", time.time()))
        for batch in (huge, *small):
            writer.submit(batch)
        assert wait_until(lambda: writer.health.backlog == 0, timeout=30), writer.health
        assert writer.health.dropped_windows == 1 and writer.health.windows_written == 3
        assert not writer.health.failing
    finally:
        writer.stop()
    reader = Reader(db, 10)
    assert reader.profile(None, Range(start, start + 10)).total == 0
    for batch in small:
        profile = reader.profile(None, Range(batch.start, batch.start + 10))
        assert profile.stacks == {stack: count for stack, _, _, count in batch.window.rows}
    assert integrity(db) == "ok"


#: Files that are not sidecar's databases, each made by a SQL script on an empty file, and the
#: one line serve gives for it (after "cannot open database PATH: ").
FOREIGN = {
    "another program's tables": (
        "CREATE TABLE x (a); INSERT INTO x VALUES (1);",
        "it is not a sidecar database (schema version 0, tables x): use another --db",
    ),
    "a negative schema version": (
        "PRAGMA user_version = -1;",
        "it is not a sidecar database (schema version -1): use another --db",
    ),
    "another program's application id": (
        "PRAGMA application_id = 1234; CREATE TABLE targets (id);",
        "it is another program's database (SQLite application_id 0x000004d2, not sidecar's): "
        "use another --db",
    ),
    "a schema version without sidecar's tables": (
        "PRAGMA user_version = 3; CREATE TABLE targets (id);",
        "it is not a sidecar database (schema version 3 without sidecar's tables): use "
        "another --db",
    ),
}


def test_another_programs_database_is_refused_in_one_line_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    """``--db`` at a SQLite file sidecar did not make: one line, exit 1, the file byte for byte
    as it was and nothing beside it but the lock; a new file is made and marked as sidecar's
    (``PRAGMA application_id``), and opens again."""
    entry = Entry("another program's database", "storage faults", rounds=1)
    for name, (script, said) in FOREIGN.items():
        db = tmp_path / f"{name.replace(' ', '-')}.db"
        conn = sqlite3.connect(db)
        conn.executescript(script)
        conn.close()
        before = db.read_bytes()
        result = sidecar("serve", "--db", str(db), "--port", str(free_port()), timeout=30)
        assert result.returncode == 1, (name, result.stderr)
        lines = result.stderr.splitlines()
        assert lines == [f"sidecar: error: cannot open database {db}: {said}"], (name, lines)
        assert db.read_bytes() == before, name
        beside = {p.name for p in tmp_path.iterdir() if p.name.startswith(db.name)}
        assert beside == {db.name, f"{db.name}.lock"}, (name, beside)
        entry.fault(name)
        entry.inputs += 1
    made = tmp_path / "new.db"
    store = Store(made)
    store.close()
    assert query(made, "PRAGMA application_id") == [(0x53444352,)]
    Store(made).close()  # its own file: taken again
    entry.note("each refused in one line, the file unchanged; a new one is marked as sidecar's")
    record(entry)


def _written(db: Path, windows: int) -> None:
    """A sidecar database of ``windows`` windows of a target with many stacks (~250 KB)."""
    store = Store(db)
    key = (7, 7)
    store.attach(ProcessRecord(7, 7, "python app.py", time.time()))
    now = int(time.time()) // 10 * 10 - 10 * windows
    for w in range(windows):
        rows = [
            (f"main (app.py:1);handler_{w}_{i} (app.py:{i + 2})", 7, "busy", i + 1)
            for i in range(40)
        ]
        store.write([window_batch(key, now + 10 * w, 10, 820, rows)])
    store.close()


def _damaged(db: Path) -> bool:
    """SQLite's integrity_check finds damage, or cannot even run."""
    try:
        return integrity(db) != "ok"
    except sqlite3.DatabaseError:
        return True


def test_a_database_damaged_while_no_sidecar_ran_is_refused_at_start(tmp_path: Path) -> None:
    """4 KB of random bytes written into the middle of a database (as a bad disk or a stray
    write would): serve refuses it in one line at start, leaving it as it was, rather than
    serving what still reads and answering 503 where the damage is."""
    sound = tmp_path / "sound.db"
    _written(sound, 60)
    size = sound.stat().st_size
    assert size > 150_000, size
    entry = Entry("a database damaged while no sidecar ran", "storage faults", rounds=5)
    rng = random.Random(49)
    for round_ in range(5):
        db = tmp_path / f"damaged-{round_}.db"
        shutil.copy(sound, db)
        at = rng.randrange(size // 4, 3 * size // 4)
        with db.open("r+b") as file:
            file.seek(at)
            file.write(rng.randbytes(4096))
        assert _damaged(db), at  # as SQLite itself finds
        before = db.read_bytes()
        result = sidecar("serve", "--db", str(db), "--port", str(free_port()), timeout=30)
        assert result.returncode == 1, (at, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, lines
        line = lines[0]
        assert line.startswith(f"sidecar: error: cannot open database {db}: the database file "
                               "is corrupt ("), line  # fmt: skip
        assert line.endswith("move it aside or delete it"), line
        assert db.read_bytes() == before, at
        entry.fault("4 KB of random bytes in a database at rest")
        entry.inputs += 1
    Store(sound).close()  # the sound copy still opens
    entry.note(f"5 of 5 damaged {size // 1000} KB databases refused in one line, unchanged")
    record(entry)
