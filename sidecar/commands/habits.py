"""What a py-spy user types, understood: py-spy's short flags for the options sidecar shares
with it, and its flags that mean something else here, each answered in one line (a usage dump
of the whole command helps nobody who typed ``--gil``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

#: py-spy's flags sidecar answers instead of taking: (flags, whether the run goes on, the line).
ANSWERS: tuple[tuple[tuple[str, ...], bool, str], ...] = (
    (("-i", "--idle"), True, "idle samples are kept already, each ending in [idle] (--cpu "
     "keeps on-CPU samples only)"),
    (("-g", "--gil"), False, "sidecar keeps every sample and marks those waiting for the GIL "
     "with a [gil] frame, naming who held it; --cpu keeps on-CPU samples only"),
    (("-n", "--native"), False, "sidecar samples Python frames only; C and Rust frames are not "
     "read"),
    (("-s", "--subprocesses"), False, "record samples one process; `sidecar serve --match "
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
        if self.goes_on:
            print(f"sidecar: note: {option_string}: {self.line}", file=sys.stderr)
        else:
            parser.exit(2, f"sidecar: error: {option_string} is py-spy's: {self.line}\n")


def add_answers(parser: argparse.ArgumentParser) -> None:
    """py-spy's flags that mean something else here, answered (hidden from ``--help``)."""
    for flags, goes_on, line in ANSWERS:
        parser.add_argument(*flags, action=_Answer, goes_on=goes_on, line=line,
                            help=argparse.SUPPRESS)  # fmt: skip
