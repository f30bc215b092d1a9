"""Flamegraph SVGs back into folded stacks: inferno's (py-spy's, sidecar's) and flamegraph.pl's.

A flamegraph draws every frame as a ``<g>`` holding a ``<title>`` ("name (1,234 samples, 5.6%)")
and a ``<rect>``. inferno adds the exact sample range of each frame as ``fg:x`` / ``fg:w``;
flamegraph.pl gives only pixels, so its structure comes from the geometry (rows by ``y``, a
parent is the frame one row closer to the root that covers the child's ``x`` range) and its
counts from the titles. Both orientations are read: the root row is found, not assumed.

Self time of a frame = its count less its children's. Frames the renderer left out for being
narrower than its minimum width cannot come back: where the sample ranges show their width
(``svg_counts``), it reads as a ``[pruned]`` leaf under their parent, counted as no state, and the
profile's notes say how much. The SVGs sidecar writes carry their folded stacks and read back
exactly (``svg_counts``).

The input is untrusted XML, read by the native reader (native/src/formats/svgread/, quick-xml): no
entity is declared or expanded, nothing outside the file is read, nesting deeper than
``MAX_DEPTH`` is refused, and so is a document above ``MAX_SVG_BYTES``; every refusal is one line
saying what is wrong and where. It folds inferno's frames (py-spy's, sidecar's) into stacks
itself; other layouts' frames (flamegraph.pl's) come here to be put together from their geometry.
expat's reading of the same documents is the test oracle (tests/svg_oracle.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from sidecar import _native
from sidecar.errors import ProfileFormatError
from sidecar.formats.svg_counts import (
    INFERNO_MIN_WIDTH,
    SEMICOLON_STANDIN,
    exact_notes,
    pruning_note,
    with_embedded,
)
from sidecar.formats.svg_counts import profile_notes as _notes
from sidecar.formats.svg_frames import FlameGraph, SvgFrame, link, rows_of
from sidecar.profile import MAX_SAMPLES, Profile, check_total, count_of
from sidecar.rules.frames import PRUNED_LEAF, state_of

__all__ = [
    "PRUNED_FRAME",
    "SEMICOLON_STANDIN",
    "FlameGraph",
    "SvgFrame",
    "read_flamegraph",
    "read_svg",
    "to_profile",
]

MAX_SVG_BYTES = 128 * 1024 * 1024
MAX_DEPTH = 100
#: The leaf that keeps the time of frames too narrow to be drawn (a stack of it alone: of
#: top-level frames).
PRUNED_FRAME = PRUNED_LEAF

# "name (1,234 samples, 5.67%)", with "; +1.23%" in differential graphs. Names may hold anything.
_TITLE = re.compile(
    r"(?P<name>.*) \((?P<count>\d[\d,_]*(?:\.\d+)?) (?P<unit>[^()]*?), "
    r"(?P<pct>\d+(?:\.\d+)?)%(?:; (?P<delta>[+-]?\d+(?:\.\d+)?)%)?\)",
    re.DOTALL,
)
_NUMBER = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(%|px)?\s*")


@dataclass
class _Raw:
    frames: list[tuple[str, dict[str, str]]]
    root: str
    total_samples: str | None
    script: str


def _number(text: str | None, what: str, source: str) -> tuple[float, bool]:
    """A coordinate: its value and whether it was a percentage."""
    match = _NUMBER.fullmatch(text or "")
    value = float(match[1]) if match is not None else math.nan
    if not math.isfinite(value) or abs(value) > MAX_SAMPLES:
        raise ProfileFormatError(
            f"{source}: a frame's <rect> has {what}={(text or '')[:40]!r}, not a number it can hold"
        )
    return value, match is not None and match[2] == "%"


def _count(text: str, source: str) -> int:
    """A title's count, written as a number (``1,234``, ``1.5e3``), within MAX_SAMPLES."""
    value = float(text.replace(",", "").replace("_", ""))
    if not math.isfinite(value) or value > MAX_SAMPLES:
        raise ProfileFormatError(
            f"{source}: a frame's title counts {text[:40]!r} samples, past the most a "
            f"profile counts ({MAX_SAMPLES:,})"
        )
    return round(value)


