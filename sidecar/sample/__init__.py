"""Sampling: the native sampler opened on a process (``sampler``), a one-shot recording
(``record``), a program started to be recorded (``launch``), a snapshot of its asyncio tasks
(``tasks``). Whether this sidecar may trace at all is ``sidecar.access``; ``sidecar serve``'s
long-running sessions are in ``sidecar.serve``."""
