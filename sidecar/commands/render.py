"""``sidecar render``: folded text (or a speedscope or pprof file) to a flamegraph SVG that carries
its folded stacks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sidecar.errors import ProfileFormatError
from sidecar.formats.render import RenderOptions
from sidecar.output import add_force, check_output, write_bytes

HELP = "render a profile (folded stacks, speedscope, pprof) into a flamegraph SVG"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("render", help=HELP, description=HELP + ".")
    parser.add_argument(
        "folded", metavar="FOLDED", help="folded stacks (or speedscope, pprof) file ('-' for stdin)"
    )
    parser.add_argument(
        "-o", "--output", metavar="OUT.svg", help="SVG file (default: FOLDED with .svg)"
    )
    parser.add_argument("--title", default=None, help="title (default: the input's name)")
    parser.add_argument("--inverted", action="store_true", help="icicle graph: roots at the top")
    add_min_width(parser)
    add_force(parser)
    parser.set_defaults(run=run)


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    # a percentage of the whole graph's width: above 100 not even the root is drawn
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(
            f"must be between 0 and 100 (a percentage of the total), not {text}"
        )
    return value


def add_min_width(parser: argparse.ArgumentParser) -> None:
    """The graph's `--min-width` option, as `render` and `diff` take it."""
    parser.add_argument(
        "--min-width",
        type=_percent,
        default=RenderOptions.min_width,
        metavar="PCT",
        help="omit frames narrower than this percentage of the total "
        f"(default {RenderOptions.min_width})",
    )


def run(args: argparse.Namespace) -> int:
    from sidecar.formats.export import export
    from sidecar.formats.inputs import parse_profile, read_input, sniff

    if args.output:
        output = args.output
    elif args.folded == "-":
        output = "-"
    else:
        output = str(Path(args.folded).with_suffix(".svg"))
    check_output(output, force=args.force, inputs=[args.folded])
    data = read_input(args.folded)
    if sniff(data) == "svg":
        raise ProfileFormatError(
            f"{args.folded}: already a flamegraph SVG; render takes folded stacks, speedscope "
            "or pprof "
            "(stats and diff read SVGs as they are)"
        )
    profile = parse_profile(data, source=args.folded)  # as stats and diff read it
    del data  # not kept while drawing
    title = args.title or ("Flame Graph" if args.folded == "-" else Path(args.folded).name)
    options = RenderOptions(title=title, inverted=args.inverted, min_width=args.min_width)
    write_bytes(output, export(profile, "svg", options))
    if output != "-":
        print(
            f"wrote {output} ({profile.total:,} samples, {len(profile.stacks):,} stacks)",
            file=sys.stderr,
        )
    return 0
