"""Windows into Pyroscope series: the series labels, three profile types, Pyroscope's limits.

Each window becomes two gzipped pprof profiles: ``process_cpu`` (the busy samples, in CPU
nanoseconds at one period per sample, a ``[gc]`` frame on top of those taken while the thread
collected garbage; a sample waiting for a CPU is none of them) and ``wall`` (every sample, in
wall nanoseconds). Every sample is labelled with its ``state`` (busy, idle, blocked, gil,
cpu_wait) and its ``thread_name`` (``sidecar.formats.pprof``). A window with task scans adds a
third, ``asyncio_tasks``: each task-sample stands for one scan period of one task, in wall
nanoseconds, so a stack's value is the time tasks spent in that await chain; its samples are
labelled with the task's ``state`` (running, ready, waiting), ``task`` (request, background)
and, for a request's, its ``route`` (``METHOD ROUTE``).
A series is named by ``service_name`` (``--service-name``, else a short name of the target's
command line) and labelled with the target's ``framework``, ``loop``, ``python_version`` and
``pid``, and with the pod's name and namespace where the manifests pass them in (``POD_NAME``,
``POD_NAMESPACE``). The ``pid`` keeps each process a series of its own: Pyroscope keeps one of
the profiles of a series that share a timestamp, and the processes of one service (a pre-fork
server's workers, two targets under one ``--service-name``) send a window each at the same
instant, so without it all but one process's window would be lost in queries.

Pyroscope's default limits are kept: at most 16,000 samples per profile (the rarest stacks of a
larger window are counted together as one ``[other stacks]`` stack per state and thread, so the
totals stay exact), 4 MiB per profile, label names and values within their lengths.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping

from sidecar import _native
from sidecar.discover import gunicorn_title
from sidecar.formats import pprof
from sidecar.rules.frames import leaf_for
from sidecar.rules.tasks import route_of, task_kind, task_leaf
from sidecar.sample.messages import ProcessRecord, WindowBatch

#: Pyroscope's default limits (distributor): samples per profile, bytes per profile, label sizes.
MAX_SAMPLES = 16_000
MAX_PROFILE_BYTES = 4 * 2**20
MAX_NAME_LENGTH = 1024
MAX_VALUE_LENGTH = 2048
OTHER = "[other stacks]"
#: The profile types of a window: (series name, what its values measure, which states count).
TYPES: tuple[tuple[str, str, frozenset[str] | None], ...] = (
    ("process_cpu", "cpu", frozenset({"busy"})),
    ("wall", "wall", None),
)
#: The series of a window's asyncio tasks.
TASKS = "asyncio_tasks"
#: Environment variables (the Downward API in the manifests) that label every series.
POD_ENV = (("POD_NAME", "pod"), ("POD_NAMESPACE", "namespace"))
_LABEL_NAME = re.compile(r"[^A-Za-z0-9_]")

Labels = tuple[tuple[str, str], ...]


def label_value(text: str) -> str:
    """A label value Pyroscope accepts: printable, within its length, never empty."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in text).strip()
    return clean[:MAX_VALUE_LENGTH] or "unknown"


def label_name(text: str) -> str:
    name = _LABEL_NAME.sub("_", text)[:MAX_NAME_LENGTH]
    return name if name and not name[0].isdigit() else f"_{name}"


def service_name(cmdline: str) -> str:
    """A short name for a command line: the module of ``python -m MODULE``, else the script's
    or the program's file name without its suffix; for a titled gunicorn process, the NAME of
    its title without a ``:callable``."""
    titled = gunicorn_title(cmdline)
    if titled is not None:
        return titled.split(":", 1)[0] or "gunicorn"
    words = cmdline.split()
    if not words:
        return "python"
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1]
    scripts = [w for w in words[1:] if not w.startswith("-")]
    chosen = scripts[0] if scripts else words[0]
    base = os.path.basename(chosen)
    return re.sub(r"\.pyw?$", "", base) or "python"


def pod_labels(environ: Mapping[str, str] = os.environ) -> Labels:
    """The pod's name and namespace, where the manifests pass them in."""
    return tuple((name, label_value(environ[var])) for var, name in POD_ENV if environ.get(var))


