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
from typing import Protocol

from sidecar.store.writer import Message

log = logging.getLogger("sidecar.sinks")


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
