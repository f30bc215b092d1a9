"""sidecar: a profiling sidecar for asyncio web services."""

__version__ = "0.1.0"
