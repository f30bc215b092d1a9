"""sidecar: a profiling sidecar for asyncio web services."""

import os
from importlib.metadata import version

#: The installed distribution's version: pyproject.toml says it once.
__version__ = version("sidecar")

# The native core's errors become one line each (a backtrace is never shown), and its sampler
# meets some in normal work: a stack read as the target changed it is read again, about once in
# a hundred samples of a busy target. With RUST_BACKTRACE=1 in the environment each would also
# capture a backtrace (tens of µs of CPU); library backtraces are off unless asked for by name.
os.environ.setdefault("RUST_LIB_BACKTRACE", "0")
