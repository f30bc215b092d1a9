"""``sidecar serve``'s sampling sessions: a sampler for each selected process while it lives.

Every few seconds the /proc of the sidecar's PID namespace is scanned (``discover.scan``; in a
pod with ``shareProcessNamespace`` that is the whole pod). Python processes are picked (all,
``--pid``, or ``--match`` on the command line), never the sidecar itself. Each gets a native
sampler; its windows are classified and handed to the sinks (``sidecar.serve.sinks``: the
store's writer, the pusher), each of which queues them on its own. A process that cannot be
traced is reported with the reason and retried with back-off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from sidecar import _native, defaults
from sidecar.analyze.requests import RouteSeries
from sidecar.analyze.stalls import StallHistogram
from sidecar.analyze.threads import Analysis, analyze
from sidecar.classify.process import role_marks, settle_role
from sidecar.classify.window import Window, window_of
from sidecar.discover import (
    Selection,
    framework_and_loop,
    group_of,
    prefork_role,
    program,
    read_cmdline,
    read_proc,
    scan,
)
from sidecar.errors import CgroupError, TargetError, TargetGone
from sidecar.sample.cgroup import CgroupCpu, CpuUnknown, ThrottleLog, Throttling, probe_cpu
from sidecar.sample.messages import Gone, ProcessKey, ProcessRecord, WindowBatch
from sidecar.sample.record import Tally
from sidecar.sample.sampler import TORN_SHARE, clock_words, on_cpu_source, open_sampler, torn_note
from sidecar.serve.descriptors import Descriptors, soft_limit

if TYPE_CHECKING:
    from sidecar._native import SamplerStats
    from sidecar._native import Window as NativeWindow
    from sidecar.serve.sinks import Sink

log = logging.getLogger("sidecar.sessions")

COUNTERS = ("samples", "errors", "retried", "late", "missed", "dropped_windows", "dropped_samples")
#: Ticks of a session its share without a sample is judged over, for the log (10 s at 100 Hz).
TORN_TICKS = 1000
Describe = Callable[[int], tuple[str, str]]


def describe(pid: int) -> tuple[str, str]:
    """(framework, loop) from the process's mapped extension modules, unknown if unreadable."""
    try:
        return framework_and_loop(pid)
    except TargetError:
        return "unknown", "asyncio"


