"""``sidecar tasks``: one snapshot of a process's asyncio tasks, printed as a tree."""

from __future__ import annotations

import argparse
from typing import Any

from sidecar.commands.habits import add_answers

HELP = "print the asyncio tasks of a running process (CPython 3.11+) as a tree"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "tasks",
        help=HELP,
        description=HELP + ": each task's name, state (running, ready, waiting) and await "
        "chain, outermost coroutine first; a task that another awaits is shown under it. "
        "The target is read, never stopped.",
    )
    parser.add_argument("-p", "--pid", type=int, required=True, help="process to read")
    add_answers(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sidecar.sample.tasks import snapshot, summary_line, tree_lines

    scan = snapshot(args.pid)
    print(summary_line(args.pid, scan))
    for line in tree_lines(scan):
        print(line)
    return 0
