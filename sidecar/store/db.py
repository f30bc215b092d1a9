"""The writer side of the store: ``Store``, the one class that writes a sidecar database.

Only the writer thread (``sidecar.serve.writer``) uses a ``Store``; readers open their own
read-only connections (``sidecar.store.query``). It is made of three parts over one connection:
the database file's life (``sidecar.store.file``: lock, open, check, recreate, checkpoint,
close, transactions), writing processes and windows (``sidecar.store.windows``), and
retention (``sidecar.store.retention``: prune, evict, downsample, roll up, collect stacks).
"""

from __future__ import annotations

from sidecar.store.retention import Retention
from sidecar.store.windows import WindowWriter


class Store(WindowWriter, Retention):
    """The single writer of one sidecar database."""
