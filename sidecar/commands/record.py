"""``sidecar record``: sample one process for a while and write a profile."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidecar import _native, defaults
from sidecar.commands.habits import add_answers
from sidecar.commands.options import (
    add_blocking,
    add_rate,
    add_slow_ms,
    add_stall_ms,
    add_task_rate,
    check_blocking,
)
from sidecar.commands.signals import terminate_as_interrupt
from sidecar.errors import NoSamples, UsageError
from sidecar.formats import NAMES
from sidecar.output import add_force, check_output, percent, write_bytes

if TYPE_CHECKING:
    from sidecar._native import SamplerStats
    from sidecar.sample.launch import Launched
    from sidecar.sample.record import Recording

HELP = "sample a running Python process and write a flamegraph or profile"
#: The longest stalls the summary lists.
STALL_ROWS = 5
#: Slow requests listed in the summary, the longest.
REQUEST_ROWS = 5


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "record",
        help=HELP,
        description=HELP + ". Samples off CPU are kept and marked [idle] or [blocked], and "
        "those waiting for the GIL [gil], unless --cpu is given; samples taken during a "
        "garbage collection carry a [gc] frame. Ctrl-C stops early and keeps what was sampled.",
    )
    parser.add_argument("-p", "--pid", type=int, help="process to sample (or: -- COMMAND)")
    parser.add_argument(
        "-d",
        "--duration",
        type=float,
        metavar="S",
        help="seconds to sample (default: until Ctrl-C)",
    )
    add_rate(parser)
    add_blocking(
        parser, "pause the target for each sample (consistent stacks, small pause per sample)"
    )
    add_stall_ms(parser)
    add_slow_ms(parser)
    parser.add_argument("--cpu", action="store_true", help="keep on-CPU samples only")
    parser.add_argument("-t", "--threads", action="store_true", help="add a root frame per thread")
    parser.add_argument(
        "-s",
        "--subprocesses",
        action="store_true",
        help="every process of PID's pre-fork group too (a gunicorn master and its workers, "
        "and those that join it while sampling) into one profile, each under a root frame "
        'process PID:"COMMAND" as py-spy writes it',
    )
    parser.add_argument(
        "--tasks",
        action="store_true",
        help="also profile the asyncio tasks (CPython 3.11+): their await chains and states, "
        "written beside the profile as NAME.tasks.EXT",
    )
    add_task_rate(parser)
    parser.add_argument(
        "-f", "--format", choices=NAMES, default="svg", help="output format (default svg)"
    )
    parser.add_argument("-o", "--output", metavar="PATH", help="output file ('-' for stdout)")
    add_force(parser)
    parser.add_argument("--title", help="flamegraph title")
    parser.add_argument("--inverted", action="store_true", help="icicle graph (SVG only)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress or summary")
    add_answers(parser)
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="instead of --pid: start COMMAND and sample it until it exits (stopped when the "
        "recording ends first)",
    )
    parser.set_defaults(run=run)


class _Progress:
    """One status line, redrawn in place on a terminal; silent otherwise."""

    def __init__(self, pid: int, duration: float | None, enabled: bool) -> None:
        self.pid = pid
        self.duration = duration
        self.enabled = enabled and sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, elapsed: float, stats: SamplerStats) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.last < 0.2:
            return
        self.last = now
        span = f"{elapsed:5.1f}/{self.duration:g} s" if self.duration else f"{elapsed:5.1f} s"
        line = (
            f"\rsampling PID {self.pid}: {span} · {stats['samples']:,} ticks · "
            f"{stats['errors']:,} errors · lag {stats['lag_mean'] * 1000:.1f} ms"
        )
        sys.stderr.write(line + "\x1b[K")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def cpu_wait_source(source: str) -> str:
    """Where the sampler tells the threads that wait for a CPU, as the reader line says it:
    from each runnable thread's schedstat, or why it cannot (such samples then read busy)."""
    if source == "schedstat":
        return "from each runnable thread's schedstat"
    if not source:
        return "not read yet"
    return f"not told ({source}; such samples read busy)"


