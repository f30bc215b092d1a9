"""Flamegraph SVGs back into folded stacks: inferno's (py-spy's, sidecar's) and flamegraph.pl's.

A flamegraph draws every frame as a ``<g>`` holding a ``<title>`` ("name (1,234 samples, 5.6%)")
and a ``<rect>``. inferno adds the exact sample range of each frame as ``fg:x`` / ``fg:w``;
flamegraph.pl gives only pixels, so its structure comes from the geometry (rows by ``y``, a
parent is the frame one row closer to the root that covers the child's ``x`` range) and its
counts from the titles. Both orientations are read: the root row is found, not assumed.

Self time of a frame = its count less its children's. Frames the renderer left out for being
narrower than its minimum width cannot come back: their time stays with their parent as self
time, and the profile's notes say so.

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
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from sidecar import _native
from sidecar.errors import ProfileFormatError
from sidecar.profile import MAX_SAMPLES, Profile, check_total, count_of
from sidecar.rules.frames import state_of

MAX_SVG_BYTES = 128 * 1024 * 1024
MAX_DEPTH = 100
#: The stack that keeps the time of top-level frames too narrow to be drawn.
PRUNED_FRAME = "[pruned]"
#: Folded stacks separate frames with ';', so a ';' inside a frame name is written as this.
SEMICOLON_STANDIN = "\uff1b"

# "name (1,234 samples, 5.67%)", with "; +1.23%" in differential graphs. Names may hold anything.
_TITLE = re.compile(
    r"(?P<name>.*) \((?P<count>\d[\d,_]*(?:\.\d+)?) (?P<unit>[^()]*?), "
    r"(?P<pct>\d+(?:\.\d+)?)%(?:; (?P<delta>[+-]?\d+(?:\.\d+)?)%)?\)",
    re.DOTALL,
)
_INVERTED = re.compile(r"\bvar\s+inverted\s*=\s*(true|false|1|0)\b")
_NUMBER = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(%|px)?\s*")


@dataclass(slots=True)
class SvgFrame:
    """One drawn frame: its name, row (0 = root) and extent, in samples or pixels."""

    name: str
    depth: int
    start: float
    width: float
    count: int
    title_count: int | None
    parent: int = -1


@dataclass
class FlameGraph:
    """The frames of one flamegraph SVG, root first, and how they were read."""

    frames: list[SvgFrame]
    total: int
    inverted: bool
    exact: bool  # True when inferno's fg:x / fg:w gave exact sample ranges
    factor: float = 1.0
    differential: bool = False
    notes: list[str] = field(default_factory=list)


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
    _link(graph, source)
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
    graph = _rows(frames, ys, raw, source, exact=True)
    graph.differential = differential
    root = frames[0]
    if root.title_count is not None and root.count:
        graph.factor = root.title_count / root.count
    off = [
        f
        for f in frames
        if f.title_count is not None and abs(f.title_count - f.count * graph.factor) > 1
    ]
    graph.notes += _exact_notes(
        len(off), off[0].name if off else None, graph.factor, raw.total_samples, root.count
    )
    return graph


def _exact_notes(
    off: int, first_off: str | None, factor: float, declared: str | None, total: int
) -> list[str]:
    """Notes on an inferno graph: titles that disagree with fg:w, --factor, total_samples."""
    notes = []
    if off:
        notes.append(
            f"{off:,} frame titles disagree with their fg:w sample counts "
            f"(first: {first_off!r}); the fg:w counts are used"
        )
    if not math.isclose(factor, 1.0, rel_tol=1e-3):
        notes.append(
            f"the titles show counts scaled by {factor:.6g} (--factor); "
            "the profile keeps the unscaled fg:w counts"
        )
    if declared is not None and declared.isdigit():
        shown = declared if len(declared) <= 24 else f"<{len(declared):,} digits>"
        if len(declared) > 24 or int(declared) != total:
            notes.append(f"total_samples={shown} but the root frame holds {total:,}")
    return notes


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
    graph = _rows(frames, ys, raw, source, exact=False)
    graph.differential = differential
    return graph


def _rows(
    frames: list[SvgFrame], ys: list[float], raw: _Raw, source: str, *, exact: bool
) -> FlameGraph:
    """Depths from the rows (clustered y values), root row first; root frame first in the list."""
    levels = sorted(set(ys))
    # Rows are a frame height apart (16 px by default); rounding moves a row by less than 1 px.
    tolerance = 1.0
    row_of: dict[float, int] = {}
    row = -1
    previous = -math.inf
    for y in levels:
        if y - previous > tolerance:
            row += 1
        row_of[y] = row
        previous = y
    rows = row + 1
    by_row: list[list[int]] = [[] for _ in range(rows)]
    for index, y in enumerate(ys):
        by_row[row_of[y]].append(index)

    inverted = _inverted(frames, by_row, raw)
    for index, y in enumerate(ys):
        r = row_of[y]
        frames[index].depth = r if inverted else rows - 1 - r
    frames.sort(key=lambda f: (f.depth, f.start))
    base = [f for f in frames if f.depth == 0]
    if len(base) == 1 and base[0].name == "all":
        total = base[0].count
    else:
        # No synthetic root: add one holding everything, so every drawn frame is a real one.
        total = sum(f.count for f in base)
        start = min(f.start for f in base)
        end = max(f.start + f.width for f in base)
        for frame in frames:
            frame.depth += 1
        frames.insert(0, SvgFrame("all", 0, start, end - start, total, None))
    return FlameGraph(frames, total, inverted, exact)


def _inverted(frames: list[SvgFrame], by_row: list[list[int]], raw: _Raw) -> bool:
    """Icicle (root row at the top) or flame (root row at the bottom)?"""
    if len(by_row) == 1:
        return False

    def is_root(row: list[int]) -> bool:
        return len(row) == 1 and frames[row[0]].name == "all"

    top, bottom = is_root(by_row[0]), is_root(by_row[-1])
    if top != bottom:
        return top
    said = _INVERTED.search(raw.script)
    if said is not None:
        return said[1] in ("true", "1")
    top_count = sum(frames[i].count or frames[i].width for i in by_row[0])
    bottom_count = sum(frames[i].count or frames[i].width for i in by_row[-1])
    return top_count > bottom_count


def _link(graph: FlameGraph, source: str) -> None:
    """Each frame's parent: the frame one row closer to the root that covers its range."""
    frames = graph.frames
    first_of_depth: dict[int, int] = {}
    depth_end: dict[int, int] = {}
    for index, frame in enumerate(frames):
        first_of_depth.setdefault(frame.depth, index)
        depth_end[frame.depth] = index + 1
    if depth_end[0] - first_of_depth[0] != 1:
        raise ProfileFormatError(f"{source}: the flamegraph has more than one root frame")
    room = [f.count for f in frames]
    for depth in sorted(first_of_depth):
        if depth == 0:
            continue
        if depth - 1 not in first_of_depth:
            raise ProfileFormatError(f"{source}: frames at depth {depth} have no row below them")
        lo, hi = first_of_depth[depth - 1], depth_end[depth - 1]
        if graph.exact:
            _merge_parents(frames, lo, hi, first_of_depth[depth], depth_end[depth], source)
            continue
        starts = [frames[i].start for i in range(lo, hi)]
        for index in range(first_of_depth[depth], depth_end[depth]):
            frame = frames[index]
            parent = _nearest_parent(frame, frames, starts, lo, room)
            if parent < 0:
                raise ProfileFormatError(
                    f"{source}: the frame {frame.name[:80]!r} has no parent frame under it"
                )
            frame.parent = parent
            room[parent] -= frame.count


