"""``sidecar top``: a live view of a process's event loop in the terminal, refreshed every
second over the last N seconds: the loop's shares with their history, who held the GIL, the
asyncio tasks in flight, the stalls, and the functions table, sortable by keys as py-spy's
``top``. Drawn with textual; ``--snapshots N`` prints plain text instead, for a pipe.

The target is read, never stopped (the sampler is non-blocking); ``q``, Ctrl-C and SIGTERM
stop the sampler and leave.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sidecar import defaults
from sidecar.commands.habits import add_answers
from sidecar.commands.options import add_rate, add_stall_ms
from sidecar.commands.signals import terminate_as_interrupt
from sidecar.defaults import TOP_SPAN_S as DEFAULT_SPAN
from sidecar.errors import TargetError, UsageError

if TYPE_CHECKING:
    from sidecar import _native
    from sidecar.analyze.top import Rolling, View
    from sidecar.classify.process import ProcessInfo
    from sidecar.commands.top_view import Frame

HELP = "a live view of the event loop in the terminal: shares, GIL, tasks, stalls, functions"
#: how often --subprocesses looks for workers that joined the group or left it (seconds)
REGROUP_S = 2.0
NOT_A_TERMINAL = (
    "top draws in a terminal and standard output is not one; --snapshots N prints N plain "
    "snapshots a second apart instead"
)


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "top",
        help=HELP,
        description=HELP + ". Refreshed every second over the last N seconds (key w: 5, 10, "
        "30 or 60); keys 1-4 sort the functions table by %%Own, %%Total, OwnTime, TotalTime "
        "(again: reversed), h shows the keys, q or Ctrl-C quits. The target is read, never "
        "stopped.",
    )
    parser.add_argument("-p", "--pid", type=int, required=True, help="process to watch")
    add_rate(parser)
    parser.add_argument(
        "-s",
        "--subprocesses",
        action="store_true",
        help="the whole pre-fork group of --pid (gunicorn's master and workers): the workers "
        "together, or one process at a time (key p)",
    )
    add_stall_ms(parser)
    parser.add_argument(
        "--snapshots",
        type=int,
        metavar="N",
        help="print N plain-text snapshots of the screen a second apart and exit (for a pipe "
        "or a log; without it, standard output must be a terminal)",
    )
    add_answers(parser)
    parser.set_defaults(run=run)


@dataclass
class Watched:
    """One process sampled: its sampler, what discovery knows of it, why its tasks are not
    scanned (empty when they are)."""

    info: ProcessInfo
    sampler: _native.Sampler
    tasks_note: str = ""


@dataclass
class Feed:
    """The samplers of the processes watched, drained into one rolling span."""

    watched: list[Watched]
    rate_hz: float
    stall_ms: float
    rolling: Rolling = field(init=False)
    #: the span shown (seconds), the process shown (None: all), the sort
    span: float = DEFAULT_SPAN
    pid: int | None = None
    sort: str = "own"
    ascending: bool = False
    help: bool = False
    #: the first line of the help shown, where it does not fit the terminal
    help_offset: int = 0
    #: with --subprocesses, the PID the group was found from: looked at again every
    #: REGROUP_S, since a master replaces the workers that exit
    group: int | None = None
    #: workers that left the group and ones that joined it since the start, in order
    left: list[int] = field(default_factory=list)
    joined: list[int] = field(default_factory=list)
    #: workers that joined but could not be read (not tried again)
    refused: set[int] = field(default_factory=set)
    regrouped: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        from sidecar.analyze.top import Rolling

        self.rolling = Rolling(self.rate_hz)

    def poll(self) -> None:
        from sidecar.classify.window import window_of

        for one in self.watched:
            feed = self.rolling.feed(one.info.pid, one.info)
            for window in one.sampler.drain():
                feed.add(window_of(window))
        if self.group is not None and time.monotonic() - self.regrouped >= REGROUP_S:
            self.regroup(self.group)

    def regroup(self, group: int) -> None:
        """Follow the group's changes: a worker that exited (its last samples drained) leaves
        the list, one its master started since (gunicorn and Tornado replace a worker that
        dies or, in gunicorn, served its ``max_requests``) is watched from now on."""
        from sidecar.discover import prefork_group

        self.regrouped = time.monotonic()
        pids = prefork_group(group)  # the master alone once it is gone
        for one in [w for w in self.watched if w.sampler.exited and w.info.pid not in pids]:
            one.sampler.stop()
            self.watched.remove(one)
            self.left.append(one.info.pid)
            if self.pid == one.info.pid:
                self.pid = None
        known = {w.info.pid for w in self.watched} | self.refused | set(self.left)
        for pid in pids:
            if pid in known:
                continue
            try:
                self.watched.append(_watch(pid, self.rate_hz, self.stall_ms))
            except (TargetError, OSError):
                self.refused.add(pid)  # gone already, or not readable: said in the note
            else:
                self.joined.append(pid)

    def title(self) -> str:
        if len(self.watched) == 1:
            return f"PID {self.watched[0].info.pid}"
        if self.pid is None:
            return f"{len(self.watched)} processes (serving ones together)"
        info = next(one.info for one in self.watched if one.info.pid == self.pid)
        return f"PID {self.pid}" + (f" ({info.role})" if info.role else "")

    def note(self) -> str:
        gone = [*self.left, *(one.info.pid for one in self.watched if one.sampler.exited)]
        parts = []
        if gone:
            parts.append(f"PID {_pids(gone)} exited")
        if self.joined:
            parts.append(f"PID {_pids(self.joined)} joined")
        if self.refused:
            parts.append(f"PID {_pids(sorted(self.refused))} not readable")
        if all(one.sampler.exited for one in self.watched):
            parts.append("q quits")
        return "; ".join(parts)

    def frame(self) -> Frame:
        from sidecar.commands.top_view import Frame

        shown = [w for w in self.watched if self.pid is None or w.info.pid == self.pid]
        since = [s for w in shown if (s := w.sampler.stats()["stalled_since"]) is not None]
        notes = {w.tasks_note for w in shown if w.tasks_note}
        return Frame(
            title=self.title(),
            rate_hz=self.rate_hz,
            sort=self.sort,
            ascending=self.ascending,
            help=self.help,
            stalled_since=min(since) if since else None,
            stall_ms=self.stall_ms,
            tasks_note="; ".join(sorted(notes)),
            note=self.note(),
            processes=len(self.watched) > 1,
            help_offset=self.help_offset,
        )

    def view(self, history: int) -> View:
        return self.rolling.view(self.span, self.pid, history=history)

    def lines(self, width: int, height: int) -> list[str]:
        from sidecar.commands.top_view import help_room, screen

        frame = self.frame()
        # a taller terminal, or fewer lines of help, scrolls back what it no longer needs
        self.help_offset = min(self.help_offset, help_room(frame, height)[1])
        frame = replace(frame, help_offset=self.help_offset)
        return screen(self.view(max(1, width - 17)), frame, width, height)

    # what the keys do
    def sort_by(self, column: int) -> None:
        from sidecar.analyze.top import SORTS

        chosen = SORTS[column - 1]
        self.ascending = not self.ascending if chosen == self.sort else False
        self.sort = chosen

    def next_span(self) -> None:
        from sidecar.analyze.top import SPANS

        later = [span for span in SPANS if span > self.span]
        self.span = later[0] if later else SPANS[0]

    def scroll_help(self, lines: int) -> None:
        """The help moved by ``lines`` (up when negative); ``lines`` clamps it to the end."""
        if self.help:
            self.help_offset = max(0, self.help_offset + lines)

    def next_process(self) -> None:
        order: list[int | None] = [None, *(w.info.pid for w in self.watched)]
        if len(order) > 2:
            self.pid = order[(order.index(self.pid) + 1) % len(order)]


def _pids(pids: list[int]) -> str:
    """The last few of ``pids`` (a group that restarts its workers often piles them up)."""
    shown = ", ".join(str(pid) for pid in pids[-3:])
    return shown if len(pids) <= 3 else f"{shown} and {len(pids) - 3} more"


def _watch(pid: int, rate_hz: float, stall_ms: float) -> Watched:
    from sidecar.discover import describe
    from sidecar.sample.sampler import open_sampler
    from sidecar.sample.tasks import snapshot

    info = describe(pid)
    note = ""
    tasks_hz = min(defaults.TASK_RATE_HZ, rate_hz)
    try:
        snapshot(pid)  # a target whose tasks cannot be read is sampled without task scans
    except TargetError as err:
        if isinstance(err.__cause__, ProcessLookupError | PermissionError):
            raise
        note, tasks_hz = f"not scanned: {err}", 0.0
    sampler = open_sampler(pid, rate_hz=rate_hz, tasks_hz=tasks_hz, stall_ms=stall_ms)
    return Watched(replace(info, python_version=sampler.python_version), sampler, note)


def run(args: argparse.Namespace) -> int:
    from sidecar.discover import prefork_group

    if problem := defaults.rate_problem(args.rate):
        raise UsageError(problem)
    if args.snapshots is not None and args.snapshots < 1:
        raise UsageError("--snapshots must be at least 1")
    if args.snapshots is None and not sys.stdout.isatty():
        raise UsageError(NOT_A_TERMINAL)
    pids = prefork_group(args.pid) if args.subprocesses else [args.pid]
    watched: list[Watched] = []
    try:
        for pid in pids:
            watched.append(_watch(pid, args.rate, args.stall_ms))
        feed = Feed(
            watched, args.rate, args.stall_ms, group=args.pid if args.subprocesses else None
        )
        with terminate_as_interrupt():
            if args.snapshots is not None:
                return _snapshots(feed, args.snapshots)
            return _live(feed)
    finally:
        for one in watched:
            one.sampler.stop()


def _snapshots(feed: Feed, count: int) -> int:
    width = int(os.environ.get("COLUMNS", "") or 80)
    try:
        for number in range(count):
            time.sleep(1.0)
            feed.poll()
            if number:
                print()
            print("\n".join(feed.lines(width, 24)), flush=True)
    except KeyboardInterrupt:
        pass
    return 0


def _live(feed: Feed) -> int:
    from sidecar.commands.top_app import TopApp  # textual's import: for the live view only

    app = TopApp(feed)
    app.run()
    return 0