def summary(rec: Recording) -> list[str]:
    """What was sampled: ticks (one read of every thread) and samples (one per thread and
    tick), each called so, then the readers, the event loop's shares (beside the kernel's
    count when the sampler missed many ticks) and what went wrong."""
    from sidecar.analyze.stalls import stall_rows, summary_line
    from sidecar.analyze.stats import Sampling
    from sidecar.analyze.threads import analyze, state_line
    from sidecar.sample.sampler import on_cpu_source

    stats = rec.stats
    profile = rec.counts.to_profile()
    lines = [
        f"ticks {stats['samples']:,} in {rec.elapsed:.1f} s at {rec.rate_hz:g} Hz "
        f"({profile.total:,} samples, one per thread and tick) · "
        f"errors {stats['errors']:,} · late {stats['late']:,} · missed {stats['missed']:,} · "
        f"retried {stats['retried']:,} · "
        f"lag mean {stats['lag_mean'] * 1000:.2f} ms, max {stats['lag_max'] * 1000:.2f} ms",
        f"stacks read by {stats['reader']}, on-CPU state {on_cpu_source(stats['on_cpu'])}, "
        f"GIL from {stats['gil'] or 'not read yet'}, "
        f"waits for a CPU {cpu_wait_source(stats['cpu_wait'])}",
    ]
    analysis = analyze(profile, holders=rec.counts.holders())
    if analysis.samples:
        lines.append(f"{analysis.covers}: {state_line(analysis)} of {analysis.samples:,} samples")
        if note := Sampling.of(rec).note(analysis):
            lines.append(note)
    lines += rec.cpu_lines()
    if not analysis.no_loop_thread:  # a process without an event loop has no stall to tell
        stalls = rec.counts.stalls()
        lines.append(summary_line(stalls, rec.stall_ms, rec.counts.stalls_dropped))
        slow = rec.counts.slow_requests if rec.task_rate_hz else None
        lines += stall_rows(stalls, STALL_ROWS, 1 / rec.rate_hz, slow)
    # what became of the target says why ticks read no sample or read idle, else the reads do
    return lines + (rec.fate_lines() or _read_errors(stats, rec.blocking))


def _read_errors(stats: SamplerStats, blocking: bool) -> list[str]:
    """What the ticks that read no sample say, if anything: torn reads, or errors in
    proportion."""
    from sidecar.sample.sampler import errors_note, torn_note

    ticks = stats["samples"] + stats["errors"]
    if torn := torn_note(stats["errors"], ticks, blocking):
        last = stats.get("last_error")
        return [torn, f"last sampling error: {last}"] if last else [torn]
    note = errors_note(stats["errors"], ticks, blocking, stats.get("last_error") or "?")
    return [note] if note else []


def task_summary(rec: Recording) -> list[str]:
    """What the task scans found: tasks in flight, task-samples per state, what they missed."""
    from sidecar.analyze.requests import request_rows
    from sidecar.analyze.requests import summary_line as slow_line

    stats, counts = rec.stats, rec.counts
    states = {leaf: 0 for leaf in ("[running]", "[ready]", "[waiting]")}
    for stack, count in counts.tasks.items():
        leaf = stack.rsplit(";", 1)[-1]
        states[leaf] = states.get(leaf, 0) + count
    total = sum(states.values())
    unread = stats["task_unread"]
    # tasks past a scan's bound are in flight too, though the profile holds no sample of them
    flight = counts.in_flight()
    mean = flight.mean if flight is not None else 0.0
    line = (
        f"tasks: {counts.task_scans:,} scans · {mean:.1f} in flight on average · "
        + " · ".join(f"{leaf[1:-1]} {percent(n, total)}" for leaf, n in states.items())
        + f" of {total:,} task-samples · torn {stats['task_torn']:,} · "
        f"failed scans {stats['task_errors']:,}"
    )
    lines = [line]
    asked = rec.task_rate_hz * rec.elapsed
    if counts.task_scans and counts.task_scans < 0.8 * asked:
        lines.append(
            f"task scans: {counts.task_scans:,} of the {asked:,.0f} asked "
            f"({counts.task_scans / rec.elapsed:.1f} Hz): a scan of this many tasks is long, "
            f"and scans are held to {_native.TASK_SCAN_BUDGET:.0%} of the time"
        )
    if unread:
        lines.append(
            f"tasks past a scan's bound, not read: {unread:,}; the task profile is a sample, "
            f"{percent(total, total + unread)} of the task-samples in flight (a different slice "
            "of the tasks each scan), its counts not scaled"
        )
    if stats["task_last_error"] and stats["task_errors"]:
        lines.append(f"last task scan error: {stats['task_last_error']}")
    slow = counts.slow_requests
    untracked = stats["slow_requests_untracked"]
    lines.append(slow_line(slow, rec.slow_ms, counts.slow_requests_dropped, untracked))
    return lines + request_rows(slow, REQUEST_ROWS, 1 / rec.task_rate_hz, counts.stalls())