def _merge_parents(
    frames: list[SvgFrame], lo: int, hi: int, first: int, end: int, source: str
) -> None:
    """Exact sample ranges: parents and children both in start order, one merge pass."""
    at = lo
    parent = frames[at]
    stop = parent.start + parent.width
    for index in range(first, end):
        frame = frames[index]
        while frame.start >= stop and at + 1 < hi:
            at += 1
            parent = frames[at]
            stop = parent.start + parent.width
        if frame.start < parent.start or frame.start + frame.width > stop:
            raise ProfileFormatError(
                f"{source}: the frame {frame.name[:80]!r} has no parent frame under it"
            )
        frame.parent = at


def _nearest_parent(
    frame: SvgFrame, frames: list[SvgFrame], starts: list[float], lo: int, room: list[int]
) -> int:
    """Pixel geometry is rounded: of the frames around the child's middle, the one overlapping
    it the most that still has room for its count (sub-pixel frames touch two parents)."""
    mid = frame.start + frame.width / 2
    at = bisect_right(starts, mid) - 1
    scored = []
    for candidate in range(max(0, at - 2), min(len(starts), at + 3)):
        parent = frames[lo + candidate]
        overlap = min(frame.start + frame.width, parent.start + parent.width) - max(
            frame.start, parent.start
        )
        if overlap >= -max(0.5, frame.width):
            scored.append((room[lo + candidate] < frame.count, -overlap, lo + candidate))
    return min(scored)[2] if scored else -1


