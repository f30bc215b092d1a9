"""What a py-spy user types, understood: py-spy's flags that mean something else here, each
answered in one line (a usage dump of the whole command helps nobody who typed ``--gil``), the
same way by every command that reads a process. A command that takes one of those flags
itself (``dump -s``) keeps it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

#: py-spy's flags sidecar answers instead of taking: (flags, whether the run goes on, the line;
#: ``{prog}`` is the command, ``sidecar record``).
ANSWERS: tuple[tuple[tuple[str, ...], bool, str], ...] = (
    (("-i", "--idle"), True, "idle threads are kept already: their samples end in [idle], and "
     "dump and top show their state (`sidecar record --cpu` keeps on-CPU samples only)"),
    (("-g", "--gil"), False, "sidecar keeps every sample and marks those waiting for the GIL "
     "with a [gil] frame, naming who held it; `sidecar record --cpu` keeps on-CPU samples "
     "only"),
    (("-n", "--native"), False, "sidecar reads Python frames only; C and Rust frames are not "
     "read"),
    (("-s", "--subprocesses"), False, "`{prog}` reads one process; `sidecar serve --match "
     "REGEX` samples every process whose command line matches, pre-fork workers included"),
)  # fmt: skip


class _Answer(argparse.Action):
    """A py-spy flag: its line, then the run goes on (a note) or ends (exit 2)."""

    def __init__(self, option_strings: Sequence[str], dest: str, goes_on: bool, line: str,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.goes_on, self.line = goes_on, line

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:  # fmt: skip
        line = self.line.format(prog=parser.prog)
        if self.goes_on:
            print(f"sidecar: note: {option_string}: {line}", file=sys.stderr)
        else:
            parser.exit(2, f"sidecar: error: {option_string} is py-spy's: {line}\n")


def add_answers(parser: argparse.ArgumentParser) -> None:
    """py-spy's flags that mean something else here, answered (hidden from ``--help``); call
    it after the command's own options, which it leaves as they are."""
    for flags, goes_on, line in ANSWERS:
        free = [flag for flag in flags if flag not in parser._option_string_actions]
        if free:
            parser.add_argument(*free, action=_Answer, goes_on=goes_on, line=line,
                                help=argparse.SUPPRESS)  # fmt: skip
