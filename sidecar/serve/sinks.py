"""The consumers of sampled windows: sinks, each with its own bounded queue, thread and health.

``Sessions`` hands every message (a process seen, a window of samples, a process gone) to one
``Fanout``, which gives it to each sink in turn. A sink's ``submit`` only queues: it never
waits on a disk, a network or another sink, and past its bound it drops its own oldest windows
and counts them. So a full disk does not hold up a push, an unreachable Pyroscope does not hold
up the store, and neither holds up the samplers. Sinks today: the store's ``Writer`` and the
Pyroscope ``Pusher``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sidecar.sample.messages import Message

log = logging.getLogger("sidecar.sinks")
#: Seconds a past problem of a sink (a window dropped or given up, the database started anew,
#: a full disk) keeps it reported as degraded; the counters stay cumulative.
RECENT = 300.0


def recent(at: float | None, now: float) -> bool:
    """``at`` lies within the ``RECENT`` seconds before ``now``."""
    return at is not None and now - at < RECENT


@dataclass
class SinkHealth:
    """What /healthz and /metrics report about a sink, and the one rule for "degraded"."""

    #: Windows queued and not yet handed over.
    backlog: int = 0
    #: The sink's last attempt failed (it keeps its backlog and tries again).
    failing: bool = False
    last_error: str | None = None

    def problems_at(self) -> tuple[float | None, ...]:
        """When each kind of past problem last happened (None: never)."""
        return ()

    def degraded(self, now: float) -> bool:
        """It fails now, or had a problem within the last ``RECENT`` seconds."""
        return self.failing or any(recent(at, now) for at in self.problems_at())


class Sink(Protocol):
    """Something that consumes windows on its own thread."""

    #: Short name for logs and health: "store", "push".
    name: str

    def submit(self, message: Message) -> None:
        """Queues ``message`` without blocking; drops (and counts) the oldest past the bound."""

    def start(self) -> None:
        """Starts the sink's thread."""

    def stop(self, timeout: float = 10.0) -> None:
        """Hands over what is queued as far as it can within ``timeout``, then ends."""


class Fanout:
    """Gives each message to every sink; one sink failing to queue never stops the others."""

    name = "fanout"

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)
        #: Messages a sink refused with an unexpected error, per sink name.
        self.errors: dict[str, int] = {sink.name: 0 for sink in self.sinks}

    def submit(self, message: Message) -> None:
        for sink in self.sinks:
            try:
                sink.submit(message)
            except Exception:  # a sink's bug costs that sink the message, nothing more
                self.errors[sink.name] = self.errors.get(sink.name, 0) + 1
                log.exception("the %s sink could not take a message", sink.name)

    def start(self) -> None:
        for sink in self.sinks:
            sink.start()

    def stop(self, timeout: float = 10.0) -> None:
        for sink in self.sinks:
            sink.stop(timeout)