def tasks_path(output: str) -> str:
    """Where the task profile goes: beside the profile, ``NAME.tasks.EXT``; a compound
    suffix of the formats (``.pb.gz``) stays whole, so ``p.pb.gz`` gives ``p.tasks.pb.gz``."""
    from sidecar.formats.export import FORMATS

    path = Path(output)
    suffixes = (f.suffix for f in FORMATS.values())
    suffix = next((s for s in suffixes if path.name.endswith(s) and path.name != s), "")
    if not suffix or len(suffix) <= len(path.suffix):
        suffix = path.suffix
    return str(path.with_name(f"{path.name[: len(path.name) - len(suffix)]}.tasks{suffix}"))


def run(args: argparse.Namespace) -> int:
    from sidecar.formats.export import FORMATS
    from sidecar.sample.launch import Launched

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if (args.pid is None) == (not command):
        raise UsageError("give --pid PID, or -- COMMAND to start a program and sample it")
    if args.duration is not None and not 0 < args.duration < math.inf:  # nan is neither
        raise UsageError("--duration must be a positive number of seconds")
    check_blocking(args)
    if problem := defaults.rate_problem(args.rate):
        raise UsageError(problem)
    if args.task_rate is None:
        args.task_rate = min(defaults.TASK_RATE_HZ, args.rate)
    if args.tasks and not 0 < args.task_rate <= args.rate:
        raise UsageError("--task-rate must be positive and at most --rate")
    if args.tasks and args.output == "-":
        raise UsageError("--tasks writes a second file beside the profile: give -o a file")
    name = args.pid if args.pid is not None else Path(command[0]).name
    output = args.output or time.strftime(f"sidecar-{name}-%Y%m%d-%H%M%S") + (
        FORMATS[args.format].suffix
    )
    # the outputs are checked before sampling, which they would otherwise follow in vain
    check_output(output, force=args.force)
    if args.tasks:
        check_output(tasks_path(output), force=args.force)
    if not command:
        return _record(args, output, None)
    launched = Launched(command)
    try:
        code = _record(args, output, launched)
    except BaseException:
        launched.stop()  # never left running; the error says what went wrong
        raise
    # stopped if it runs on, and how it ended said
    stopped = launched.stop()
    if not args.quiet:
        print(stopped or launched.status(), file=sys.stderr)
    if code == 0 and stopped is None:
        # it ended on its own: its status is passed on (a CI job fails when its tests do)
        return launched.exit_status()
    return code


