"""Prometheus metrics of ``sidecar serve``, read from the live service at scrape time.

Labels never carry stack or function names: only PID, framework, loop, role (``master`` /
``worker`` in a pre-fork server, empty for a lone process), state, the kind of a task
(``request`` or ``background``, ``sidecar.rules.tasks.is_request``) and a request's route
(``METHOD ROUTE``, the pattern the framework matched, never a path: 50 a process, the rest one
label, ``analyze.requests.RouteSeries``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from sidecar.analyze.threads import merge
from sidecar.rules.frames import STATES

if TYPE_CHECKING:
    from sidecar.sample.cgroup import CgroupCpu
    from sidecar.serve.service import Service


def problem_reason(error: str) -> str:
    """A bounded label value for why a process cannot be traced."""
    text = error.lower()
    if "not allowed" in text or "permission" in text or "cap_sys_ptrace" in text:
        return "permission"
    if "python" in text:
        return "not_python"
    if "no process" in text or "exited" in text:
        return "gone"
    return "other"


#: One unlabelled figure: (name without ``sidecar_``, value, help).
Scalar = tuple[str, float, str]


def _scalars(
    family: type[GaugeMetricFamily | CounterMetricFamily], rows: Iterable[Scalar]
) -> Iterator[Metric]:
    """One unlabelled gauge or counter per row."""
    for name, value, help_text in rows:
        metric = family(f"sidecar_{name}", help_text)
        metric.add_metric([], value)
        yield metric


#: The labels of every per-process series.
TARGET_LABELS = ("pid", "framework", "loop", "role")


class CpuFamilies:
    """The CPU limit and CFS throttling of each target's cgroup (``sample.cgroup``), as
    ``Session.read_cpu`` read them last: the counters are the kernel's, since the cgroup
    that sets the limit (the process's own when none does) began, carried on across a move to
    another cgroup (``sessions.carried``), so they never go back."""

    def __init__(self) -> None:
        self.limit = GaugeMetricFamily(
            "sidecar_cpu_limit_cores",
            "CPU limit of the target process's cgroup in cores (CFS quota / period, the "
            "tightest on its path up the cgroup tree); absent when unlimited",
            labels=TARGET_LABELS,
        )
        since = (
            "counted by the kernel since the cgroup that sets the target process's CPU limit "
            "(its own when unlimited) began"
        )
        self.periods = CounterMetricFamily(
            "sidecar_cpu_cfs_periods",
            f"CFS enforcement periods that ran, {since}",
            labels=TARGET_LABELS,
        )
        self.throttled = CounterMetricFamily(
            "sidecar_cpu_cfs_throttled_periods",
            f"CFS periods in which the cgroup used up its quota and was throttled, {since}",
            labels=TARGET_LABELS,
        )
        self.seconds = CounterMetricFamily(
            "sidecar_cpu_cfs_throttled_seconds",
            f"Time the cgroup's threads were throttled (runnable, kept off the CPU), {since}",
            labels=TARGET_LABELS,
        )

    def add(self, labels: list[str], cpu: CgroupCpu) -> None:
        """One process's series: no limit gauge when its cgroup sets none."""
        if cpu.cores is not None:
            self.limit.add_metric(labels, cpu.cores)
        throttling = cpu.throttling
        self.periods.add_metric(labels, throttling.periods)
        self.throttled.add_metric(labels, throttling.throttled_periods)
        self.seconds.add_metric(labels, throttling.throttled_seconds)

    def families(self) -> Iterator[Metric]:
        yield self.limit
        yield self.periods
        yield self.throttled
        yield self.seconds


class ServiceCollector(Collector):
    def __init__(self, service: Service) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        sessions = self.service.sessions
        totals = sessions.totals()
        yield from _scalars(
            CounterMetricFamily,
            (
                (f"sampler_{name}", totals[name], help_text)
                for name, help_text in (
                    ("samples", "Sampling ticks that read a target's stacks"),
                    ("errors", "Sampling ticks whose read failed while the target ran"),
                    ("retried", "Torn reads of a running target read again within the same tick"),
                    ("late", "Sampling ticks that started late"),
                    ("missed", "Sampling ticks skipped because the sampler fell behind"),
                    ("dropped_windows", "Windows the sampler dropped because nobody drained them"),
                )
            ),
        )

        live = sessions.live_stats()
        lag = GaugeMetricFamily(
            "sidecar_sampling_lag_seconds",
            "Mean delay of sampling ticks behind schedule, per target process",
            labels=TARGET_LABELS,
        )
        share = GaugeMetricFamily(
            "sidecar_loop_share",
            "Share of the event-loop thread's samples per state (busy, idle, blocked, gil: "
            "waiting for the GIL another thread holds, cpu_wait: runnable, waiting for a CPU) "
            "over the last minute (a pre-fork master, role master, serves no requests)",
            labels=[*TARGET_LABELS, "state"],
        )
        gc_share = GaugeMetricFamily(
            "sidecar_loop_gc_share",
            "Share of the event-loop thread's samples taken while it collected garbage over "
            "the last minute (busy samples with a [gc] frame on top)",
            labels=TARGET_LABELS,
        )
        tasks = GaugeMetricFamily(
            "sidecar_tasks",
            "asyncio tasks in flight per state and kind (request or background), the mean over "
            "the last window with task scans (serve --task-rate)",
            labels=[*TARGET_LABELS, "state", "kind"],
        )
        unread = GaugeMetricFamily(
            "sidecar_tasks_unread",
            "asyncio tasks in flight past the task scans' bound (20,000 a scan), not read, the "
            "mean over the last window with task scans: in no state nor kind of sidecar_tasks",
            labels=TARGET_LABELS,
        )
        stalls = HistogramMetricFamily(
            "sidecar_loop_stall_seconds",
            "Stalls of the event loop: callbacks that kept it from its poll for serve "
            "--stall-ms or more (default 0.1 s), by length, since sampling of the process began",
            labels=TARGET_LABELS,
        )
        stalled = GaugeMetricFamily(
            "sidecar_loop_stalled_seconds",
            "How long the callback the event loop is in now has held it, once that is serve "
            "--stall-ms or more (0 otherwise): a stall in progress, before the histogram counts "
            "it as it ends",
            labels=TARGET_LABELS,
        )
        routes = GaugeMetricFamily(
            "sidecar_route_requests",
            "Requests in flight per route (METHOD ROUTE as the framework matched it) and task "
            "state, the mean over the last window with task scans; 50 routes a process at most, "
            'the rest as route "(other routes)"',
            labels=[*TARGET_LABELS, "route", "state"],
        )
        slow = CounterMetricFamily(
            "sidecar_slow_requests",
            "Slow requests: in flight for serve --slow-ms or more (default 0.5 s), per route, "
            "since sampling of the process began",
            labels=[*TARGET_LABELS, "route"],
        )
        cpu = CpuFamilies()
        now = time.time()
        for session, stats in live:
            labels = [str(session.key[0]), session.framework, session.loop, session.role or ""]
            lag.add_metric(labels, stats["lag_mean"])
            since = stats["stalled_since"]
            stalled.add_metric(labels, 0.0 if since is None else max(0.0, now - since))
            histogram = session.stalls
            stalls.add_metric(labels, histogram.exposed(), histogram.sum)
            for (state, kind), mean in session.tasks.items():
                tasks.add_metric([*labels, state, kind], mean)
            if session.tasks:
                unread.add_metric(labels, session.tasks_unread)
            for (route, state), mean in session.routes.in_flight.items():
                routes.add_metric([*labels, route, state], mean)
            for route, count in session.routes.slow.items():
                slow.add_metric([*labels, route], count)
            recent = merge(list(session.recent))  # the shares of stats, over the last minute
            if recent.samples:
                for state in STATES:
                    share.add_metric([*labels, state], recent.share(state))
                gc_share.add_metric(labels, recent.gc_share)
            if session.cpu is not None:
                cpu.add(labels, session.cpu)
        yield lag
        yield share
        yield gc_share
        yield tasks
        yield unread
        yield stalls
        yield stalled
        yield routes
        yield slow
        yield from cpu.families()

        targets = GaugeMetricFamily(
            "sidecar_targets", "Processes by sampling state", labels=["state"]
        )
        targets.add_metric(["sampling"], len(live))
        problems = list(sessions.problems.values())
        targets.add_metric(["untraceable"], len(problems))
        yield targets
        untraceable = GaugeMetricFamily(
            "sidecar_untraceable_processes",
            "Processes that cannot be traced, by reason (details in /api/targets)",
            labels=["reason"],
        )
        reasons: dict[str, int] = {}
        for problem in problems:
            reason = problem_reason(problem.error)
            reasons[reason] = reasons.get(reason, 0) + 1
        for reason, count in sorted(reasons.items()):
            untraceable.add_metric([reason], count)
        yield untraceable

        health = self.service.writer.health
        yield from _scalars(
            GaugeMetricFamily,
            (
                ("store_bytes", health.size_bytes, "Size of the database and its WAL"),
                ("store_backlog", health.backlog, "Messages waiting to be written"),
                ("store_writing", 0 if health.failing else 1, "1 while the database is writable"),
            ),
        )
        yield from _scalars(
            CounterMetricFamily,
            (
                ("store_write_errors", health.write_errors, "Failed database writes"),
                ("store_dropped_windows", health.dropped_windows, "Unwritten windows dropped"),
                ("store_evicted_windows", health.evicted_windows, "Windows evicted when full"),
                ("store_windows_written", health.windows_written, "Windows written"),
                (
                    "store_recreated",
                    health.recreated,
                    "Database files found deleted, replaced or corrupt and started anew",
                ),
            ),
        )
        yield from self._push()

    def _push(self) -> Iterator[Metric]:
        """sidecar_push_*: only with --push."""
        pusher = self.service.pusher
        if pusher is None:
            return
        health = pusher.health
        yield from _scalars(
            GaugeMetricFamily,
            (
                ("push_backlog", health.backlog, "Windows waiting to be pushed"),
                ("push_up", 0 if health.failing else 1, "1 unless the last push failed"),
                (
                    "push_last_success_timestamp_seconds",
                    health.last_success_at or 0,
                    "When a push last succeeded (unix seconds, 0 before the first)",
                ),
            ),
        )
        yield from _scalars(
            CounterMetricFamily,
            (
                ("push_windows_pushed", health.pushed_windows, "Windows Pyroscope accepted"),
                ("push_requests", health.requests, "Push requests Pyroscope accepted"),
                ("push_bytes", health.bytes_sent, "Bytes of accepted push requests"),
                ("push_retries", health.retries, "Pushes that failed and were tried again"),
            ),
        )
        given_up = CounterMetricFamily(
            "sidecar_push_windows_given_up",
            "Windows not pushed, by why: rejected (4xx), expired (too old to be accepted), "
            "overflow (backlog full), shutdown",
            labels=["reason"],
        )
        for reason, count in health.given_up.items():
            given_up.add_metric([reason], count)
        yield given_up


def registry_for(service: Service) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))
    return registry
