"""The writer thread: the only code that writes to the database.

Sessions hand it messages (a process seen, a process gone, a window of samples). They queue
in order in a bounded backlog; when the database cannot be written (disk full, locked, I/O
error) they wait there and writing resumes when it can. Past the bound, the oldest unwritten
windows are dropped first and counted. Retention and downsampling run here too, in small
transactions between writes. A database file deleted, replaced or corrupted under the writer
is noticed within a second: the writer reports it and starts a new database at the same path
(a corrupt file is kept aside), and the thread never dies of an unexpected error.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sidecar.sample.messages import Message, ProcessKey, ProcessRecord, WindowBatch
from sidecar.serve.sinks import SinkHealth, recent
from sidecar.store.db import Store
from sidecar.store.file import CORRUPT, is_corrupt

log = logging.getLogger("sidecar.store")
#: Windows written per transaction.
CHUNK = 50


@dataclass
class WriterHealth(SinkHealth):
    """What /healthz and /metrics report about the store."""

    windows_written: int = 0
    write_errors: int = 0
    dropped_windows: int = 0
    evicted_windows: int = 0
    #: When a write last failed because the disk (not --max-db-size) was full.
    disk_full_at: float | None = None
    #: When a window was last dropped.
    dropped_at: float | None = None
    size_bytes: int = 0
    #: Times the database file was found deleted, replaced or corrupt and started anew.
    recreated: int = 0
    #: When it was last started anew.
    recreated_at: float | None = None

    def disk_full(self, now: float) -> bool:
        """The disk was full within the last ``RECENT`` seconds: while it is, writes succeed
        now and then as the oldest windows are evicted."""
        return recent(self.disk_full_at, now)

    def problems_at(self) -> tuple[float | None, ...]:
        """The disk full, a window dropped, the database started anew."""
        return (self.disk_full_at, self.dropped_at, self.recreated_at)


class Writer:
    """Owns the Store on its own thread; everything else talks to it through ``submit``.
    The store's sink (``sidecar.serve.sinks``)."""

    name = "store"

    def __init__(
        self,
        path: str | Path,
        *,
        retention: float = 24 * 3600,
        max_backlog: int = 2000,
        max_bytes: int | None = None,
        maintenance_every: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = Store(path, max_bytes=max_bytes)
        #: Wall-clock time of the health's timestamps.
        self.clock = clock
        self.retention = retention
        self.max_backlog = max_backlog
        self.maintenance_every = maintenance_every
        self.health = WriterHealth(size_bytes=self.store.size_bytes())
        self._queue: deque[Message] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._stopped = threading.Event()
        self._room_made = False
        self._backoff = 0.5
        self._next_maintenance = 0.0
        self._next_check = 0.0
        self._checks = 0
        #: Windows per transaction: one at a time while a size-capped database has no window
        #: left to evict, so that every window that fits on its own is written.
        self._chunk = CHUNK
        #: The processes the database knows, attached again when it is started anew.
        self._attached: dict[ProcessKey, ProcessRecord] = {}
        self._thread = threading.Thread(target=self._run, name="sidecar-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, message: Message) -> None:
        with self._cond:
            self._queue.append(message)
            windows = sum(isinstance(m, WindowBatch) for m in self._queue)
            while windows > self.max_backlog:
                for index, queued in enumerate(self._queue):
                    if isinstance(queued, WindowBatch):
                        del self._queue[index]
                        self._dropped(1)
                        windows -= 1
                        break
            self.health.backlog = len(self._queue)
            self._cond.notify()

    def stop(self, timeout: float = 10.0) -> None:
        """Flushes what is queued (as far as the database lets it) and closes the store."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._stopped.set()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.store.close()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        self._next_maintenance = time.monotonic() + 1.0
        while True:
            try:
                if self._step():
                    return
            except Exception as err:  # the one writer never dies: report, back off, go on
                log.exception("unexpected error in the database writer")
                self._note_error(err)
                self._pause()

    def _step(self) -> bool:
        """Writes what is queued, then checks and maintains the database; True when done."""
        with self._cond:
            if not self._queue and not self._stopping:
                self._cond.wait(timeout=1.0)
            batch = list(self._queue)
            stopping = self._stopping
        self._check_file()
        if batch:
            if self._write(batch):
                self._backoff = 0.5
            elif stopping:
                log.error("stopping with %d unwritten messages", len(self._queue))
                return True
            elif self._room_made:
                self._room_made = False  # room was made (or a new file started): retry now
                return False
            else:
                self._pause()
                return False
        if stopping:
            with self._cond:
                return not self._queue
        if time.monotonic() >= self._next_maintenance:
            self._maintain()
            self._next_maintenance = time.monotonic() + self.maintenance_every
        return False

    def _pause(self) -> None:
        """Waits before the next attempt, longer each time; stop() cuts it short."""
        self._stopped.wait(self._backoff)
        self._backoff = min(self._backoff * 2, 10.0)

    def _check_file(self) -> None:
        """At most once a second: is the database file still the one being written? Every
        fifth time, also: can a new reader read it?"""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + 1.0
        self._checks += 1
        problem = self.store.check_file(probe=self._checks % 5 == 0)
        if problem is not None:
            self._recreate(problem)

    def _recreate(self, reason: str) -> None:
        """Starts a new database at the same path and attaches the known processes to it."""
        aside = self.store.recreate(reason)
        kept = f"; the old file is kept as {aside}" if aside else ""
        log.error("%s: started a new database at %s%s", reason, self.store.path, kept)
        self._note_error(RuntimeError(reason))
        self.health.last_error = f"{reason}: started a new database{kept}"
        self.health.recreated += 1
        self.health.recreated_at = self.clock()
        for record in list(self._attached.values()):
            self.store.attach(record)
        self._room_made = True
        self.health.size_bytes = self.store.size_bytes()

    def _write(self, batch: list[Message]) -> bool:
        """Writes messages in order; each commit removes what it wrote from the queue."""
        index = 0
        try:
            while index < len(batch):
                message = batch[index]
                if isinstance(message, WindowBatch):
                    chunk: list[WindowBatch] = []
                    while (
                        index + len(chunk) < len(batch)
                        and len(chunk) < self._chunk
                        and isinstance(batch[index + len(chunk)], WindowBatch)
                    ):
                        chunk.append(batch[index + len(chunk)])  # type: ignore[arg-type]
                    orphaned = self.store.write(chunk)
                    self.health.windows_written += len(chunk) - orphaned
                    if orphaned:
                        self._dropped(orphaned)
                    self._chunk = CHUNK
                    self._done(len(chunk))
                    index += len(chunk)
                    continue
                if isinstance(message, ProcessRecord):
                    self.store.attach(message)
                    self._attached[message.key] = message
                else:
                    self.store.mark_gone(message.key, message.when)
                    self._attached.pop(message.key, None)
                self._done(1)
                index += 1
        except sqlite3.Error as err:
            self._failed(err)
            return False
        if self.health.failing:
            log.warning("database writable again; backlog %d", self.health.backlog)
        self.health.failing = False
        self.store.fit_wal()
        self.health.size_bytes = self.store.size_bytes()
        return True

    def _done(self, count: int) -> None:
        with self._cond:
            for _ in range(count):
                self._queue.popleft()
            self.health.backlog = len(self._queue)

    def _dropped(self, count: int) -> None:
        self.health.dropped_windows += count
        self.health.dropped_at = self.clock()

    def _note_error(self, err: Exception) -> None:
        self.health.write_errors += 1
        self.health.last_error = f"{type(err).__name__}: {err}"

    def _failed(self, err: sqlite3.Error) -> None:
        if is_corrupt(err):
            self._recreate(f"{CORRUPT} ({err})")
            return
        if "full" in str(err).lower() and self._at_cap():
            # what --max-db-size is for: the oldest windows make room, no error
            self._make_room()
            return
        self._note_error(err)
        if not self.health.failing:
            log.error("cannot write to the database: %s (keeping a backlog)", err)
        self.health.failing = True
        if "full" in str(err).lower():
            self.health.disk_full_at = self.clock()
            self._make_room()

    def _make_room(self) -> None:
        """Evicts the oldest windows, and the stacks only they used, for the next write."""
        try:
            evicted = self.store.evict_oldest()
            self.health.evicted_windows += evicted
            self._room_made = evicted > 0
            if evicted:
                # at the cap, by design: said at debug level (a full disk is said at error)
                (log.warning if self.health.failing else log.debug)(
                    "database full: evicted the %d oldest windows", evicted
                )
                # stacks only they used go too: with stacks that never repeat, those are
                # most of the file, and evicting windows alone never makes room
                self.store.collect_stacks()
            elif self.store.max_bytes is not None:
                self._room_made = self._too_big()
        except sqlite3.Error as again:
            log.error("cannot free room in the database: %s", again)
        self.store.checkpoint()  # a WAL folded into the database frees its disk space

    def _at_cap(self) -> bool:
        """The database file has grown to its share of --max-db-size (``Store.at_cap``)."""
        try:
            return self.store.at_cap()
        except sqlite3.Error:
            return False

    def _too_big(self) -> bool:
        """Nothing left to evict under --max-db-size: the windows are written one at a time,
        and a window that does not fit even so is dropped (waiting would never make room for
        it). True when there is something to try again."""
        if self._chunk > 1:
            self._chunk = 1
            return True
        with self._cond:
            if not self._queue or not isinstance(self._queue[0], WindowBatch):
                return False
            window = self._queue.popleft()
            self.health.backlog = len(self._queue)
        assert isinstance(window, WindowBatch)
        self._dropped(1)
        log.error(
            "a window of %d stacks does not fit in the database under its size cap even "
            "with no other window stored: dropped it (raise --max-db-size)",
            len(window.window.rows),
        )
        return True

    def _maintain(self) -> None:
        try:
            now = time.time()
            cutoff = now - self.retention
            pruned_now = 0
            while (pruned := self.store.prune(cutoff)) > 0:
                pruned_now += pruned
                if self._queue:
                    break  # let writes go first; the rest is pruned next time
            self.store.downsample(now)
            self.store.roll_up(now)
            if pruned_now:
                self.store.collect_stacks()
            self.store.fit_wal()
            self.health.size_bytes = self.store.size_bytes()
        except sqlite3.Error as err:
            self._failed(err)
