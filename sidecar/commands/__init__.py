"""Subcommands of the ``sidecar`` CLI, one module each."""

from __future__ import annotations

from types import ModuleType

from sidecar.commands import demo, diff, dump, record, render, serve, stats, tasks, top

#: Registered in this order in ``sidecar --help``.
COMMANDS: tuple[ModuleType, ...] = (
    record, top, dump, tasks, render, stats, serve, diff, demo,
)  # fmt: skip
