"""The frames of a flamegraph SVG put together: rows by ``y`` (the root row found, not assumed),
depths, and each frame's parent, the frame one row closer to the root that covers its range
(by exact sample ranges, or by pixel geometry, rounded, for flamegraph.pl's layout).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from dataclasses import dataclass, field

from sidecar.errors import ProfileFormatError

_INVERTED = re.compile(r"\bvar\s+inverted\s*=\s*(true|false|1|0)\b")


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


def rows_of(
    frames: list[SvgFrame], ys: list[float], script: str, source: str, *, exact: bool
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

    inverted = _inverted(frames, by_row, script)
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


def _inverted(frames: list[SvgFrame], by_row: list[list[int]], script: str) -> bool:
    """Icicle (root row at the top) or flame (root row at the bottom)?"""
    if len(by_row) == 1:
        return False

    def is_root(row: list[int]) -> bool:
        return len(row) == 1 and frames[row[0]].name == "all"

    top, bottom = is_root(by_row[0]), is_root(by_row[-1])
    if top != bottom:
        return top
    said = _INVERTED.search(script)
    if said is not None:
        return said[1] in ("true", "1")
    top_count = sum(frames[i].count or frames[i].width for i in by_row[0])
    bottom_count = sum(frames[i].count or frames[i].width for i in by_row[-1])
    return top_count > bottom_count


def link(graph: FlameGraph, source: str) -> None:
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
