"""What sampling does when nobody says otherwise, set once for the CLI, the service and tests.

The sampling rate and a sampler's window are the native sampler's own defaults
(``_native.DEFAULT_RATE_HZ``, ``DEFAULT_WINDOW_S``); the stored window is serve's.
"""

from __future__ import annotations

from sidecar._native import DEFAULT_RATE_HZ, DEFAULT_WINDOW_S

#: Samples per second.
RATE_HZ: float = DEFAULT_RATE_HZ
#: Seconds per window a sampler hands over (``record`` adds them up).
SAMPLER_WINDOW_S: float = DEFAULT_WINDOW_S
#: asyncio task scans per second (``record --tasks``, ``serve``).
TASK_RATE_HZ: float = 10.0
#: Seconds per window ``serve`` stores.
STORE_WINDOW_S: int = 10
