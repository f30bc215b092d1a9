"""What sampling does when nobody says otherwise, set once for the CLI, the service and tests.

The sampling rate and a sampler's window are the native sampler's own defaults
(``_native.DEFAULT_RATE_HZ``, ``DEFAULT_WINDOW_S``), and so is the shortest stall reported
(``DEFAULT_STALL_MS``) and the shortest slow request (``DEFAULT_SLOW_MS``); the stored window
is serve's.
"""

from __future__ import annotations

from sidecar._native import DEFAULT_RATE_HZ, DEFAULT_SLOW_MS, DEFAULT_STALL_MS, DEFAULT_WINDOW_S

#: Samples per second.
RATE_HZ: float = DEFAULT_RATE_HZ
#: Seconds per window a sampler hands over (``record`` adds them up).
SAMPLER_WINDOW_S: float = DEFAULT_WINDOW_S
#: asyncio task scans per second (``record --tasks``, ``serve``).
TASK_RATE_HZ: float = 10.0
#: Seconds per window ``serve`` stores.
STORE_WINDOW_S: int = 10
#: The shortest stall of an event loop reported (ms): asyncio's own slow_callback_duration.
STALL_MS: float = DEFAULT_STALL_MS
#: The shortest slow request reported (ms): one the task scans saw in flight this long.
SLOW_MS: float = DEFAULT_SLOW_MS
#: The highest sampling rate the CLI and the service take.
MAX_RATE_HZ: float = 10_000.0
#: The span ``top`` shows first (seconds of the latest windows).
TOP_SPAN_S: int = 10
#: Characters of a str or bytes local variable ``dump --locals`` shows before it is cut.
LOCALS_CHARS: int = 80
#: Seconds a client of ``serve`` has to send a request's headers, from its connection or the
#: end of the response before (``--header-timeout``).
HEADER_TIMEOUT_S: float = 10.0


def rate_problem(rate: float) -> str | None:
    """What is wrong with ``--rate RATE``, said so it can be fixed; None when it is fine."""
    if 0 < rate <= MAX_RATE_HZ:
        return None
    return (
        f"--rate {rate:g}: the rate is samples per second, more than 0 and at most "
        f"{MAX_RATE_HZ:,g} (default {RATE_HZ:g})"
    )


def slow_problem(slow_ms: float) -> str | None:
    """What is wrong with ``--slow-ms MS``, said so it can be fixed; None when it is fine."""
    if 1 <= slow_ms <= 86_400_000:
        return None
    return (
        f"--slow-ms {slow_ms:g}: the shortest slow request reported, in milliseconds, from 1 "
        f"to 86400000 (default {SLOW_MS:g})"
    )


def stall_problem(stall_ms: float) -> str | None:
    """What is wrong with ``--stall-ms MS``, said so it can be fixed; None when it is fine."""
    if 1 <= stall_ms <= 3_600_000:
        return None
    return (
        f"--stall-ms {stall_ms:g}: the shortest stall reported, in milliseconds, from 1 to "
        f"3,600,000 (default {STALL_MS:g})"
    )