def _parse_title(title: str, source: str) -> tuple[str, int | None, bool]:
    """(name, count, has a differential part) from a frame's title."""
    name, sep, tail = title.rpartition(" (")
    if sep and tail.endswith("%)") and ";" not in tail:
        number = tail.partition(" ")[0].replace(",", "")
        if number.isdigit():
            return name, count_of(number, f"{source}: a frame's title"), False
    match = _TITLE.fullmatch(title)
    if match is None:
        return title.strip(), None, False
    return match["name"], _count(match["count"], source), match["delta"] is not None


def read_flamegraph(data: bytes, source: str = "input") -> FlameGraph:
    """The frames of a flamegraph SVG, with parents, depths and counts; refuses anything else."""
    return _graph(_read(data, source, fold=False), source)


def _read(data: bytes, source: str, *, fold: bool) -> _native.SvgRead:
    _check_size(data, source)
    try:
        return _native.read_svg(data, max_depth=MAX_DEPTH, fold=fold)
    except ValueError as err:
        raise ProfileFormatError(f"{source}: {err}") from None


def _graph(read: _native.SvgRead, source: str) -> FlameGraph:
    raw = _Raw(read["frames"], read["root"], read["total_samples"], read["script"])
    if raw.root != "svg":
        raise ProfileFormatError(f"{source}: not an SVG (the document's root is <{raw.root}>)")
    if not raw.frames:
        raise ProfileFormatError(
            f"{source}: an SVG but not a flamegraph (no frames: <g> elements with a <title> "
            "and a <rect>)"
        )
    exact = all("fg:w" in attrs and "fg:x" in attrs for _, attrs in raw.frames)
    graph = _exact(raw, source) if exact else _geometric(raw, source)
    link(graph, source)
    return graph


def _check_size(data: bytes, source: str) -> None:
    if len(data) > MAX_SVG_BYTES:
        raise ProfileFormatError(
            f"{source}: refused: {len(data) / 1e6:,.0f} MB is above the "
            f"{MAX_SVG_BYTES // (1024 * 1024)} MB limit for an SVG"
        )


def _frames_from(
    raw: _Raw, source: str, extent: Callable[[dict[str, str]], tuple[float, float]]
) -> tuple[list[SvgFrame], list[float], bool]:
    frames: list[SvgFrame] = []
    ys: list[float] = []
    differential = False
    for title, attrs in raw.frames:
        name, title_count, delta = _parse_title(title, source)
        differential = differential or delta
        start, width = extent(attrs)
        y, _ = _number(attrs.get("y"), "y", source)
        ys.append(y)
        frames.append(SvgFrame(name, -1, start, width, 0, title_count))
    return frames, ys, differential


def _exact(raw: _Raw, source: str) -> FlameGraph:
    """inferno: fg:x / fg:w are exact sample ranges."""

    def extent(attrs: dict[str, str]) -> tuple[float, float]:
        x, w = attrs["fg:x"], attrs["fg:w"]
        if not (x.isdigit() and w.isdigit()):
            raise ProfileFormatError(
                f"{source}: a frame has fg:x={x[:40]!r} fg:w={w[:40]!r}, not sample counts"
            )
        return count_of(x, f"{source}: a frame's fg:x"), count_of(w, f"{source}: a frame's fg:w")

    frames, ys, differential = _frames_from(raw, source, extent)
    for frame in frames:
        frame.count = int(frame.width)
    graph = rows_of(frames, ys, raw.script, source, exact=True)
    graph.differential = differential
    root = frames[0]
    if root.title_count is not None and root.count:
        graph.factor = root.title_count / root.count
    off = [
        f
        for f in frames
        if f.title_count is not None and abs(f.title_count - f.count * graph.factor) > 1
    ]
    graph.notes += exact_notes(
        len(off), off[0].name if off else None, graph.factor, raw.total_samples, root.count
    )
    return graph


def _geometric(raw: _Raw, source: str) -> FlameGraph:
    """flamegraph.pl: structure from x / y / width in pixels, counts from the titles."""
    units: set[bool] = set()

    def extent(attrs: dict[str, str]) -> tuple[float, float]:
        x, x_pct = _number(attrs.get("x"), "x", source)
        width, w_pct = _number(attrs.get("width"), "width", source)
        units.update((x_pct, w_pct))
        return x, width

    frames, ys, differential = _frames_from(raw, source, extent)
    if len(units) > 1:
        raise ProfileFormatError(f"{source}: frames mix pixel and percent coordinates")
    for frame in frames:
        if frame.title_count is None:
            raise ProfileFormatError(
                f"{source}: the frame title {frame.name[:80]!r} has no "
                "'(COUNT samples, PCT%)' part; is this a flamegraph?"
            )
        frame.count = frame.title_count
    graph = rows_of(frames, ys, raw.script, source, exact=False)
    graph.differential = differential
    return graph