def to_profile(graph: FlameGraph, source: str = "input") -> Profile:
    """Folded stacks from the frames: each frame's self time on the stack that ends in it."""
    frames = graph.frames
    children_sum = [0] * len(frames)
    for frame in frames:
        if frame.parent >= 0:
            children_sum[frame.parent] += frame.count
    paths: list[str] = [""] * len(frames)
    profile = Profile()
    stacks = profile.stacks
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
            stacks[path] = stacks.get(path, 0) + own
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
        graph.notes, graph.differential, renamed, negative, _pruning(graph, root_self)
    )
    profile.marked = any(state_of(s) != "busy" for s in profile.stacks)
    return profile


def _notes(
    graph_notes: list[str], differential: bool, renamed: int, negative: int, pruned: str
) -> list[str]:
    """A profile's notes: the graph's, then what reading its frames into stacks changed."""
    notes = list(graph_notes)
    if differential:
        notes.append("a differential flamegraph: read as its 'after' side (the frame widths)")
    if renamed:
        notes.append(
            f"{renamed:,} frame names contain ';', written as {SEMICOLON_STANDIN!r} "
            "since folded stacks separate frames with ';'"
        )
    if negative:
        notes.append(
            f"the titles' counts are rounded (--factor?): {negative:,} samples of children "
            "exceed their parents' counts and were not given to the parents' self time"
        )
    if pruned:
        notes.append(pruned)
    return notes


def _pruning(graph: FlameGraph, root_self: int) -> str:
    """A note when frames were (probably) left out for being too narrow, else ''."""
    smallest = min((f.count for f in graph.frames[1:] if f.count > 0), default=0)
    # Default minimum widths: inferno 0.1% of the graph, flamegraph.pl 0.1 px of the frames.
    root_width = graph.frames[0].width
    threshold = 0.001 if graph.exact or not root_width else 0.1 / root_width
    return _pruning_note(graph.total, smallest, threshold, root_self)


def _pruning_note(total: int, smallest: int, threshold: float, root_self: int) -> str:
    if total <= 0:
        return ""
    narrowest = smallest / total
    likely = (
        smallest >= 2 and 1 / total < threshold and 0.9 * threshold <= narrowest < 2 * threshold
    )
    if not likely and root_self <= 0:
        return ""
    text = (
        f"frames narrower than the renderer's minimum width (about {threshold * 100:.2g}% "
        f"of the graph, {max(1, math.ceil(threshold * total)):,} samples) are not in the SVG; "
        "their time is counted as self time of their parent frames"
    )
    if root_self > 0:
        text += f" ({root_self:,} samples of top-level frames as {PRUNED_FRAME})"
    return text


def read_svg(data: bytes, source: str = "input") -> Profile:
    """A flamegraph SVG (bytes) as a Profile; ProfileFormatError for anything else.

    The native reader folds inferno's frames itself; other layouts' frames are put together
    here.
    """
    read = _read(data, source, fold=True)
    folded = read["folded"]
    if folded is not None:
        return _inferno_profile(folded)
    return to_profile(_graph(read, source), source)


def _inferno_profile(read: _native.InfernoRead) -> Profile:
    """The Profile of the native reader's answer, with the notes the Python reader gives."""
    total = read["total"]
    factor = read["root_title_count"] / total if total else 1.0
    graph_notes = _exact_notes(read["off"], read["first_off"], factor, read["total_samples"], total)
    pruned = _pruning_note(total, read["smallest"], 0.001, read["root_self"])
    profile = Profile(stacks=read["stacks"])
    profile.notes = _notes(graph_notes, read["differential"], read["renamed"], 0, pruned)
    profile.marked = any(state_of(s) != "busy" for s in profile.stacks)
    return profile
