"""``sidecar serve``'s engine: discovery, sampling, the writer and the reader, wired together.

The HTTP layer (``sidecar.serve.api``) only translates requests into calls on a ``Service``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar import defaults
from sidecar.access import detect
from sidecar.discover import Selection
from sidecar.serve.asked import Asked
from sidecar.serve.descriptors import Descriptors, connection_cap, soft_limit
from sidecar.serve.http import HEADER_TIMEOUT, HttpLimits
from sidecar.serve.push import Client, Endpoint, Pusher, pod_labels
from sidecar.serve.sessions import Sessions
from sidecar.serve.sinks import Fanout
from sidecar.serve.writer import Writer
from sidecar.store.query import Reader

log = logging.getLogger("sidecar.service")


@dataclass(frozen=True)
class ServeConfig:
    """Everything ``sidecar serve`` was told."""

    db: Path = Path("sidecar.db")
    host: str = "127.0.0.1"
    port: int = 8321
    rate_hz: float = defaults.RATE_HZ
    window: int = defaults.STORE_WINDOW_S
    pids: frozenset[int] = frozenset()
    match: re.Pattern[str] | None = None
    retention: float = 24 * 3600
    token: str | None = None
    max_db_bytes: int | None = None
    blocking: bool = False
    #: asyncio task scans per second of each target (``--task-rate``; 0: none).
    task_rate_hz: float = defaults.TASK_RATE_HZ
    #: The most tasks a scan reads, when lower than the scanner's 20,000 (hidden
    #: ``--task-bound``, for tests); None: 20,000.
    task_bound: int | None = None
    #: The shortest stall of an event loop kept (``--stall-ms``).
    stall_ms: float = defaults.STALL_MS
    #: The shortest slow request kept (``--slow-ms``), of the task scans.
    slow_ms: float = defaults.SLOW_MS
    scan_interval: float = 2.0
    #: Where to push every window (``--push``), and the series' ``service_name``.
    push: Endpoint | None = None
    service_name: str | None = None
    #: HTTP connections at once (``--max-connections``; None: ``descriptors.connection_cap``
    #: of the open-files limit) and seconds for a request's headers (``--header-timeout``).
    max_connections: int | None = None
    header_timeout: float = HEADER_TIMEOUT


class Service:
    """Runs discovery and sampling on a background thread and serves reads."""

    def __init__(self, config: ServeConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        #: The open-files limit as it is now (``sidecar serve`` raised it first), and the
        #: limits on HTTP connections that keep clients from taking every descriptor.
        self.descriptors = Descriptors(soft_limit(), clock=clock)
        self.http = HttpLimits(
            max_connections=config.max_connections or connection_cap(self.descriptors.limit),
            header_timeout=config.header_timeout,
        )
        self.writer = Writer(
            config.db, retention=config.retention, max_bytes=config.max_db_bytes, clock=clock
        )
        self.pusher: Pusher | None = None
        if config.push is not None:
            self.pusher = Pusher(
                Client(config.push),
                rate_hz=config.rate_hz,
                task_rate_hz=config.task_rate_hz,
                service_name=config.service_name,
                extra_labels=pod_labels(),
            )
        self.sinks = Fanout([self.writer, *([self.pusher] if self.pusher else [])])
        self.sessions = Sessions(
            self.sinks,
            Selection(config.pids, config.match),
            rate_hz=config.rate_hz,
            window=config.window,
            blocking=config.blocking,
            tasks_hz=config.task_rate_hz,
            task_bound=config.task_bound,
            stall_ms=config.stall_ms,
            slow_ms=config.slow_ms,
            descriptors=self.descriptors,
        )
        self.reader = Reader(config.db, config.window)
        #: the PIDs of --pid, and those of them not sampled now
        self.asked = Asked(config.pids, clock=clock)
        self.tracing = detect()
        self.started_at = clock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sidecar-sessions", daemon=True)

    def start(self) -> None:
        (log.info if self.tracing.ok else log.warning)(self.tracing.explain())
        self.sinks.start()
        self._thread.start()

    def stop(self) -> None:
        """Stops sampling, hands the windows in progress to the sinks and stops them (the
        database is closed)."""
        self._stop.set()
        self._thread.join(timeout=15)
        self.sessions.stop()
        self.sinks.stop()

    def _run(self) -> None:
        next_scan = 0.0
        while not self._stop.is_set():
            try:
                self.descriptors.check()
                if time.monotonic() >= next_scan:
                    self.sessions.scan()
                    self.asked.check(
                        (key[0] for key in list(self.sessions.sessions)),
                        (key[0] for key in list(self.sessions.problems)),
                    )
                    next_scan = time.monotonic() + self.config.scan_interval
                self.sessions.drain()
            except Exception:  # keep sampling whatever one pass hits
                log.exception("session loop error")
            self._stop.wait(0.5)

    def health(self) -> dict[str, Any]:
        """Liveness plus what needs attention: untraceable processes now, PIDs of --pid not
        sampled, and the store's problems now or in its recent past (``SinkHealth.degraded``)."""
        health = self.writer.health
        now = self.clock()
        # the program's name alone: arguments can hold secrets, and /healthz answers without
        # the token (the command line is in /api/targets, behind it)
        problems = [
            {
                "pid": p.key[0],
                "program": program_name(p.cmdline),
                "error": p.error,
                "attempts": p.attempts,
            }
            for p in list(self.sessions.problems.values())
        ]
        missing = self.asked.health()
        disk_full = health.disk_full(now)
        push = self._push_health(now)
        descriptors = self.descriptors.health(now)
        degraded = (
            health.degraded(now)
            or bool(problems)
            or bool(missing)
            or bool(push and push["degraded"])
            or descriptors["exhausted"]
        )
        doc: dict[str, Any] = {
            "status": "degraded" if degraded else "ok",
            "uptime": round(now - self.started_at, 1),
            "sessions": len(self.sessions.sessions),
            "tracing": self.tracing.explain(),
            "problems": problems,
            "missing": missing,
            "store": {
                "path": str(self.config.db),
                "size_bytes": health.size_bytes,
                "backlog": health.backlog,
                "writing": not health.failing,
                "disk_full": disk_full,
                "write_errors": health.write_errors,
                "last_error": health.last_error,
                "dropped_windows": health.dropped_windows,
                "evicted_windows": health.evicted_windows,
                "recreated": health.recreated,
            },
            "descriptors": descriptors,
            "http": {
                "connections": self.http.connections,
                "max_connections": self.http.max_connections,
                "refused": self.http.refused,
                "header_timeout": self.http.header_timeout,
                "timed_out": self.http.timed_out,
            },
        }
        if push is not None:
            doc["push"] = push
        return doc

    def _push_health(self, now: float) -> dict[str, Any] | None:
        if self.pusher is None or self.config.push is None:
            return None
        health = self.pusher.health
        return {
            "url": self.config.push.display,
            "pushing": not health.failing,
            "degraded": health.degraded(now),
            "backlog": health.backlog,
            "pushed_windows": health.pushed_windows,
            "retries": health.retries,
            "given_up": dict(health.given_up),
            "last_error": health.last_error,
            "last_success_at": health.last_success_at,
        }


def program_name(cmdline: str) -> str:
    """The name of the program a command line runs, without its directory or arguments:
    ``python3`` for ``/usr/bin/python3 app.py --db-password=…``."""
    first = cmdline.split(" ", 1)[0]
    return first.rsplit("/", 1)[-1] or "?"
