"""Domain exceptions. The CLI and the HTTP API turn each into one error line or one JSON shape."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sidecar import _native


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


@contextmanager
def native_errors() -> Iterator[None]:
    """The native core's errors on reading a process, as the domain errors above."""
    try:
        yield
    except ProcessLookupError as err:
        raise TargetGone(str(err)) from err
    except PermissionError as err:
        raise PermissionDenied(str(err)) from err
    except _native.SamplerError as err:
        raise TargetError(str(err)) from err
