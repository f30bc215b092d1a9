"""The ``sidecar`` command line: parse arguments, call the core, print results.

Every subcommand lives in ``sidecar/commands/`` and exposes ``add_parser`` and ``run``. Domain
errors become one line on stderr and exit 1 (2 for usage errors).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sidecar import __version__
from sidecar.commands import COMMANDS
from sidecar.errors import SidecarError, signal_of


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sidecar",
        description="Profile running asyncio web services (aiohttp, Tornado) from outside: "
        "sample their stacks, see where the event loop is busy, idle or blocked.",
    )
    parser.add_argument("--version", action="version", version=f"sidecar {__version__}")
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
