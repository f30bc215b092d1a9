"""Options several commands take, declared once."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from sidecar import defaults
from sidecar.errors import UsageError


def _milliseconds(text: str, problem_of: Callable[[float], str | None]) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of milliseconds: {text!r}") from None
    if problem := problem_of(value):
        raise argparse.ArgumentTypeError(problem.split(": ", 1)[1])
    return value


def _stall_ms(text: str) -> float:
    return _milliseconds(text, defaults.stall_problem)


def _slow_ms(text: str) -> float:
    return _milliseconds(text, defaults.slow_problem)


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


def add_slow_ms(parser: argparse.ArgumentParser, variable: str | None = None) -> None:
    """``--slow-ms MS``: the shortest slow request reported (of the task scans); its default
    comes from the environment variable ``variable`` when given and set."""
    default = (os.environ.get(variable) if variable else None) or defaults.SLOW_MS
    parser.add_argument(
        "--slow-ms",
        type=_slow_ms,
        default=default,
        metavar="MS",
        help="with task scans, the shortest slow request reported: one the scans saw in "
        f"flight this long (default {defaults.SLOW_MS:g})" + (f" [{variable}]" if variable else ""),
    )


def add_task_rate(parser: argparse.ArgumentParser, default: float | None = None) -> None:
    """``--task-rate HZ``: task scans per second with ``--tasks``; ``default`` None stands for
    ``defaults.TASK_RATE_HZ``, or the command's ``--rate`` if lower (the command resolves it)."""
    lower = "" if default is not None else ", or --rate if lower"
    parser.add_argument(
        "--task-rate",
        type=float,
        default=default,
        metavar="HZ",
        help=f"task scans per second with --tasks (default {defaults.TASK_RATE_HZ:g}{lower})",
    )


#: The most tasks a task scan reads (the native scanner's bound and its default).
TASK_BOUND = 20_000


def _task_bound(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of tasks: {text!r}") from None
    if not 1 <= value <= TASK_BOUND:
        raise argparse.ArgumentTypeError(f"must be between 1 and {TASK_BOUND:,} tasks")
    return value


def add_task_bound(parser: argparse.ArgumentParser) -> None:
    """``--task-bound N``: the most tasks one task scan reads; those past it are counted in
    flight, not read (a service with more tasks keeps its scans short)."""
    parser.add_argument(
        "--task-bound",
        type=_task_bound,
        default=None,
        metavar="N",
        help=f"the most asyncio tasks one scan reads (default {TASK_BOUND:,}); the tasks past "
        "it count in flight, in no state",
    )


def add_rate(parser: argparse.ArgumentParser, per: str = "") -> None:
    """``-r HZ``, ``--rate HZ``: samples per second (``per`` says of what, for ``serve``)."""
    parser.add_argument(
        "-r",
        "--rate",
        type=float,
        default=defaults.RATE_HZ,
        metavar="HZ",
        help=f"samples per second{per} (default {defaults.RATE_HZ:g})",
    )


def add_blocking(parser: argparse.ArgumentParser, pause: str) -> None:
    """``--blocking`` (``pause`` says what it stops, and for how long) and py-spy's
    ``--nonblocking``, the default; ``check_blocking`` refuses both at once."""
    parser.add_argument("--blocking", action="store_true", help=pause)
    parser.add_argument(
        "--nonblocking",
        action="store_true",
        help="never stop the target (the default; py-spy's name for it)",
    )


def check_blocking(args: argparse.Namespace) -> None:
    if args.blocking and args.nonblocking:
        raise UsageError("--blocking and --nonblocking: choose one")
