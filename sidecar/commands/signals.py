"""SIGTERM handled as Ctrl-C by the commands that run until stopped, so that ``kill``, a
container runtime's stop and Ctrl-C all end them the same way: what was sampled is kept. The
exception raised says which signal it was (``errors.signal_of``), for an exit status of 128 + N."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from sidecar.errors import Terminated


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM raises ``KeyboardInterrupt``; the previous handler returns
    after it."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
