"""Options several commands take, declared once."""

from __future__ import annotations

import argparse
import os

from sidecar import defaults


def _stall_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of milliseconds: {text!r}") from None
    if problem := defaults.stall_problem(value):
        raise argparse.ArgumentTypeError(problem.split(": ", 1)[1])
    return value


def add_stall_ms(parser: argparse.ArgumentParser, variable: str | None = None) -> None:
    """``--stall-ms MS``: the shortest stall of an event loop reported; its default comes from
    the environment variable ``variable`` when given and set."""
    # a string default goes through ``type``: a bad one is a usage error like the option's
    default = (os.environ.get(variable) if variable else None) or defaults.STALL_MS
    parser.add_argument(
        "--stall-ms",
        type=_stall_ms,
        default=default,
        metavar="MS",
        help="the shortest stall of the event loop reported: one callback that kept the loop "
        f"from its poll this long (default {defaults.STALL_MS:g}, asyncio's own "
        "slow_callback_duration)" + (f" [{variable}]" if variable else ""),
    )
