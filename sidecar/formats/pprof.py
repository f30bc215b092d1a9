"""pprof out and in: profiles as gzipped ``profile.proto``, the format of ``go tool pprof`` and
Pyroscope, and such a file read back (``read_pprof``: sidecar's exactly, others' by their
``samples`` values).

Each sample is one folded stack (its ``[idle]`` / ``[blocked]`` / ``[gil]`` leaf kept as a
frame, so the flamegraph shows where the loop waited, and a ``[gc]`` frame on top of a busy
stack taken while the thread collected garbage) with a ``state`` label (busy, idle, blocked,
gil: waiting for the GIL another thread held) and, where the sampler saw it, a
``thread_name`` label. A task sample (leaf ``[running]``, ``[ready]`` or
``[waiting]``) has its state and a ``task`` label: ``request`` or ``background``; a request's, a
``route`` label too (``GET /items/{item}``, from its route frame), so Pyroscope and
``-tagfocus`` select one route's requests. Frames are
parsed here by the one frame grammar (``function (file:line)``); the message itself is built
and compressed, and read back (bounded once decompressed, every index checked), in the native
core, with prost.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sidecar import _native
from sidecar.errors import NoSamples, ProfileFormatError
from sidecar.profile import Profile, check_total
from sidecar.rules.frames import exact_frame, format_frame, state_of
from sidecar.rules.tasks import TASK_LEAVES, route_of, task_kind

MEDIA_TYPE = "application/vnd.google.protobuf+gzip"
#: What a value measures: pprof's (type, unit).
MEASURES = {
    "samples": ("samples", "count"),
    "wall": ("wall", "nanoseconds"),
    "cpu": ("cpu", "nanoseconds"),
}
#: What a profile file holds: sample counts, and the wall time they stand for (the default).
FILE_VALUES = ("samples", "wall")
DEFAULT_RATE_HZ = 100.0


@dataclass(frozen=True)
class Sample:
    """One folded stack (root first, synthetic leaf kept), its state, thread and count; a task
    sample's ``task`` says whether the task serves a request (``request`` / ``background``)."""

    stack: str
    state: str
    count: int
    thread: str = ""
    task: str = ""
    #: a request's task sample: ``METHOD ROUTE`` of its route frame
    route: str = ""


def samples_of(profile: Profile) -> list[Sample]:
    """A Profile's stacks as samples; their state comes from their leaf, and a task stack's
    ``task`` from its root (``sidecar.rules.tasks.is_request``)."""
    out: list[Sample] = []
    for stack, count in profile.stacks.items():
        leaf = stack.rsplit(";", 1)[-1]
        if leaf in TASK_LEAVES:
            route = route_of(stack) or ""
            out.append(Sample(stack, leaf[1:-1], count, task=task_kind(stack), route=route))
        else:
            out.append(Sample(stack, state_of(stack), count))
    return out


def period_ns(rate_hz: float | None) -> int:
    """Nanoseconds one sample stands for at ``rate_hz`` (100 Hz when unknown)."""
    rate = rate_hz if rate_hz and rate_hz > 0 else DEFAULT_RATE_HZ
    return max(1, round(1e9 / rate))


def encode(
    samples: Iterable[Sample],
    *,
    rate_hz: float | None,
    start: float | None = None,
    end: float | None = None,
    values: Sequence[str] = FILE_VALUES,
    comments: Sequence[str] = (),
) -> bytes:
    """Gzipped profile.proto: one value per name in ``values`` (``samples`` counts, ``wall``
    and ``cpu`` nanoseconds at one period per sample), the last one the default."""
    period = period_ns(rate_hz)
    rows: list[tuple[str, list[int], list[tuple[str, str]]]] = []
    for sample in samples:
        if sample.count <= 0:
            continue
        labels = [("state", sample.state)]
        if sample.thread:
            labels.append(("thread_name", sample.thread))
        if sample.task:
            labels.append(("task", sample.task))
        if sample.route:
            labels.append(("route", sample.route))
        amounts = [sample.count if name == "samples" else sample.count * period for name in values]
        rows.append((sample.stack, amounts, labels))
    if not rows:
        raise NoSamples("nothing to write: the profile has no stacks")
    # the distinct frames (found natively), each parsed once by the one frame grammar
    frames = [(text, *_parsed(text)) for text in _native.frame_names(row[0] for row in rows)]
    time_ns = round(start * 1e9) if start is not None else 0
    duration_ns = round((end - start) * 1e9) if start is not None and end is not None else 0
    return _native.encode_pprof(
        frames,
        rows,
        sample_types=[MEASURES[name] for name in values],
        period_type=MEASURES[values[-1]] if values[-1] != "samples" else MEASURES["wall"],
        period=period,
        time_nanos=time_ns,
        duration_nanos=max(0, duration_ns),
        comments=list(comments),
    )


@functools.lru_cache(maxsize=65536)
def _parsed(text: str) -> tuple[str, str, int]:
    """A frame's (function, file, line); frames repeat from window to window, so once each."""
    frame = exact_frame(text)
    return frame.name, frame.file, frame.line


def encode_profile(profile: Profile, comments: Sequence[str] = ()) -> bytes:
    """A Profile (from the store, a file, a recording without threads) as a pprof file."""
    return encode(
        samples_of(profile),
        rate_hz=profile.rate_hz,
        start=profile.start,
        end=profile.end,
        comments=comments,
    )


#: The most bytes a pprof file's message may take once decompressed.
MAX_DECODED_BYTES = 512 * 1024 * 1024


def read_pprof(data: bytes, source: str = "input") -> Profile:
    """A pprof file (sidecar's or another profiler's) as a Profile: each sample's frames root
    first, formatted by the one frame grammar, and its count: its ``samples`` value, else its
    default (or last) value in periods. One line (``ProfileFormatError``) for a corrupt file."""
    try:
        read = _native.decode_pprof(data, max_bytes=MAX_DECODED_BYTES)
    except ValueError as err:
        raise ProfileFormatError(f"{source}: {err}") from None
    types = read["sample_types"]
    if not types:
        raise ProfileFormatError(f"{source}: a pprof file without sample types")
    names = [kind for kind, _ in types]
    chosen = names.index("samples") if "samples" in names else read["default_type"]
    if chosen is None:
        chosen = len(types) - 1
    period = read["period"]
    per_period = names[chosen] != "samples" and read["period_type"] == types[chosen] and period > 0
    frames = [format_frame(name, file, line) for name, file, line in read["frames"]]
    profile = Profile()
    negative = 0
    for indexes, values in read["samples"]:
        value = values[chosen]
        if value < 0:
            negative += 1
            continue
        count = round(value / period) if per_period else value
        profile.add(";".join(frames[i] for i in indexes) or "(no frames)", count)
    check_total(profile.total, source)
    if not profile.stacks:
        raise ProfileFormatError(f"{source}: a pprof file without samples")
    kind, unit = types[chosen]
    if per_period:
        profile.notes.append(f"counts are {kind} ({unit}) in periods of {period:,}")
    elif kind != "samples":
        profile.notes.append(f"counts are the {kind} values ({unit}), not samples")
    if negative:
        profile.notes.append(f"{negative:,} samples with a negative value were left out")
    period_type = read["period_type"]
    if period_type is not None and period_type[1] == "nanoseconds" and period > 0:
        profile.rate_hz = 1e9 / period
    profile.marked = any(state_of(s) != "busy" for s in profile.stacks)
    return profile
