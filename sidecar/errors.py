"""Domain exceptions. The CLI and the HTTP API turn each into one error line or one JSON shape."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

from sidecar import _native
from sidecar.access import why_denied


class SidecarError(Exception):
    """Something sidecar cannot do; the message is shown to the user as is."""

    exit_code = 1


class UsageError(SidecarError):
    """The command line asks for something that does not make sense."""

    exit_code = 2


class TargetError(SidecarError):
    """The target process cannot be sampled."""


class TargetGone(TargetError):
    """The target process does not exist or exited."""


class PermissionDenied(TargetError):
    """Sidecar is not allowed to read the target's memory."""


class NoSamples(SidecarError):
    """A recording ended without a single sample."""


class ProfileFormatError(SidecarError):
    """An input file is not a profile sidecar can read."""


class StoreError(SidecarError):
    """The database cannot be opened or written."""


def denied(pid: int, said: str) -> PermissionDenied:
    """A read of ``pid`` the kernel refused: why, when this process's state and the target's
    tell (a capability the target holds and sidecar lacks, named), else what was ``said``."""
    why = why_denied(pid)
    return PermissionDenied(f"not allowed to read PID {pid}: {why}" if why else said)


@contextmanager
def native_errors(pid: int) -> Iterator[None]:
    """The native core's errors on reading process ``pid``, as the domain errors above."""
    try:
        yield
    except ProcessLookupError as err:
        raise TargetGone(str(err)) from err
    except PermissionError as err:
        raise denied(pid, str(err)) from err
    except _native.SamplerError as err:
        raise TargetError(str(err)) from err


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (``commands.signals``)."""

    signum = signal.SIGTERM


def signal_of(interrupt: KeyboardInterrupt) -> int:
    """The signal that raised ``interrupt``: SIGTERM for ``Terminated``, else SIGINT."""
    return int(getattr(interrupt, "signum", signal.SIGINT))


class CgroupError(SidecarError):
    """The target's cgroup, or its CPU limit and throttling, cannot be found or read."""
