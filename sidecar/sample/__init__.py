"""Sampling: the native sampler opened on a process (``sampler``), a one-shot recording
(``record``), a snapshot of its asyncio tasks (``tasks``), and whether this sidecar may trace
at all (``permissions``). ``sidecar serve``'s long-running sessions are in ``sidecar.serve``."""