def _record(args: argparse.Namespace, output: str, launched: Launched | None) -> int:
    from sidecar.formats.export import FORMATS, export
    from sidecar.formats.render import RenderOptions
    from sidecar.profile import Profile
    from sidecar.sample.record import record_group
    from sidecar.sample.tasks import snapshot

    if launched is not None:
        args.pid = launched.pid
    elif args.tasks:
        snapshot(args.pid)  # a target whose tasks cannot be read is refused before sampling
    progress = _Progress(args.pid, args.duration, not args.quiet)
    try:
        until = f"for {args.duration:g} s" if args.duration else "until Ctrl-C"

        def attached(version: str) -> None:
            if not args.quiet:
                print(
                    f"sampling PID {args.pid} (Python {version}) at {args.rate:g} Hz {until}",
                    file=sys.stderr,
                )

        def joined(pid: int, error: str | None) -> None:
            if not args.quiet:
                said = f"not sampled: {error}" if error else "sampled too"
                print(f"PID {pid} of the group {said}", file=sys.stderr)

        with terminate_as_interrupt():
            recs = record_group(
                args.pid,
                duration=args.duration,
                rate_hz=args.rate,
                blocking=args.blocking,
                progress=progress,
                on_attach=attached,
                tasks_hz=args.task_rate if args.tasks else 0.0,
                launched=launched,
                stall_ms=args.stall_ms,
                slow_ms=args.slow_ms,
                group=args.subprocesses,
                on_join=joined,
            )
    finally:
        progress.done()
    rec = recs[0]
    roots = [_root(one, args.subprocesses) for one in recs]
    samples = [
        sample
        for one, root in zip(recs, roots, strict=True)
        for sample in one.counts.samples(cpu_only=args.cpu, threads=args.threads, root=root)
    ]
    starts = [one.counts.start for one in recs if one.counts.start is not None]
    ends = [one.counts.end for one in recs if one.counts.end is not None]
    profile = Profile(
        start=min(starts, default=None),
        end=max(ends, default=None),
        target=rec.target,
        rate_hz=rec.rate_hz,
        marked=not args.cpu,
    )
    for sample in samples:
        profile.add(sample.stack, sample.count)
    if not profile.stacks:
        raise NoSamples(f"{rec.no_samples()}; nothing written")
    title = args.title or _title(args.pid, rec, len(recs))
    labelled = samples if FORMATS[args.format].labelled else None  # thread names, states
    options = RenderOptions(title=title, inverted=args.inverted)
    write_bytes(output, export(profile, args.format, options, labelled))
    if not args.quiet:
        if rec.exited:
            print(
                f"PID {args.pid} exited after {rec.elapsed:.1f} s; wrote what was recorded",
                file=sys.stderr,
            )
        for one in recs:
            if args.subprocesses:
                print(_heading(one), file=sys.stderr)
            for line in summary(one):
                print(line, file=sys.stderr)
        if output != "-":
            print(f"wrote {output} ({args.format}, {profile.total:,} samples)", file=sys.stderr)
    if args.tasks:
        _write_tasks(args, recs, roots, output, title)
    # ended early by Ctrl-C (130) or SIGTERM (143), what was sampled written all the same
    return 128 + rec.stopped_by if rec.interrupted else 0


def _root(rec: Recording, subprocesses: bool) -> str | None:
    """A process's root frame in a profile of several (``--subprocesses``), else none."""
    from sidecar.rules.frames import process_frame

    return process_frame(rec.target.pid or 0, rec.target.cmdline) if subprocesses else None


def _title(pid: int, rec: Recording, processes: int) -> str:
    command = rec.target.cmdline
    if processes > 1:
        return f"sidecar: PID {pid} and {processes - 1:,} more of its group {command[:60]}"
    return f"sidecar: PID {pid} {command[:80]}".rstrip()


def _heading(rec: Recording) -> str:
    """The line above a process's summary in a recording of several."""
    from sidecar.discover import prefork_role

    role = prefork_role(rec.target.pid or 0) if not rec.exited else None
    return f"PID {rec.target.pid}" + (f" ({role})" if role else "") + f": {rec.target.cmdline}"


def _write_tasks(
    args: argparse.Namespace,
    recs: list[Recording],
    roots: list[str | None],
    output: str,
    title: str,
) -> None:
    from sidecar.formats.export import export
    from sidecar.formats.render import RenderOptions
    from sidecar.profile import Profile

    tasks = Profile(target=recs[0].target, rate_hz=args.task_rate)
    for one, root in zip(recs, roots, strict=True):
        for stack, count in one.counts.task_profile(root).stacks.items():
            tasks.add(stack, count)
        if not args.quiet:
            if args.subprocesses:
                print(_heading(one), file=sys.stderr)
            for line in task_summary(one):
                print(line, file=sys.stderr)
    if not tasks.stacks:
        raise NoSamples("no task was sampled; no task profile written")
    path = tasks_path(output)
    options = RenderOptions(
        title=f"{title} · asyncio tasks", inverted=args.inverted, count_name="task-samples"
    )
    write_bytes(path, export(tasks, args.format, options))
    if not args.quiet:
        print(f"wrote {path} ({args.format}, {tasks.total:,} task-samples)", file=sys.stderr)
