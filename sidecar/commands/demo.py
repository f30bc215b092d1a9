"""``sidecar demo``: the demo services under load, with ``sidecar serve`` attached."""

from __future__ import annotations

import argparse
from typing import Any

from sidecar.errors import SidecarError

HELP = "run the demo aiohttp and Tornado services under load with sidecar serving their profiles"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("demo", help=HELP, description=HELP + ". Ctrl-C stops everything.")
    parser.add_argument("--port", type=int, default=8321, help="port of the UI (default 8321)")
    parser.add_argument("--db", help="database file (default out/demo.db in the checkout)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        from targets import demo
    except ImportError as err:
        raise SidecarError("the demo services (targets/) are not installed with sidecar") from err
    argv = ["--port", str(args.port)] + (["--db", args.db] if args.db else [])
    return demo.main(argv)