@dataclass
class Session:
    """One process being sampled."""

    key: ProcessKey
    cmdline: str
    sampler: _native.Sampler
    framework: str
    loop: str
    started: float
    #: Where the program's code was mapped when sampling began (see ``program``).
    code: int = 0
    #: Where its sampler ticks (the sampler's ``clock`` stat), as last logged.
    clock: str = "shared"
    #: What reads its stacks (the sampler's ``reader`` stat).
    reader: str = ""
    #: Where its on-CPU states come from (the sampler's ``on_cpu`` stat), as last seen.
    on_cpu: str = ""
    #: Where its GIL states come from (the sampler's ``gil`` stat), as last seen.
    gil: str = ""
    #: Its sampler's errors and task scan errors when last looked at (``Sessions._errors``).
    errors: tuple[int, int] = (0, 0)
    #: Its recent windows analyzed, for the live shares in /metrics.
    recent: deque[Analysis] = field(default_factory=lambda: deque(maxlen=6))
    #: ``master`` / ``worker`` in a pre-fork server, None alone (checked at every scan).
    role: str | None = None
    #: The role /proc suggests (``discover.prefork_role``), as read at the last scan.
    candidate: str | None = None
    #: What its stacks said of its role so far (``classify.process.role_marks``).
    marks: frozenset[str] = frozenset()
    #: Tasks in flight per (state, request or background) in the last window with task scans.
    tasks: dict[tuple[str, str], float] = field(default_factory=dict)
    #: Tasks in flight past the scans' bound, not read, in that window (of no state nor kind).
    tasks_unread: float = 0.0
    #: Its sampler's samples and errors when their share was last judged, and what was said
    #: then of too many of its ticks without a sample (``sample.torn_note``), None while its
    #: reads stand.
    judged: tuple[int, int] = (0, 0)
    torn: str | None = None
    #: The lengths of its event loops' stalls so far, for /metrics.
    stalls: StallHistogram = field(default_factory=StallHistogram)
    #: Its requests in flight and slow requests per route, for /metrics.
    routes: RouteSeries = field(default_factory=RouteSeries)
    #: Its cgroup's CPU limit and throttling as /metrics shows them (read once a window; the
    #: counters carried on across a move to another cgroup), None while unread or unreadable.
    cpu: CgroupCpu | None = None
    #: The last reading of its cgroup, that the next one counts on from, and the throttling
    #: counters shown for it (both kept while the cgroup cannot be read).
    cpu_read: CgroupCpu | None = None
    counted: Throttling | None = None
    #: Why its cgroup could not be read, the first time (said in the log then, and only then).
    cpu_unknown: str | None = None
    #: Its cgroup's readings of the last ten minutes or so, for the throttling around stalls.
    throttle: ThrottleLog = field(default_factory=lambda: ThrottleLog(bound=600))

    def add(self, window: Window) -> Window:
        """Its live figures for /metrics, from one more window: the loop's samples, the tasks
        in flight, the stalls' lengths, its cgroup's CPU limit and throttling; and the window
        with the throttling around each of its stalls."""
        if window.task_scans:
            self.tasks = window.tasks_by_kind()
            self.tasks_unread = window.task_unread / window.task_scans
        tally = Tally()
        tally.add(window)
        self.recent.append(analyze(tally.to_profile()))
        self.stalls.add([stall.duration_s for stall in window.stalls], window.stalls_dropped)
        self.routes.add(window)
        self.read_cpu()
        if not window.stalls:
            return window
        return replace(window, stalls=self.throttle.mark(window.stalls))

    def read_cpu(self) -> None:
        """Reads its cgroup's CPU limit and throttling again (``sample.cgroup``). One that
        cannot be read shows none and is said once in the log; a process gone keeps the last."""
        pid = self.key[0]
        try:
            reading = probe_cpu(pid)
        except TargetGone:
            return
        if isinstance(reading, CpuUnknown):
            if self.cpu_unknown is None:
                self.cpu_unknown = reading.reason
                log.warning(
                    "PID %d: no cpu limit nor throttling in /metrics: %s", pid, reading.reason
                )
            self.cpu = None
            return
        self.throttle.note(reading)
        shown = reading.throttling
        if self.counted is not None and self.cpu_read is not None:
            shown = carried(self.counted, self.cpu_read, reading)
            if reading.directory != self.cpu_read.directory:
                log.info(
                    "PID %d: its cpu limit and throttling now from cgroup %s", pid, reading.path
                )
        self.cpu_read, self.counted = reading, shown
        self.cpu = replace(reading, throttling=shown)

    def unsettled(self) -> bool:
        """Whether its stacks may still tell its role (``classify.process.settle_role``): a master's
        until they show it waiting on its workers, a worker's until they show a process pool's
        child; a lone process's never (its stacks are not read for marks)."""
        if self.candidate == "master":
            return "master" not in self.marks
        if self.candidate == "worker":
            return "pool" not in self.marks
        return False

    def record(self, seen: float) -> ProcessRecord:
        """The process as the store keeps it."""
        pid, started = self.key
        return ProcessRecord(
            pid,
            started,
            self.cmdline,
            seen,
            self.framework,
            self.loop,
            python_version=self.sampler.python_version,
            role=self.role,
            group=group_of(self.cmdline),
        )


def carried(shown: Throttling, before: CgroupCpu, after: CgroupCpu) -> Throttling:
    """The throttling counters ``shown`` for the reading ``before``, carried on to ``after``:
    plus what the cgroup counted in between; unchanged when ``after`` is of another cgroup (the
    process moved, or another one now sets its limit) or of one made anew, so what /metrics
    counts never goes back."""
    try:
        span = after.since(before)
    except CgroupError:
        return shown  # counted on from ``after``
    return Throttling(
        shown.periods + span.periods,
        shown.throttled_periods + span.throttled_periods,
        shown.throttled_seconds + span.seconds_lost,
    )


@dataclass
class Problem:
    """A process that could not be traced, and when it is tried again."""

    key: ProcessKey
    cmdline: str
    error: str
    attempts: int
    retry_at: float


