"""sidecar: a profiling sidecar for asyncio web services."""

from importlib.metadata import version

#: The installed distribution's version: pyproject.toml says it once.
__version__ = version("sidecar")
