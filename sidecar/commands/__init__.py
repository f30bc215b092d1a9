"""Subcommands of the ``sidecar`` CLI, one module each (``sidecar.commands.NAME``), imported
by the parser that takes them (``cli.build_parser``)."""

from __future__ import annotations

#: Registered in this order in ``sidecar --help``.
COMMANDS: tuple[str, ...] = (
    "record", "top", "dump", "tasks", "render", "stats", "serve", "diff", "demo",
)  # fmt: skip
