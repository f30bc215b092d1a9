"""The database file's life: opened under a lock, checked, started over, checkpointed, closed.

``StoreFile`` is the base of ``Store`` (``sidecar.store.db``): one connection, WAL, every write
in a short transaction (``transaction``). A lock file next to the database keeps a second
sidecar from writing to it. When the file is deleted, replaced or corrupted under a running
store, ``check_file`` says so and ``recreate`` starts over at the same path. What the store
keeps in memory about the database (the hours rolled up, interned ids, attached processes)
is read or emptied each time the file is opened.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from sidecar.errors import StoreError
from sidecar.sample.messages import ProcessKey
from sidecar.store.schema import claim, migrate

SQLITE_HEADER = b"SQLite format 3\x00"
#: WAL pages between checkpoints (SQLite's default: 1000). The WAL is a second copy of recent
#: pages; kept small, a full disk leaves room to evict old windows and write on.
WAL_PAGES = 128
#: The share of --max-db-size kept for the WAL (the rest is the database file's), when less
#: than WAL_PAGES: the cap bounds the file and its WAL together.
WAL_SHARE = 0.125
#: Bytes of the WAL's header, and of each page's frame header in it.
WAL_HEADER, WAL_FRAME = 32, 24
#: SQLite result codes (primary, the low byte) that mean the file is not a sound database.
CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
#: What ``Store.check_file`` finds; each is a reason for ``Store.recreate``.
DELETED = "the database file was deleted"
REPLACED = "the database file was replaced by another file"
CORRUPT = "the database file is corrupt"


class Connection(sqlite3.Connection):
    """The store's connection: sqlite3's own (autocommit, ``transaction`` opens each one)."""


class StoreLocked(StoreError):
    """Another sidecar already writes to this database."""


def is_corrupt(err: Exception) -> bool:
    """The error says the database file is damaged (not busy, not full, not an I/O hiccup)."""
    return getattr(err, "sqlite_errorcode", 0) & 0xFF in CORRUPT_CODES


def _check_sound(conn: sqlite3.Connection) -> None:
    """Raises ``StoreError`` for a damaged database: SQLite's ``quick_check`` of every page and
    index entry (about half a second for 300 MB), so a file damaged while no sidecar ran is
    refused before it is served, not found out by the queries that reach the damage."""
    try:
        rows = conn.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.DatabaseError as err:
        raise StoreError(f"{CORRUPT} ({err}): move it aside or delete it") from err
    found = [str(row[0]) for row in rows]
    if found != ["ok"]:
        said = "; ".join(" ".join(one.split()) for one in found)[:200]  # one line
        raise StoreError(f"{CORRUPT} (quick_check: {said}): move it aside or delete it")


def _file_id(path: Path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


def _fd_id(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


class StoreFile:
    """The connection to one sidecar database, and the lock that makes it the only writer."""

    def __init__(self, path: str | Path, *, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        #: Under a cap: the most bytes its WAL may hold before it is checkpointed and
        #: truncated, and the most pages of the database file (set when the file is opened).
        self.wal_budget: int | None = None
        self.max_pages: int | None = None
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
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, factory=Connection
        )
        self.db: Connection = conn
        try:
            self.db.execute("PRAGMA busy_timeout = 5000")
            claim(self.db)  # first: a database not sidecar's is left as it was
            _check_sound(self.db)  # and a damaged one too, before a migration writes to it
            migrate(self.db)
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
            if self.max_bytes is None:
                self.db.execute(f"PRAGMA wal_autocheckpoint = {WAL_PAGES}")
            else:
                self._cap(self.max_bytes)
            # Processes are re-attached as discovery finds them again.
            with self.transaction():
                self.db.execute("UPDATE processes SET alive = 0 WHERE alive = 1")
            self._rolled: set[int] = {
                int(r[0]) for r in self.db.execute("SELECT hour FROM rollup_hours").fetchall()
            }
            # Kept open until the connection is closed: SQLite's locks on the file are POSIX
            # locks, which closing any descriptor of the file in this process would drop; a
            # reader in another process closing its connection would then take this store
            # for gone and delete the WAL it is writing to (what it wrote after that stays
            # unseen by readers until the next checkpoint)
            self._fd = os.open(self.path, os.O_RDONLY)
            self.file_id = _fd_id(self._fd)
        except BaseException:
            with suppress(sqlite3.Error):
                conn.close()
            self._close_fd()
            raise
        # ids cached from this database: interned stacks, nodes and frames
        # (``sidecar.store.windows``), and attached processes' (target id, process id)
        self._stacks: dict[str, tuple[int, bool]] = {}
        self._stack_chars = 0
        self._nodes: dict[tuple[int, int], int] = {}
        self._frames: dict[str, int] = {}
        self._processes: dict[ProcessKey, tuple[int, int]] = {}

    def _cap(self, cap: int) -> None:
        """Splits --max-db-size between the database file and its WAL: the WAL gets WAL_SHARE
        of it (WAL_PAGES at the most), checkpointed once it holds that many pages and cut
        back to that size after each checkpoint (``journal_size_limit``); the file gets the
        rest (SQLite's ``max_page_count``, 16 pages at the least). ``fit_wal`` checkpoints a
        WAL that a long transaction grew past its share."""
        page = int(self.db.execute("PRAGMA page_size").fetchone()[0])
        frame = page + WAL_FRAME
        wal_pages = max(1, min(WAL_PAGES, int(cap * WAL_SHARE - WAL_HEADER) // frame))
        self.wal_budget = WAL_HEADER + wal_pages * frame
        self.max_pages = max(16, (cap - self.wal_budget) // page)
        self.db.execute(f"PRAGMA wal_autocheckpoint = {wal_pages}")
        self.db.execute(f"PRAGMA journal_size_limit = {self.wal_budget}")
        self.db.execute(f"PRAGMA max_page_count = {self.max_pages}")

    def wal_bytes(self) -> int:
        try:
            return os.path.getsize(f"{self.path}-wal")
        except OSError:
            return 0

    def fit_wal(self) -> None:
        """Under a cap, after a transaction: checkpoints and truncates a WAL grown past its
        share (a transaction that changed many pages, a checkpoint a reader held back), so
        that the file and its WAL are within the cap again."""
        if self.wal_budget is not None and self.wal_bytes() > self.wal_budget:
            self.checkpoint()

    def at_cap(self) -> bool:
        """A write found the database full because of --max-db-size (by design), not because
        the disk is: the file is within a tenth of its share of the cap, or the disk has
        room for all the cap still allows (a transaction of many pages can meet the cap well
        before the file reaches it)."""
        if self.max_pages is None:
            return False
        page = int(self.db.execute("PRAGMA page_size").fetchone()[0])
        pages = int(self.db.execute("PRAGMA page_count").fetchone()[0])
        if pages >= 0.9 * self.max_pages:
            return True
        try:
            disk = os.statvfs(self.path.parent)
        except OSError:
            return False
        allowed = (self.max_pages - pages) * page + (self.wal_budget or 0)
        return disk.f_bavail * disk.f_frsize > allowed

    def check_file(self, probe: bool = False) -> str | None:
        """What happened to the database file under this store, if anything (DELETED,
        REPLACED or CORRUPT, as a message): a stat and a read of 16 bytes, and with ``probe``
        a small query on a new read-only connection."""
        try:
            file_id = _file_id(self.path)
        except FileNotFoundError:
            return DELETED
        except OSError:
            return None  # not something to start over for; writes will tell
        if file_id != self.file_id:
            return REPLACED
        try:  # the file at the path is the one open: read through the descriptor kept open
            header = os.pread(self._fd, len(SQLITE_HEADER), 0)
        except OSError:
            return None
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
            self.db.close()
        self._close_fd()
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
        self.db.close()
        self._close_fd()
        self._release_lock()

    def _close_fd(self) -> None:
        """Closes the descriptor ``check_file`` reads through (after the connection: closing
        it drops this process's locks on the file)."""
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            os.close(fd)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            with suppress(sqlite3.Error):
                self.db.rollback()
            # ids cached inside the transaction name rows that no longer exist (and will be
            # given to other rows): kept, they would tie stacks into loops
            self._forget()
            raise
        self.db.execute("COMMIT")

    def _forget(self) -> None:
        """Empties the interning caches (bounded memory; the database still has it all)."""
        self._stacks = {}
        self._nodes = {}
        self._frames = {}
        self._stack_chars = 0
