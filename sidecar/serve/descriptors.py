"""``sidecar serve``'s file descriptors: how many it may open, how many are open, and when it
ran out.

Everything the service does needs descriptors from one table: the sampler's reads of /proc,
the store's database, WAL and readers, every HTTP connection. Out of them, samples, writes
and requests fail together (EMFILE, or ENFILE for the whole system). At start the soft limit
is raised to the hard one (``raise_limit``); HTTP connections are capped below it
(``connection_cap``, ``sidecar.serve.http``), so clients cannot take what sampling needs.
``Descriptors`` is told of every failure that says so and counts what is open once a pass of
the session loop: it says so once in the log at WARNING (then at most once a minute while it
lasts), and /healthz reads "degraded" with the reason while it lasts.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("sidecar.serve")

#: The errors of a process, or of the system, out of descriptors.
ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
#: How those errors read once turned into text: strerror, and Rust's ``os error N``.
_TEXT = re.compile(
    rf"too many open files|os error (?:{errno.EMFILE}|{errno.ENFILE})\b|\bE[MN]FILE\b",
    re.IGNORECASE,
)
#: Descriptors kept for what is not an HTTP connection: the sampler's reads of /proc, the
#: store's writer (database, WAL, shared memory, lock) and its readers (a connection of three
#: files for each of the 40 threads that serve requests), logs, the listening socket.
RESERVED = 160
#: The most HTTP connections at once when the limit leaves room for them (``connection_cap``).
MAX_CONNECTIONS = 100
#: The fewest open descriptors free that is still "enough": fewer, and it is running out.
LOW = 16
#: Seconds a failure for want of descriptors keeps /healthz "degraded" after it.
LASTS = 10.0
#: Seconds between two WARNING lines while it lasts.
WARN_EVERY = 60.0


def is_out_of_descriptors(err: BaseException | str | None) -> bool:
    """The error (or its text) says a process, or the system, has no descriptor left."""
    if err is None:
        return False
    if isinstance(err, OSError) and err.errno in ERRNOS:
        return True
    return bool(_TEXT.search(str(err)))


def soft_limit() -> int:
    """The soft RLIMIT_NOFILE (a large number when unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def raise_limit() -> tuple[int, int]:
    """Raises the soft RLIMIT_NOFILE to the hard one, as servers do; returns (soft, hard) as
    they are after it (unchanged where the system refuses)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard


def connection_cap(limit: int) -> int:
    """The most HTTP connections at once under a soft limit of ``limit`` descriptors: half of
    what RESERVED leaves, MAX_CONNECTIONS at the most, 8 at the least."""
    return max(8, min(MAX_CONNECTIONS, (limit - RESERVED) // 2))


def count_open() -> int:
    """Descriptors this process has open (/proc/self/fd); raises OSError (EMFILE) when none is
    left to list them with."""
    return len(os.listdir("/proc/self/fd")) - 1  # less the one the listing opened


class Descriptors:
    """What ``sidecar serve`` knows of its descriptors, told by every part that needs them."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.time) -> None:
        #: The soft RLIMIT_NOFILE.
        self.limit = limit
        self.clock = clock
        #: Open now, as last counted (None before the first count).
        self.open: int | None = None
        #: Failures for want of descriptors, and counts that found almost none free.
        self.failures = 0
        self.last_at: float | None = None
        self.last_error: str | None = None
        self._warned_at: float | None = None
        self._unsaid = 0
        self._lock = threading.Lock()

    def check(self) -> None:
        """Counts the descriptors open against the limit as it is now (``prlimit`` can change
        it under a running process); almost none free (fewer than LOW) counts as a failure."""
        self.limit = soft_limit()
        try:
            count = count_open()
        except OSError as err:
            if is_out_of_descriptors(err):
                self.failed("a count of the descriptors open", err)
            return
        self.open = count
        if self.limit - count < LOW:
            self.failed("the descriptors open", f"{count} of {self.limit} in use")
        elif self._warned_at is not None and not self.lasts(self.clock()):
            with self._lock:
                self._warned_at, self._unsaid = None, 0
            log.info("file descriptors available again (%d of %d in use)", count, self.limit)

    def failed(self, where: str, err: BaseException | str) -> None:
        """``where`` (the sampler, the store, HTTP, ...) failed for want of descriptors."""
        now = self.clock()
        with self._lock:
            self.failures += 1
            self.last_at = now
            self.last_error = f"{where}: {err}"
            warn = self._warned_at is None or now - self._warned_at >= WARN_EVERY
            if not warn:
                self._unsaid += 1
                return
            unsaid, self._unsaid, self._warned_at = self._unsaid, 0, now
        since = f"; {unsaid} more failures since the last warning" if unsaid else ""
        log.warning(
            "out of file descriptors (limit %d open files): %s: %s; samples, writes and "
            "connections fail meanwhile%s",
            self.limit,
            where,
            err,
            since,
        )

    def note(self, where: str, err: BaseException | str | None) -> bool:
        """``failed`` if ``err`` says it was for want of descriptors; True if it did."""
        if err is not None and is_out_of_descriptors(err):
            self.failed(where, err)
            return True
        return False

    def lasts(self, now: float) -> bool:
        """It is out of descriptors now, or was within the last LASTS seconds."""
        return self.last_at is not None and now - self.last_at < LASTS

    def health(self, now: float) -> dict[str, Any]:
        lasts = self.lasts(now)
        return {
            "open": self.open,
            "limit": self.limit,
            "exhausted": lasts,
            "failures": self.failures,
            "last_error": self.last_error,
            "reason": f"out of file descriptors: {self.last_error}" if lasts else None,
        }
