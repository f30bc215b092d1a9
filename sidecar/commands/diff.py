"""``sidecar diff``: two flamegraph SVGs (or folded files) into a differential flamegraph."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from sidecar.commands.render import add_min_width
from sidecar.errors import UsageError
from sidecar.formats.render import RenderOptions
from sidecar.output import add_force, check_output, write_text

HELP = "compare two profiles (flamegraph SVGs or folded stacks) in a differential flamegraph"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "diff",
        help=HELP,
        description=HELP + ". Inputs are recognized by content: SVGs from py-spy, inferno, "
        "flamegraph.pl or sidecar, or folded text. Prints the largest changes in self and "
        "total share and how much the totals differ. In the graph, width is AFTER, red grew, "
        "blue shrank.",
    )
    parser.add_argument("before", metavar="BEFORE", help="the baseline profile ('-' for stdin)")
    parser.add_argument("after", metavar="AFTER", help="the profile to compare with it")
    parser.add_argument(
        "-o",
        "--output",
        metavar="OUT.svg",
        help="differential SVG (default: AFTER's name with .diff.svg, unless only --folded "
        "is given; '-' for stdout)",
    )
    parser.add_argument(
        "--folded", metavar="OUT.folded", help="also write the two-count folded diff lines"
    )
    parser.add_argument(
        "--normalize",
        action="store_true",
        help="scale BEFORE's counts to AFTER's total in the graph and --folded output",
    )
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="rows per change table (default 10)"
    )
    parser.add_argument("--title", help="graph title (default: 'BEFORE -> AFTER')")
    add_min_width(parser)
    add_force(parser)
    parser.set_defaults(run=run)


def _default_output(after: str) -> str:
    if after == "-":
        return "diff.svg"
    path = Path(after)
    return str(path.with_name(path.stem + ".diff.svg"))


def run(args: argparse.Namespace) -> int:
    from sidecar.analyze.diff import diff_profiles, render_diff, report
    from sidecar.formats.inputs import load_profiles

    if args.before == "-" and args.after == "-":
        raise UsageError("only one of BEFORE and AFTER can be '-' (stdin)")
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, not {args.top}")
    if args.output == "-" and args.folded == "-":
        raise UsageError("only one of -o and --folded can be '-' (stdout)")
    output = args.output
    if output is None and args.folded is None:
        output = _default_output(args.after)
    for path in (output, args.folded):
        if path:
            check_output(path, force=args.force, inputs=[args.before, args.after])
    if output and output == args.folded and output != "-":
        raise UsageError("-o and --folded name the same file")
    before, after = load_profiles(args.before, args.after)
    for source, profile in ((args.before, before), (args.after, after)):
        for note in profile.notes:
            print(f"sidecar: note: {source}: {note}", file=sys.stderr)
    diff = diff_profiles(before, after, normalize=args.normalize)
    table = sys.stderr if "-" in (output, args.folded) else sys.stdout
    print(
        f"before: {args.before} ({before.total:,} samples, {len(before.stacks):,} stacks)",
        file=table,
    )
    print(
        f"after:  {args.after} ({after.total:,} samples, {len(after.stacks):,} stacks)", file=table
    )
    print(file=table)
    for line in report(diff, top=args.top):
        print(line, file=table)
    if args.folded:
        write_text(args.folded, "".join(line + "\n" for line in diff.lines))
        if args.folded != "-":
            print(f"wrote {args.folded} ({len(diff.lines):,} diff lines)", file=sys.stderr)
    if output:
        title = args.title or f"{Path(args.before).name} -> {Path(args.after).name}"
        options = RenderOptions(
            title=title,
            subtitle="width = after, red grew, blue shrank",
            min_width=args.min_width,
        )
        # drawing needs the diff's lines alone: the profiles are let go first
        from sidecar.profile import Profile

        del before, after, profile
        diff = replace(diff, before=Profile(), after=Profile())
        write_text(output, render_diff(diff, options))
        if output != "-":
            print(f"wrote {output} (differential flamegraph)", file=sys.stderr)
    table.flush()
    return 0
