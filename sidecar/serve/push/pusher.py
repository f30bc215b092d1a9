"""The pusher: a sink that sends every window to Grafana Pyroscope from its own thread.

Windows queue in a bounded backlog as they are sampled (before the store downsamples anything).
The thread takes the oldest few, encodes them once (``series``), and pushes them in one request.
A failure worth retrying (timeout, refused connection, 408, 429, 5xx) puts them back at the head
of the backlog and waits, longer each time up to a bound; when the server is back the backlog
is sent oldest first. A window is given up, and counted by why, when the server rejects it
(another 4xx), when it grew too old for Pyroscope to accept (an hour by default), when the
backlog overflows (the oldest go first), or when the sidecar stops before it could be sent.
Sampling and storing never wait for any of this.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from sidecar.sample.messages import Gone, Message, ProcessKey, ProcessRecord, WindowBatch
from sidecar.serve.push.client import Client, PushFailed
from sidecar.serve.push.series import Labels, Series, request, series_labels, series_of
from sidecar.serve.sinks import SinkHealth

log = logging.getLogger("sidecar.push")

#: Why windows are given up (the ``reason`` label of ``sidecar_push_windows_given_up``).
REASONS = ("rejected", "expired", "overflow", "shutdown")


@dataclass
class PushHealth(SinkHealth):
    """What /healthz and /metrics report about pushing."""

    pushed_windows: int = 0
    requests: int = 0
    bytes_sent: int = 0
    #: Pushes that failed and were (or will be) tried again.
    retries: int = 0
    given_up: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    last_error_at: float | None = None
    last_success_at: float | None = None
    #: When a window was last given up.
    given_up_at: float | None = None

    def give_up(self, reason: str, count: int = 1) -> None:
        self.given_up[reason] += count
        self.given_up_at = time.time()

    def problems_at(self) -> tuple[float | None, ...]:
        """A window given up."""
        return (self.given_up_at,)


@dataclass
class _Item:
    labels: Labels
    batch: WindowBatch
    #: Encoded once, on the first attempt.
    series: list[Series] | None = None


class Pusher:
    """Pushes windows to Pyroscope; the push sink of ``sidecar.serve.sinks``."""

    name = "push"

    def __init__(
        self,
        client: Client,
        *,
        rate_hz: float,
        task_rate_hz: float = 0.0,
        service_name: str | None = None,
        extra_labels: Labels = (),
        max_backlog: int = 2000,
        max_age: float = 3300.0,
        per_request: int = 20,
        max_backoff: float = 30.0,
    ) -> None:
        self.client = client
        self.rate_hz = rate_hz
        #: The task scans' rate: a window's task-samples stand for that period each.
        self.task_rate_hz = task_rate_hz
        self.service_name = service_name
        self.extra_labels = extra_labels
        self.max_backlog = max_backlog
        #: Pyroscope rejects profiles over an hour old: older windows are not sent.
        self.max_age = max_age
        self.per_request = per_request
        self.max_backoff = max_backoff
        self.health = PushHealth()
        self._labels: dict[ProcessKey, Labels] = {}
        self._queue: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._deadline = 0.0
        self._backoff = 0.0
        #: Windows taken for the request under way; given up by ``stop`` if it never ends.
        self._in_flight = 0
        #: Set by ``stop`` once it has counted what is left: the thread counts nothing more.
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="sidecar-pusher", daemon=True)

    # -- the sink --------------------------------------------------------------------------

    def submit(self, message: Message) -> None:
        if isinstance(message, ProcessRecord):
            if message.error is None:
                self._labels[message.key] = series_labels(
                    message, self.service_name, self.extra_labels
                )
            return
        if isinstance(message, Gone):
            self._labels.pop(message.key, None)  # its windows queued before, with its labels
            return
        labels = self._labels.get(message.process)
        if labels is None:
            return  # a window of a process never announced: nothing to name its series by
        with self._cond:
            self._queue.append(_Item(labels, message))
            self._bound()
            self._cond.notify()

    def _bound(self) -> None:
        """Past the bound the oldest windows go (the lock is held)."""
        while len(self._queue) > self.max_backlog:
            self._queue.popleft()
            self.health.give_up("overflow")
        self.health.backlog = len(self._queue)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Sends what is queued until ``timeout``; what is left is given up and counted."""
        with self._cond:
            self._deadline = time.monotonic() + timeout
            self._stopping.set()
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout + 2.0)
        with self._cond:
            # a request still under way (a server that hangs) counts as not sent
            left = len(self._queue) + (self._in_flight if self._thread.is_alive() else 0)
            self._queue.clear()
            self.health.backlog = 0
            self._closed = True
        if left:
            self.health.give_up("shutdown", left)
            log.warning("stopping with %d windows not pushed", left)
        self.client.close()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                if self._step():
                    return
            except Exception as err:  # the pusher never dies: report, wait, go on
                log.exception("unexpected error in the pusher")
                self._note(f"{type(err).__name__}: {err}")
                self._wait()

    def _step(self) -> bool:
        """One push of the oldest windows; True when stopping and done."""
        with self._cond:
            if not self._queue and not self._stopping.is_set():
                self._cond.wait(timeout=1.0)
            if self._stopping.is_set() and (not self._queue or time.monotonic() >= self._deadline):
                return True
            self._expire()
            items = [self._queue.popleft() for _ in range(min(self.per_request, len(self._queue)))]
            # a window in a request under way is not pushed yet: it counts in the backlog
            self._in_flight = len(items)
            self.health.backlog = len(self._queue) + self._in_flight
        if not items:
            return False
        try:
            return self._push(items)
        finally:
            with self._cond:
                self._in_flight = 0  # settled below, or by an unexpected error
                self.health.backlog = len(self._queue)

    def _push(self, items: list[_Item]) -> bool:
        """Encodes and sends ``items``; True when ``stop`` gave up on them meanwhile."""
        series: list[Series] = []
        for item in items:
            if item.series is None:
                item.series = series_of(item.labels, item.batch, self.rate_hz, self.task_rate_hz)
            series.extend(item.series)
        if not series:  # windows with no samples: nothing to send
            self.health.pushed_windows += len(items)
            return False
        body = request(series)
        try:
            self.client.push(body)
        except PushFailed as err:
            # settled under the lock, so that stop() counts each window once
            with self._cond:
                if self._closed:
                    return True  # stop() counted these as given up
                self._in_flight = 0
                if err.retry:
                    self.health.retries += 1
                    self._queue.extendleft(reversed(items))
                    self._bound()
                else:
                    self.health.give_up("rejected", len(items))
            self._note(str(err))
            if err.retry:
                self._wait()
            else:
                log.error("Pyroscope rejected %d windows: %s", len(items), err)
            return False
        with self._cond:
            if self._closed:
                return True
            self._in_flight = 0
            if self.health.failing:
                log.info("pushing again; backlog %d windows", self.health.backlog)
            self.health.failing = False
            self.health.pushed_windows += len(items)
            self.health.requests += 1
            self.health.bytes_sent += len(body)
            self.health.last_success_at = time.time()
        self._backoff = 0.0
        return False

    def _expire(self) -> None:
        """Drops the windows Pyroscope would refuse as too old (the lock is held)."""
        cutoff = time.time() - self.max_age
        while self._queue and self._queue[0].batch.start < cutoff:
            self._queue.popleft()
            self.health.give_up("expired")

    def _note(self, error: str) -> None:
        if not self.health.failing:
            log.warning("cannot push to Pyroscope: %s (keeping a backlog)", error)
        self.health.failing = True
        self.health.last_error = error
        self.health.last_error_at = time.time()

    def _wait(self) -> None:
        """Waits before the next attempt: 1 s, doubling up to ``max_backoff``, with jitter;
        a stop cuts it short."""
        self._backoff = min(self.max_backoff, max(1.0, self._backoff * 2))
        wait = self._backoff * random.uniform(0.8, 1.2)
        if self._stopping.is_set():
            time.sleep(min(wait, max(0.0, self._deadline - time.monotonic())))
        else:
            self._stopping.wait(wait)
