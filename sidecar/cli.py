"""The ``sidecar`` command line: parse arguments, call the core, print results.

Every subcommand lives in ``sidecar/commands/`` and exposes ``add_parser`` and ``run``. Domain
errors become one line on stderr and exit 1 (2 for usage errors).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sidecar",
        description="Profile running asyncio web services (aiohttp, Tornado) from outside: "
        "sample their stacks, see where the event loop is busy, idle or blocked.",
    )
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
