"""Profiles over time in SQLite: the one class that writes (``Store``), its schema and
retention, and the readers (``query``: targets, timelines, Profiles; ``taskquery``: tasks)."""

from sidecar.errors import StoreError
from sidecar.sample.messages import ProcessRecord, WindowBatch
from sidecar.store.db import Store
from sidecar.store.file import StoreLocked

__all__ = ["ProcessRecord", "Store", "StoreError", "StoreLocked", "WindowBatch"]
