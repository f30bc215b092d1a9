"""The ``sidecar`` command line: parse arguments, call the core, print results.

Every subcommand lives in ``sidecar/commands/`` and exposes ``add_parser`` and ``run``. Domain
errors become one line on stderr and exit 1 (2 for usage errors).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import Any

from sidecar.commands import COMMANDS
from sidecar.errors import SidecarError, signal_of


class _Version(argparse.Action):
    """``--version``: the installed version, looked up when asked for (``sidecar.__version__``
    reads the distribution's metadata, which no other command needs)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:  # fmt: skip
        from sidecar import __version__

        print(f"sidecar {__version__}")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command`` alone when it names one: a command's run
    needs its own options only, and each command's module is imported by its parser."""
    parser = argparse.ArgumentParser(
        prog="sidecar",
        description="Profile running asyncio web services (aiohttp, Tornado) from outside: "
        "sample their stacks, see where the event loop is busy, idle or blocked.",
    )
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in (command,) if command in COMMANDS else COMMANDS:
        import_module(f"sidecar.commands.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # the command first (``sidecar dump ...``): its parser alone; anything else (``--help``, a
    # mistake) meets the parser of every command, which lists them
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except SidecarError as err:
        print(f"sidecar: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt as interrupt:
        print("sidecar: interrupted", file=sys.stderr)
        return 128 + signal_of(interrupt)  # 130 for Ctrl-C, 143 for SIGTERM
    except BrokenPipeError:
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
