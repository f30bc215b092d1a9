"""Profiles over time in SQLite: one writer (``Writer``/``Store``), readers in ``sidecar.query``."""

from sidecar.errors import StoreError
from sidecar.store.db import Store
from sidecar.store.file import StoreLocked
from sidecar.store.records import ProcessRecord, WindowBatch
from sidecar.store.writer import Gone, Writer, WriterHealth

__all__ = [
    "Gone",
    "ProcessRecord",
    "Store",
    "StoreError",
    "StoreLocked",
    "WindowBatch",
    "Writer",
    "WriterHealth",
]