def series_labels(record: ProcessRecord, service: str | None, extra: Labels = ()) -> Labels:
    """The labels of every series of one process (``__name__`` is added per profile type)."""
    labels = {
        "service_name": label_value(service or service_name(record.cmdline)),
        "framework": label_value(record.framework),
        "loop": label_value(record.loop),
        "python_version": label_value(record.python_version or "unknown"),
        "pid": str(record.pid),
    }
    for name, value in extra:
        labels.setdefault(label_name(name), label_value(value))
    return tuple(sorted(labels.items()))


def _bounded(
    samples: list[pprof.Sample], limit: int, leaf: Callable[[str], str | None]
) -> list[pprof.Sample]:
    """At most ``limit`` samples: past it, the rarest stacks become one ``[other stacks]``
    sample per state, thread and task kind (ended by the state's ``leaf``), so totals stay."""
    if len(samples) <= limit:
        return samples
    samples = sorted(samples, key=lambda sample: sample.count, reverse=True)
    keep = max(0, limit - len({(s.state, s.thread, s.task, s.route) for s in samples}))
    other: dict[tuple[str, str, str, str], int] = {}
    for sample in samples[keep:]:
        key = (sample.state, sample.thread, sample.task, sample.route)
        other[key] = other.get(key, 0) + sample.count
    return samples[:keep] + [
        pprof.Sample(_marked(OTHER, leaf(state)), state, count, thread, task, route)
        for (state, thread, task, route), count in other.items()
    ]


def _samples(batch: WindowBatch, states: frozenset[str] | None, limit: int) -> list[pprof.Sample]:
    """The window's rows in ``states`` as pprof samples, at most ``limit`` of them."""
    names = batch.window.thread_names
    samples = [
        pprof.Sample(_marked(stack, leaf_for(state)), state, count, names.get(tid, ""))
        for stack, tid, state, count in batch.window.rows
        if states is None or state in states
    ]
    return _bounded(samples, limit, leaf_for)


def _task_samples(batch: WindowBatch, limit: int) -> list[pprof.Sample]:
    """The window's task rows as pprof samples, at most ``limit`` of them."""
    samples = [
        pprof.Sample(
            _marked(stack, task_leaf(state)),
            state,
            count,
            task=task_kind(stack),
            route=route_of(stack) or "",
        )
        for stack, state, count in batch.window.tasks
    ]
    return _bounded(samples, limit, task_leaf)


def _marked(stack: str, leaf: str | None) -> str:
    """The stack with its state's synthetic leaf, as sidecar's own profiles show it."""
    return f"{stack};{leaf}" if leaf else stack


def profiles(
    batch: WindowBatch, rate_hz: float, task_rate_hz: float = 0.0
) -> list[tuple[str, bytes]]:
    """(series name, gzipped pprof) of a window, its task profile too when its tasks were
    scanned (at ``task_rate_hz``); a profile type with no samples is left out."""
    out: list[tuple[str, bytes]] = []
    for name, measure, states in TYPES:
        data = _fitted(batch, functools.partial(_samples, batch, states), measure, rate_hz)
        if data is not None:
            out.append((name, data))
    if batch.window.tasks and task_rate_hz > 0:
        data = _fitted(batch, functools.partial(_task_samples, batch), "wall", task_rate_hz)
        if data is not None:
            out.append((TASKS, data))
    return out


def _fitted(
    batch: WindowBatch, samples_of: Callable[[int], list[pprof.Sample]], measure: str, rate: float
) -> bytes | None:
    """The samples as one gzipped pprof within Pyroscope's limits: at most MAX_SAMPLES, and
    fewer, larger stacks until it fits in MAX_PROFILE_BYTES; None without samples."""
    limit = MAX_SAMPLES
    while True:
        samples = samples_of(limit)
        if not samples:
            return None
        data = pprof.encode(
            samples,
            rate_hz=rate,
            start=batch.start,
            end=batch.start + batch.width,
            values=(measure,),
        )
        if len(data) <= MAX_PROFILE_BYTES or limit <= 100:
            return data
        limit //= 2


Series = tuple[list[tuple[str, str]], list[bytes]]


def series_of(
    labels: Labels, batch: WindowBatch, rate_hz: float, task_rate_hz: float = 0.0
) -> list[Series]:
    """A window's series, one per profile type: (labels with ``__name__``, [gzipped pprof])."""
    made = profiles(batch, rate_hz, task_rate_hz)
    return [([("__name__", name), *labels], [data]) for name, data in made]


def request(series: Iterable[Series]) -> bytes:
    """The protobuf body of one push (``push.v1.PusherService/Push``)."""
    return _native.encode_push_request(list(series))