def to_profile(graph: FlameGraph, source: str = "input") -> Profile:
    """Folded stacks from the frames: each frame's self time on the stack that ends in it."""
    frames = graph.frames
    children_sum = [0] * len(frames)
    for frame in frames:
        if frame.parent >= 0:
            children_sum[frame.parent] += frame.count
    # where each frame's first drawn callee starts (frames are in start order)
    first_child: dict[int, float] = {}
    for frame in frames:
        if frame.parent >= 0:
            first_child.setdefault(frame.parent, frame.start)
    paths: list[str] = [""] * len(frames)
    profile = Profile()
    negative = 0
    renamed = 0
    for index, frame in enumerate(frames):
        if index == 0:
            continue
        name = frame.name
        if ";" in name:
            name = name.replace(";", SEMICOLON_STANDIN)
            renamed += 1
        parent_path = paths[frame.parent] if frame.parent > 0 else ""
        path = f"{parent_path};{name}" if parent_path else name
        paths[index] = path
        own = frame.count - children_sum[index]
        if own > 0:
            # inferno's ranges: width after the first drawn callee's start is pruned callees'
            pruned = 0
            if graph.exact and index in first_child:
                pruned = own - min(own, int(first_child[index] - frame.start))
            if pruned:
                profile.add(f"{path};{PRUNED_FRAME}", pruned)
            profile.add(path, own - pruned)
        elif own < 0:
            negative -= own
    root = frames[0]
    root_self = root.count - children_sum[0]
    if root_self > 0:
        profile.add(PRUNED_FRAME, root_self)
    if negative and graph.exact:
        raise ProfileFormatError(
            f"{source}: frames are wider than their parents; not a consistent flamegraph"
        )
    if not profile.stacks:
        raise ProfileFormatError(f"{source}: the flamegraph has no samples")
    check_total(profile.total, source)
    profile.notes = _notes(
        graph.notes, graph.differential, renamed, negative, _pruning(graph, profile)
    )
    profile.marked = any(state_of(s) != "busy" for s in profile.stacks)
    return profile


def _pruning(graph: FlameGraph, profile: Profile) -> str:
    """A note when frames were (probably) left out for being too narrow, else ''."""
    smallest = min((f.count for f in graph.frames[1:] if f.count > 0), default=0)
    # Default minimum widths: inferno 0.1% of the graph, flamegraph.pl 0.1 px of the frames.
    root_width = graph.frames[0].width
    threshold = INFERNO_MIN_WIDTH if graph.exact or not root_width else 0.1 / root_width
    return pruning_note(graph.total, smallest, threshold, _pruned(profile), graph.exact)


def _pruned(profile: Profile) -> int:
    return sum(c for s, c in profile.stacks.items() if s.endswith(PRUNED_FRAME))


def read_svg(data: bytes, source: str = "input") -> Profile:
    """A flamegraph SVG (bytes) as a Profile; ProfileFormatError for anything else.

    The native reader folds inferno's frames itself; other layouts' frames are put together
    here.
    """
    read = _read(data, source, fold=True)
    folded = read["folded"]
    if folded is not None:
        drawn = _inferno_profile(folded)
    else:
        drawn = to_profile(_graph(read, source), source)
    return with_embedded(read["embedded"], drawn, source)


def _inferno_profile(read: _native.InfernoRead) -> Profile:
    """The Profile of the native reader's answer, with the notes the Python reader gives."""
    total = read["total"]
    factor = read["root_title_count"] / total if total else 1.0
    graph_notes = exact_notes(read["off"], read["first_off"], factor, read["total_samples"], total)
    profile = Profile(stacks=read["stacks"])
    pruned = pruning_note(total, read["smallest"], INFERNO_MIN_WIDTH, _pruned(profile), True)
    profile.notes = _notes(graph_notes, read["differential"], read["renamed"], 0, pruned)
    profile.marked = any(state_of(s) != "busy" for s in profile.stacks)
    return profile
