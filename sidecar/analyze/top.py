"""What ``sidecar top`` shows, worked out from a sampler's windows: the last N seconds of them
rolled forward, with the same rules as ``stats`` (no rule is defined here).

Each window of each process is decoded once (``classify.window``) and analyzed once
(``analyze.threads.analyze``: the loop's shares, who held the GIL, busy samples per function);
a view over the last N seconds merges those analyses (``merge``), so that what a window said
is never worked out twice. On top of them:

- a history: the loop's shares per second, oldest first;
- the functions table, py-spy's ``top`` columns: own % and total % of the loop's busy samples
  over the span, own time and total time since ``top`` started (seconds of samples), sorted by
  any of the four;
- the asyncio tasks in flight by state over the span (where the sampler scans tasks);
- the stalls of the loop that ended in the span, newest first;
- the slow requests the task scans saw end in the span, newest first.

With several processes (a pre-fork group), the view of all of them counts those that serve
requests, as ``stats`` does per framework (a pre-fork master serves none), or one process.
No I/O happens here.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sidecar import defaults
from sidecar.analyze.threads import Analysis, analyze, merge
from sidecar.classify.process import ProcessInfo, refine
from sidecar.classify.requests import SlowRequest
from sidecar.classify.stalls import Stall
from sidecar.classify.tasks import InFlight
from sidecar.classify.window import Window
from sidecar.rules.frames import STATES
from sidecar.rules.tasks import STATES as TASK_STATES
from sidecar.sample.record import Tally

#: The spans a key cycles through, in seconds, and the one shown first.
SPANS = (5, 10, 30, 60)
DEFAULT_SPAN = defaults.TOP_SPAN_S
#: The sort columns, in the order of py-spy's keys 1 to 4.
SORTS = ("own", "total", "own_time", "total_time")


@dataclass(frozen=True)
class Slice:
    """One window of one process, and its analysis."""

    pid: int
    window: Window
    analysis: Analysis

    @property
    def start(self) -> float:
        return self.window.start

    @property
    def end(self) -> float:
        return self.window.end

    @classmethod
    def of(cls, window: Window, pid: int, info: ProcessInfo | None = None) -> Slice:
        """``window`` of ``pid`` analyzed (``info``: what discovery knows of it; its role, as
        /proc suggests it, settled by the window's frames as ``stats`` settles it)."""
        counts = Tally()
        counts.add(window)
        profile = counts.to_profile()
        if info is not None:
            info = refine(info, profile.stacks)
        return cls(pid, window, analyze(profile, info, counts.holders()))


@dataclass
class ProcessFeed:
    """One process's windows into a ``Rolling`` view (a ``Consumer``)."""

    rolling: Rolling
    pid: int
    info: ProcessInfo | None = None

    def add(self, window: Window) -> None:
        self.rolling.add(Slice.of(window, self.pid, self.info))


@dataclass(frozen=True)
class FunctionRow:
    """One row of the functions table: ``function (file)``, its shares of the loop's busy
    samples over the span (innermost frame: own; anywhere above the loop's entry: total) and
    the seconds of samples since ``top`` started."""

    name: str
    own: float
    total: float
    own_s: float
    total_s: float

    def key(self, sort: str) -> float:
        return {"own": self.own, "total": self.total, "own_time": self.own_s}.get(
            sort, self.total_s
        )


def sort_rows(rows: Iterable[FunctionRow], sort: str, ascending: bool = False) -> list[FunctionRow]:
    """Rows by one of ``SORTS``, most first unless ``ascending``; ties by name."""
    if sort not in SORTS:
        raise ValueError(f"no sort column {sort!r}: one of {', '.join(SORTS)}")
    sign = 1 if ascending else -1
    return sorted(rows, key=lambda row: (sign * row.key(sort), row.name))


@dataclass(frozen=True)
class View:
    """What the screen shows of the last ``span_s`` seconds (``covered_s`` of them sampled)."""

    span_s: float
    covered_s: float
    #: the windows' analyses merged: shares, GIL holders, functions over the span
    analysis: Analysis
    #: each state's share of the loop's samples per second, oldest first
    history: dict[str, list[float]]
    #: tasks in flight over the span, None where no scan was made
    tasks: InFlight | None
    #: stalls that ended in the span, newest first
    stalls: list[Stall]
    functions: list[FunctionRow]
    #: processes counted
    pids: list[int]
    #: slow requests that ended in the span, newest first
    slow_requests: list[SlowRequest] = field(default_factory=list)


@dataclass
class Rolling:
    """The windows of the last ``keep_s`` seconds of one or more processes, and each
    function's busy samples since the start, sampled at ``rate_hz``."""

    rate_hz: float
    keep_s: float = float(max(SPANS))
    slices: deque[Slice] = field(default_factory=deque)
    #: per process: busy loop samples per function since the start, own and total
    own: dict[int, Counter[str]] = field(default_factory=dict)
    total: dict[int, Counter[str]] = field(default_factory=dict)

    def add(self, piece: Slice) -> None:
        self.slices.append(piece)
        self.own.setdefault(piece.pid, Counter()).update(piece.analysis.self_samples)
        self.total.setdefault(piece.pid, Counter()).update(piece.analysis.total_samples)
        newest = max(s.end for s in self.slices)
        while self.slices and self.slices[0].end < newest - self.keep_s:
            self.slices.popleft()

    def feed(self, pid: int, info: ProcessInfo | None = None) -> ProcessFeed:
        """Where the windows of ``pid`` go."""
        return ProcessFeed(self, pid, info)

    def _counted(self, pid: int | None) -> list[Slice]:
        """The slices of ``pid``, or of every process that serves requests (of all of them
        when none does)."""
        if pid is not None:
            return [s for s in self.slices if s.pid == pid]
        serving = [s for s in self.slices if s.analysis.serves]
        return serving or list(self.slices)

    def view(self, span_s: float, pid: int | None = None, history: int = 30) -> View:
        """The last ``span_s`` seconds of ``pid`` (None: all, see ``_counted``), with
        ``history`` seconds of shares."""
        counted = self._counted(pid)
        newest = max((s.end for s in counted), default=0.0)
        recent = [s for s in counted if s.end > newest - span_s]
        merged = merge(s.analysis for s in recent)
        pids = sorted({s.pid for s in recent})
        if len(pids) == 1:
            merged.pid, merged.role = pids[0], recent[0].analysis.role
        merged.framework = _most((s.analysis.framework for s in recent), "unknown")
        covered = newest - min((s.start for s in recent), default=newest)
        return View(
            span_s=span_s,
            covered_s=max(0.0, covered),
            analysis=merged,
            history=shares_per_second([s for s in counted if s.end > newest - history]),
            tasks=tasks_in_flight(recent),
            stalls=sorted((x for s in recent for x in s.window.stalls), key=lambda x: -x.end),
            functions=self._functions(merged, pids),
            pids=pids,
            slow_requests=sorted(
                (r for s in recent for r in s.window.slow_requests),
                key=lambda r: -(r.start + r.duration_s),
            ),
        )

    def _functions(self, merged: Analysis, pids: Sequence[int]) -> list[FunctionRow]:
        busy = merged.states["busy"]
        own: Counter[str] = Counter()
        total: Counter[str] = Counter()
        for pid in pids:
            own.update(self.own.get(pid, Counter()))
            total.update(self.total.get(pid, Counter()))
        names = set(merged.self_samples) | set(merged.total_samples) | set(own) | set(total)
        period = 1 / self.rate_hz
        return [
            FunctionRow(
                name,
                merged.self_samples[name] / busy if busy else 0.0,
                merged.total_samples[name] / busy if busy else 0.0,
                own[name] * period,
                total[name] * period,
            )
            for name in names
        ]


def _most(values: Iterable[str], default: str) -> str:
    known = Counter(v for v in values if v != default)
    return known.most_common(1)[0][0] if known else default


def shares_per_second(slices: Iterable[Slice]) -> dict[str, list[float]]:
    """Each state's share of the loop's samples per second (by when each window ended),
    oldest first; the processes of one second pooled."""
    seconds: dict[int, Counter[str]] = {}
    for piece in slices:
        seconds.setdefault(int(piece.end), Counter()).update(piece.analysis.states)
    out: dict[str, list[float]] = {state: [] for state in STATES}
    for second in sorted(seconds):
        states = seconds[second]
        whole = sum(states.values())
        for state in STATES:
            out[state].append(states[state] / whole if whole else 0.0)
    return out


def tasks_in_flight(slices: Sequence[Slice]) -> InFlight | None:
    """Tasks in flight over the slices, as ``stats --tasks`` pools them per process, the
    processes added up; None when no slice holds a task scan."""
    parts: list[InFlight] = []
    for pid in sorted({s.pid for s in slices}):
        own = [s.window for s in slices if s.pid == pid and s.window.task_scans]
        if not own:
            continue
        rows = [row for window in own for row in window.tasks]
        scans = sum(w.task_scans for w in own)
        unread = sum(w.task_unread for w in own)
        parts.append(InFlight.of_rows(rows, scans, max(w.in_flight for w in own), unread))
    if not parts:
        return None
    return InFlight(
        scans=sum(p.scans for p in parts),
        mean=sum(p.mean for p in parts),
        max=sum(p.max for p in parts),
        states={state: sum(p.states[state] for p in parts) for state in TASK_STATES},
        requests=sum(p.requests for p in parts),
        unread=sum(p.unread for p in parts),
    )
