"""sidecar: a profiling sidecar for asyncio web services."""

import os
from functools import cache

# The native core's errors become one line each (a backtrace is never shown), and its sampler
# meets some in normal work: a stack read as the target changed it is read again, about once in
# a hundred samples of a busy target. With RUST_BACKTRACE=1 in the environment each would also
# capture a backtrace (tens of µs of CPU); library backtraces are off unless asked for by name.
os.environ.setdefault("RUST_LIB_BACKTRACE", "0")


@cache
def _installed_version() -> str:
    # importlib.metadata costs a command tens of milliseconds (email, zipfile, csv...): it is
    # imported the first time the version is asked for, not by every command
    from importlib.metadata import version

    return version("sidecar")


def __getattr__(name: str) -> str:
    """``__version__``: the installed distribution's version (pyproject.toml says it once)."""
    if name == "__version__":
        return _installed_version()
    raise AttributeError(f"module 'sidecar' has no attribute {name!r}")