class Sessions:
    """Keeps one sampling session per wanted process, and the problems of the others."""

    def __init__(
        self,
        sink: Sink,
        selection: Selection,
        *,
        rate_hz: float,
        window: int,
        blocking: bool = False,
        describe: Describe = describe,
        tasks_hz: float = 0.0,
        task_bound: int | None = None,
        stall_ms: float = defaults.STALL_MS,
        slow_ms: float = defaults.SLOW_MS,
        descriptors: Descriptors | None = None,
    ) -> None:
        #: Where every message goes: one sink, or a ``Fanout`` over several.
        self.sink = sink
        self.selection = selection
        self.rate_hz = rate_hz
        self.window = window
        self.blocking = blocking
        #: Task scans per second of each target (0: none).
        self.tasks_hz = tasks_hz
        #: The most tasks a scan reads (None: the scanner's 20,000).
        self.task_bound = task_bound
        #: The shortest stall of an event loop kept.
        self.stall_ms = stall_ms
        #: The shortest slow request kept.
        self.slow_ms = slow_ms
        self.describe = describe
        #: Told when sampling fails for want of file descriptors.
        self.descriptors = descriptors or Descriptors(soft_limit())
        self.sessions: dict[ProcessKey, Session] = {}
        self.problems: dict[ProcessKey, Problem] = {}
        self.lock = threading.Lock()
        #: Counters of samplers that ended, summed (a long run sees many restarts).
        self.finished: dict[str, int] = dict.fromkeys(COUNTERS, 0)

    # -- discovery -------------------------------------------------------------------------

    def scan(self) -> None:
        """Forgets dead processes, then attaches to new ones and retries problems that are due.

        The dead go first: a program restarted since the last scan finds its old process
        recorded gone, so the store gives the new one the same target.
        """
        now = time.time()
        found: list[ProcessKey] = []
        for pid in scan(self.selection):
            started = _native.process_start_time(pid)
            if started is not None:
                found.append((pid, started))
        seen = set(found)
        for key, gone in [(k, s) for k, s in self.sessions.items() if k not in seen]:
            if self._lost(key):
                self._close(key, gone)  # gone, or exec'd a program that is not wanted
        for key in [k for k in self.problems if k not in seen and self._lost(k)]:
            with self.lock:
                del self.problems[key]  # the process is gone; nothing more to report
            self.sink.submit(Gone(key, now))
        for key in found:
            session = self.sessions.get(key)
            if session is not None:
                if not self._execed(session):
                    self._check_role(session, now)
                    continue
                # the process runs another program now: what the old one had stays with it
                log.info("PID %d exec'd another program: %s", key[0], read_cmdline(key[0])[:120])
                self._close(key, session)
            problem = self.problems.get(key)
            if problem is not None and problem.retry_at > now:
                continue
            self._attach(key, now, problem)

    def _lost(self, key: ProcessKey) -> bool:
        """A process the scan did not find is gone, or runs a program not wanted now; not
        when /proc could not be read for want of file descriptors (the scan reads an
        unreadable process as none: its session would end and start again, its samples lost
        in between)."""
        pid, started = key
        try:
            stat = read_proc(pid, "stat")
            cmdline = read_proc(pid, "cmdline").rstrip("\0").replace("\0", " ")
        except TargetGone:
            return True
        except TargetError as err:
            return not self.descriptors.note(f"the scan of PID {pid}", err)
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) <= 19 or fields[19] != str(started):
            return True  # another process under the same PID
        return not (cmdline and self.selection.wants(pid, cmdline))

    @staticmethod
    def _execed(session: Session) -> bool:
        cmdline, code = program(session.key[0])
        if not cmdline:
            return False  # exiting: the sampler tells
        moved = bool(code and session.code and code != session.code)
        return moved or cmdline != session.cmdline

    def _check_role(self, session: Session, now: float) -> None:
        """A master forks its workers after it starts, and may be left alone: the role is
        read again at every scan and whenever its stacks tell more, and the store told when it
        changed."""
        session.candidate = prefork_role(session.key[0])
        role = settle_role(session.candidate, session.marks)
        if role != session.role:
            log.info("PID %d is now %s", session.key[0], role or "a lone process")
            session.role = role
            self.sink.submit(session.record(now))

    def _attach(self, key: ProcessKey, now: float, problem: Problem | None) -> None:
        pid, started = key
        cmdline, code = program(pid)
        framework, loop = self.describe(pid)
        candidate = prefork_role(pid)
        role = settle_role(candidate, ())  # a master once its stacks show it
        try:
            # one sampling thread for every target: one wakeup per tick for all of them
            sampler = open_sampler(
                pid,
                rate_hz=self.rate_hz,
                blocking=self.blocking,
                window=float(self.window),
                clock="shared",
                tasks_hz=self.tasks_hz,
                task_bound=self.task_bound,
                stall_ms=self.stall_ms,
                slow_ms=self.slow_ms,
            )
        except TargetError as err:
            self.descriptors.note(f"attaching to PID {pid}", err)
            attempts = problem.attempts + 1 if problem else 1
            delay = min(300.0, 5.0 * 2 ** (attempts - 1))
            with self.lock:
                self.problems[key] = Problem(key, cmdline, str(err), attempts, now + delay)
            if problem is None or problem.error != str(err):
                log.warning("cannot sample PID %d: %s (retrying in %.0f s)", pid, err, delay)
            self.sink.submit(
                ProcessRecord(
                    pid,
                    started,
                    cmdline,
                    now,
                    framework,
                    loop,
                    error=str(err),
                    role=role,
                    group=group_of(cmdline),
                )
            )
            return
        reader = sampler.stats()["reader"]
        session = Session(key, cmdline, sampler, framework, loop, now, code, reader=reader)
        session.role, session.candidate = role, candidate
        with self.lock:
            self.problems.pop(key, None)
            self.sessions[key] = session
        log.info(
            "sampling PID %d (%s, %s%s; stacks read by %s): %s",
            pid,
            framework,
            loop,
            f", {role}" if role else "",
            reader,
            cmdline[:120],
        )
        self.sink.submit(session.record(now))

    # -- windows ---------------------------------------------------------------------------

    def drain(self, flush: bool = False) -> None:
        """Hands completed windows to the sinks; ends sessions whose process exited."""
        for key, session in list(self.sessions.items()):
            ended = not session.sampler.running
            if ended or flush:
                self._close(key, session)
                continue
            for native in session.sampler.drain():
                batch = self._batch(session, native)
                if session.unsettled():
                    marks = session.marks
                    rows = batch.window.rows
                    session.marks = marks.union(*(role_marks(row[0]) for row in rows))
                    if session.marks != marks:  # the store has the role before these samples
                        self._check_role(session, time.time())
                self.sink.submit(batch)
            clock = session.sampler.clock
            if clock != session.clock:
                session.clock = clock
                log.warning("PID %d: its sampler now ticks on %s", key[0], clock_words(clock))
            gil = session.sampler.gil
            if gil and gil != session.gil:
                # said once known, and again whenever it changes (waits found unreadable)
                session.gil = gil
                log.info("PID %d: GIL states from %s", key[0], gil)
            on_cpu = session.sampler.on_cpu
            if on_cpu and on_cpu != session.on_cpu:
                # said when estimated, and when back from an estimate
                if on_cpu != "os" or session.on_cpu:
                    level = logging.INFO if on_cpu == "os" else logging.WARNING
                    log.log(level, "PID %d: on-CPU state %s", key[0], on_cpu_source(on_cpu))
                session.on_cpu = on_cpu
            self._judge_reads(session)
            self._errors(session)

    def _errors(self, session: Session) -> None:
        """Tells ``descriptors`` when the sampler's newest errors were for want of them."""
        stats = session.sampler.stats()
        errors = (int(stats["errors"]), int(stats["task_errors"]))
        if errors == session.errors:
            return
        where = f"the sampler of PID {session.key[0]}"
        if errors[0] > session.errors[0]:
            self.descriptors.note(where, stats["last_error"])
        if errors[1] > session.errors[1]:
            self.descriptors.note(where + " (task scans)", stats["task_last_error"])
        session.errors = errors

    def _judge_reads(self, session: Session) -> None:
        """Says in the log when a session's ticks, TORN_TICKS at a time, read no sample too
        often (every read of them torn), and when its reads stand again (under half that)."""
        stats = session.sampler.stats()
        samples, errors = int(stats["samples"]), int(stats["errors"])
        ticks = samples + errors - sum(session.judged)
        if ticks < TORN_TICKS:
            return
        failed = errors - session.judged[1]
        session.judged = (samples, errors)
        note = torn_note(failed, ticks, self.blocking)
        if note and not session.torn:
            log.warning("PID %d: %s", session.key[0], note)
        if note:
            session.torn = note
        elif session.torn and failed < TORN_SHARE / 2 * ticks:
            session.torn = None
            log.info(
                "PID %d: its reads stand again (%d of its last %d ticks without a sample)",
                session.key[0],
                failed,
                ticks,
            )

    def _close(self, key: ProcessKey, session: Session) -> None:
        """Stops one session, hands over every window it has and records the process gone."""
        self._errors(session)  # a sampler that ended for want of descriptors says so
        session.sampler.stop()
        for window in session.sampler.drain(flush=True):
            self.sink.submit(self._batch(session, window))
        self._finish(key, session)

    def _batch(self, session: Session, native: NativeWindow) -> WindowBatch:
        """A sampler's window classified once, taken into the session's live figures, and as
        its sinks take it."""
        window = session.add(window_of(native))
        return WindowBatch(session.key, self.window, window)

    def _finish(self, key: ProcessKey, session: Session) -> None:
        stats = session.sampler.stats()
        with self.lock:
            self.sessions.pop(key, None)
            for name in COUNTERS:
                self.finished[name] += int(stats[name])  # type: ignore[literal-required]
        if stats["state"] == "exited":
            log.info("PID %d exited", key[0])
        self.sink.submit(Gone(key, time.time()))

    def stop(self) -> None:
        """Stops every sampler and hands over the windows in progress."""
        self.drain(flush=True)

    def live_stats(self) -> list[tuple[Session, SamplerStats]]:
        """Each live session with its sampler's counters."""
        with self.lock:
            live = list(self.sessions.values())
        return [(session, session.sampler.stats()) for session in live]

    def totals(self) -> dict[str, int]:
        """Counters summed over every sampler this service has run."""
        with self.lock:
            out = dict(self.finished)
        for _, stats in self.live_stats():
            for name in COUNTERS:
                out[name] += int(stats[name])  # type: ignore[literal-required]
        return out
