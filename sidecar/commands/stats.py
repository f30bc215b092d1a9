"""``sidecar stats``: busy / idle / blocked / gil shares, who held the GIL, the collector's
share, stack depth, hot and blocking spots.

Live (``--pid PID [--duration S]``) or from a profile file (folded text or a flamegraph SVG
written by sidecar). ``--json`` prints the stats document (``analyze.stats``), as
``GET /api/stats`` serves it.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sidecar import defaults
from sidecar.commands.habits import add_answers
from sidecar.commands.options import add_slow_ms, add_stall_ms, add_task_bound, add_task_rate
from sidecar.commands.signals import terminate_as_interrupt
from sidecar.errors import NoSamples, UsageError

if TYPE_CHECKING:
    from sidecar.analyze.stats import Sampling
    from sidecar.analyze.threads import Analysis, Ranked
    from sidecar.classify.process import ProcessInfo
    from sidecar.classify.requests import SlowRequest
    from sidecar.classify.stalls import Stall
    from sidecar.profile import Profile

#: How a role in a pre-fork server reads in the header line.
ROLE_NAMES = {
    "master": "pre-fork master: serves no requests, in no framework's shares",
    "worker": "pre-fork worker",
}
HELP = (
    "event-loop shares (busy / idle / blocked / gil), who held the GIL, stack depth, top "
    "functions and blocking calls"
)
DEFAULT_DURATION = 10.0


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "stats",
        help=HELP,
        description=HELP + ", of a live process (--pid) or of a profile file (folded stacks "
        "or a flamegraph SVG, speedscope or pprof file: any format sidecar writes). Profiles "
        "without [idle]/[blocked]/[gil] frames (plain py-spy) tell idle only where the loop "
        "waits in its selector: their other states are not told. Who held the GIL is known "
        "live (--pid) only: a profile file keeps the [gil] samples, not their holders; so are "
        "the stalls of the event loop (a callback that held it --stall-ms or more), which need "
        "the samples in time order.",
    )
    parser.add_argument(
        "profile",
        nargs="?",
        metavar="PROFILE_FILE",
        help="folded, SVG, speedscope or pprof file ('-' for stdin)",
    )
    parser.add_argument("-p", "--pid", type=int, help="sample this process live")
    parser.add_argument(
        "-d",
        "--duration",
        type=float,
        metavar="S",
        help=f"seconds to sample with --pid (default {DEFAULT_DURATION:g}; Ctrl-C stops early)",
    )
    parser.add_argument(
        "--tasks",
        action="store_true",
        help="with --pid, also scan the asyncio tasks (CPython 3.11+): tasks in flight, their "
        "states, where requests wait",
    )
    add_task_rate(parser, defaults.TASK_RATE_HZ)
    add_stall_ms(parser)
    add_slow_ms(parser)
    add_task_bound(parser)
    parser.add_argument("--json", action="store_true", help="print the stats as JSON")
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="rows of the tables (default 10)"
    )
    add_answers(parser)
    parser.set_defaults(run=run)


@dataclass
class Live:
    """What sampling a live process knows that a profile file does not: the stalls of its
    event loops (``dropped``: those past a window's bound), at ``rate_hz``."""

    stalls: list[Stall]
    dropped: int
    stall_ms: float
    rate_hz: float
    #: the kernel's accounting of its threads' CPU time over the span (``schedstat.cpu_line``)
    #: and its cgroup's CPU limit and throttling (``cgroup.cpu_line``), where read
    cpu: list[str] = field(default_factory=list)
    #: the same figures for ``--json`` (``Recording.kernel_json``)
    kernel: dict[str, Any] | None = None
    #: how the sampler kept its clock, and the kernel's shares beside the sampled ones
    sampling: Sampling | None = None
    #: with task scans: the slow requests, the shortest reported (ms), those the sampler
    #: left out and those it did not follow
    slow: list[SlowRequest] = field(default_factory=list)
    slow_ms: float = defaults.SLOW_MS
    slow_dropped: int = 0
    slow_untracked: int = 0


def _live(
    pid: int,
    duration: float,
    tasks_hz: float,
    stall_ms: float,
    task_bound: int | None = None,
    slow_ms: float = defaults.SLOW_MS,
) -> tuple[Profile, ProcessInfo, dict[str, Any] | None, dict[tuple[str, str], int], Live]:
    # what the first sample needs, and no more: the recording's own modules are imported once
    # the sampler samples, the analysis once the samples are in
    from sidecar.discover import describe
    from sidecar.sample.sampler import open_sampler

    info = describe(pid)
    if tasks_hz:
        from sidecar.sample.tasks import snapshot

        snapshot(pid)  # a target whose tasks cannot be read is refused before sampling
    print(f"sampling PID {pid} for {duration:g} s", file=sys.stderr)
    with terminate_as_interrupt():
        sampler = open_sampler(
            pid, tasks_hz=tasks_hz, stall_ms=stall_ms, task_bound=task_bound, slow_ms=slow_ms
        )
        try:
            from sidecar.sample.record import record
        except BaseException:
            sampler.stop()
            raise
        rec = record(
            pid,
            duration=duration,
            tasks_hz=tasks_hz,
            stall_ms=stall_ms,
            task_bound=task_bound,
            slow_ms=slow_ms,
            sampler=sampler,
        )
    from sidecar.analyze.requests import requests_block
    from sidecar.analyze.stats import Sampling
    from sidecar.analyze.tasks import task_block
    from sidecar.classify.process import refine

    profile = rec.counts.to_profile()
    profile.target = rec.target
    profile.rate_hz = rec.rate_hz
    if not profile.stacks:
        raise NoSamples(rec.no_samples())
    for line in rec.fate_lines():  # what became of the target: why its samples read idle
        print(f"sidecar: note: {line}", file=sys.stderr)
    if rec.exited:
        print(
            f"PID {pid} exited after {rec.elapsed:.1f} s; stats of what was sampled",
            file=sys.stderr,
        )
    if rec.stats["on_cpu"] not in ("os", ""):
        print(
            f"sidecar: note: on-CPU state {rec.stats['on_cpu']}: a thread off CPU outside a "
            "known wait counts as busy",
            file=sys.stderr,
        )
    if rec.target.python_version:
        info = replace(info, python_version=rec.target.python_version)
    tasks = None
    if tasks_hz:
        flight = rec.counts.in_flight()
        if flight is None:
            raise NoSamples(f"no task scan of PID {pid} succeeded: {rec.stats['task_last_error']}")
        tasks = task_block(rec.counts.tasks, flight)
        tasks["slow_requests"] = requests_block(
            rec.counts.slow_requests,
            slow_ms,
            rec.counts.slow_requests_dropped,
            rec.stats["slow_requests_untracked"],
        )
    live = Live(
        rec.counts.stalls(),
        rec.counts.stalls_dropped,
        stall_ms,
        rec.rate_hz,
        rec.cpu_lines(),
        rec.kernel_json(),
        Sampling.of(rec),
        rec.counts.slow_requests,
        slow_ms,
        rec.counts.slow_requests_dropped,
        rec.stats["slow_requests_untracked"],
    )
    return profile, refine(info, profile.stacks), tasks, rec.counts.holders(), live


def run(args: argparse.Namespace) -> int:
    if (args.pid is None) == (args.profile is None):
        raise UsageError("give either --pid PID or a PROFILE_FILE")
    if args.duration is not None and (args.pid is None or not 0 < args.duration < math.inf):
        raise UsageError("--duration needs --pid and must be a positive number of seconds")
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    if args.tasks and (args.pid is None or not 0 < args.task_rate <= defaults.RATE_HZ):
        raise UsageError(
            f"--tasks needs --pid, and --task-rate must be positive and at most "
            f"{defaults.RATE_HZ:g}"
        )
    info: ProcessInfo | None = None
    tasks: dict[str, Any] | None = None
    holders: dict[tuple[str, str], int] = {}
    live: Live | None = None
    if args.pid is not None:
        rate = args.task_rate if args.tasks else 0.0
        duration = args.duration or DEFAULT_DURATION
        profile, info, tasks, holders, live = _live(
            args.pid, duration, rate, args.stall_ms, args.task_bound, args.slow_ms
        )
        from sidecar.analyze.threads import analyze

        analysis = analyze(profile, info, holders)
    else:
        from sidecar.analyze.threads import analyze, analyze_counts
        from sidecar.formats.inputs import folded_file, load_profile
        from sidecar.profile import Profile
        from sidecar.rules.frames import state_of

        if counts := folded_file(args.profile):
            # folded text is analyzed as it is read, never kept whole: what it says first
            marked = any(state_of(stack) != "busy" for stack, _ in counts())
            profile = Profile(marked=marked)
            analysis = analyze_counts(counts(), marked)
        else:
            profile = load_profile(args.profile)
            for said in profile.notes:
                print(f"sidecar: note: {args.profile}: {said}", file=sys.stderr)
            analysis = analyze(profile)
    from sidecar.analyze.requests import request_rows
    from sidecar.analyze.requests import summary_line as slow_line
    from sidecar.analyze.stalls import stall_rows, summary_line
    from sidecar.analyze.stats import TargetStats, stats_document
    from sidecar.analyze.tasks import task_lines

    if analysis.estimated:
        told = (
            "it tells idle only where the loop waits in its selector"
            if analysis.told
            else "it tells no state (uvloop's poll has no Python frame)"
        )
        print(
            "sidecar: note: the profile has no [idle]/[blocked]/[gil] frames (plain py-spy?): "
            f"{told}; the other states are not told by this file",
            file=sys.stderr,
        )
    if args.json:
        # stalls are known live only: a profile file keeps no time order
        known = None if live is None else [stall.to_json() for stall in live.stalls]
        kernel = None if live is None else live.kernel
        sampling = None if live is None else live.sampling
        part = TargetStats(analysis, tasks, known, kernel, sampling)
        import json  # for --json only

        print(json.dumps(stats_document([part]), indent=2))
    else:
        stalls: list[str] = []
        if live is not None and live.sampling and (note := live.sampling.note(analysis)):
            stalls.append(note)  # the shares beside the kernel's, when many ticks were missed
        if live is not None:
            stalls += live.cpu
        if live is not None and not analysis.no_loop_thread:
            stalls.append(summary_line(live.stalls, live.stall_ms, live.dropped))
        lines = table(analysis, profile, info, args.top, stalls)
        if live is not None and not analysis.no_loop_thread:
            delayed = live.slow if tasks is not None else None
            lines += stall_rows(live.stalls, args.top, 1 / live.rate_hz, delayed)
        if tasks is not None:
            lines += task_lines(tasks)
        if tasks is not None and live is not None:
            slow = slow_line(live.slow, live.slow_ms, live.slow_dropped, live.slow_untracked)
            lines += ["", slow]
            lines += request_rows(live.slow, args.top, 1 / args.task_rate, live.stalls)
        print("\n".join(lines))
    return 0


def _pct(share: float) -> str:
    return f"{100 * share:5.1f}%"


def _ranked_rows(title: str, rows: list[Ranked], what: str) -> list[str]:
    if not rows:
        return []
    width = max(len(r.name) for r in rows)
    out = ["", f"{title:<{width}}  {what}"]
    out += [f"{r.name:<{width}}  {_pct(r.share)}  ({r.samples:,})" for r in rows]
    return out


def table(
    analysis: Analysis,
    profile: Profile,
    info: ProcessInfo | None,
    top: int,
    after_shares: list[str] | None = None,
) -> list[str]:
    """The readable form: one block per aspect, shares as percentages; ``after_shares`` (the
    stalls' line) follows the shares."""
    from sidecar.analyze.threads import Ranked, state_line
    from sidecar.rules.layers import LAYERS

    who = f"PID {analysis.pid}" if analysis.pid is not None else "profile"
    lines = [f"{who}: {analysis.framework} on {analysis.loop}"]
    if analysis.role is not None:
        lines[0] = f"{who} ({ROLE_NAMES[analysis.role]}): {analysis.framework} on {analysis.loop}"
    if info is not None:
        python = f"Python {profile.target.python_version or info.python_version}"
        lines[0] += f" · {python} · {info.cmdline[:100]}"
    estimate = " (no [idle]/[blocked]/[gil] frames)" if analysis.estimated else ""
    shares = f"{state_line(analysis)} of {analysis.samples:,} samples{estimate}"
    lines.append(f"{analysis.covers}: {shares}")
    lines += after_shares or []
    depth = analysis.depth
    if depth.mean is None:
        lines.append("stack depth: no busy samples")
    else:
        which = "samples outside the poll" if analysis.estimated else "busy samples"
        lines.append(
            f"stack depth (Python frames, {which}): mean {depth.mean:.1f} · "
            f"p50 {depth.p50} · p95 {depth.p95} · max {depth.max}"
        )
        high = analysis.loop_depth
        if high.mean is not None:
            lines.append(
                f"  above the loop entry: mean {high.mean:.1f} · p50 {high.p50} · "
                f"p95 {high.p95} · max {high.max}"
            )
        lines.append(
            "busy time in: "
            + " · ".join(
                f"{layer.replace('_', ' ')} {_pct(analysis.layer_share(layer)).strip()}"
                for layer in LAYERS
            )
        )
    lines += _ranked_rows("top functions, self time", analysis.top_self(top), "of busy")
    lines += _ranked_rows("top functions, total time", analysis.top_total(top), "of busy")
    lines += _ranked_rows("top blocking call sites", analysis.blocking_sites(top), "of blocked")
    holders = [
        Ranked(f"{thread!r} at {site}" if site else repr(thread), samples, share)
        for thread, site, samples, share in analysis.top_holders(top)
    ]
    lines += _ranked_rows("GIL held while the loop waited, by", holders, "of gil")
    return lines
