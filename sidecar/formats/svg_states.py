"""The states in the flamegraph SVGs sidecar writes: each synthetic frame (``[idle]``,
``[blocked]``, ``[gil]``, ``[cpu_wait]``, ``[gc]``, and a task's ``[running]``, ``[ready]``,
``[waiting]``) filled in a colour of its own, the web UI's, where inferno gives every frame a
warm hue of the code's palette; and a legend under the graph of the states it shows.

The fills are the UI's (sidecar/serve/web/app.css, js/flame.js), defined here once for the SVG
writer: the Okabe–Ito hues, and the same light lines across blocked (striped), gil (hatched)
and cpu_wait (ruled), so that no state relies on its hue alone. A frame's title, its sample
range and the embedded stacks are left as they are: the SVG reads back as before. A
differential flamegraph keeps its reds and blues (``sidecar diff`` does not come here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sidecar.rules.frames import BLOCKED_LEAF, CPU_WAIT_LEAF, GC_FRAME, GIL_LEAF, IDLE_LEAF

#: A line across a fill's tile, from (x0, y0) to (x1, y1), in its pixels.
Line = tuple[float, float, float, float]


@dataclass(frozen=True)
class Fill:
    """How a state's frames are filled: a colour, crossed by light lines where ``lines``."""

    colour: str
    label: str
    #: the repeating tile, as js/flame.js draws it: its size, and white lines of this
    #: opacity and width
    size: int = 0
    alpha: float = 0.0
    width: float = 0.0
    lines: tuple[Line, ...] = ()
    #: its frames' names in white (the UI's dark fills)
    light_text: bool = False


#: Each synthetic frame's fill, as the UI draws it (tests/unit/test_svg_states.py holds the
#: UI's stylesheet and flamegraph to these).
FILLS: dict[str, Fill] = {
    IDLE_LEAF: Fill("#56b4e9", "idle: waiting for work"),
    BLOCKED_LEAF: Fill(
        "#c84f00",
        "blocked: off CPU elsewhere",
        size=8,
        alpha=0.28,
        width=2,
        lines=((-2, 10, 10, -2), (-2, 2, 2, -2), (6, 10, 10, 6)),
        light_text=True,
    ),
    GIL_LEAF: Fill(
        "#009e73",
        "gil: waiting for the GIL",
        size=8,
        alpha=0.3,
        width=1.5,
        lines=((-1, 9, 9, -1), (-1, -1, 9, 9)),
        light_text=True,
    ),
    CPU_WAIT_LEAF: Fill(
        "#7e57c2",
        "cpu_wait: waiting for a CPU",
        size=6,
        alpha=0.35,
        width=1,
        lines=((-1, 4.5, 7, 4.5),),
        light_text=True,
    ),
    GC_FRAME: Fill("#cc79a7", "gc: collecting garbage"),
    "[running]": Fill("#e69f00", "running: a task's step"),
    "[ready]": Fill("#d55e00", "ready: due, queued"),
    "[waiting]": Fill("#56b4e9", "waiting: on a future"),
}
#: The legend's row under the graph: its height, and a character's width in its 12 px
#: monospace (inferno's font), to lay the entries out.
LEGEND_HEIGHT = 18
CHAR_WIDTH = 7.3
SWATCH = 11
GAP = 14
CODE_NOTE = "code: warm hues"

# one drawn frame of inferno's: <g><title>NAME (COUNT samples, PCT%)</title><rect …/><text …>
_FRAME = re.compile(r"<g><title>(\[[a-z_]+\]) \([^<]*</title><rect [^>]*>(?:<text [^>]*>)?")
_FILL = re.compile(r' fill="[^"]*"')
_ROOT = re.compile(r'<svg [^>]*?width="(\d+)" height="(\d+)"[^>]*>')


def pattern_id(leaf: str) -> str:
    return "sidecar-" + leaf.strip("[]").replace("_", "-")


def fill_of(leaf: str) -> str:
    """What a frame of ``leaf`` is filled with: its colour, or its pattern."""
    fill = FILLS[leaf]
    return f"url(#{pattern_id(leaf)})" if fill.lines else fill.colour


def _pattern(leaf: str, fill: Fill) -> str:
    path = "".join(f"M{x0:g} {y0:g}L{x1:g} {y1:g}" for x0, y0, x1, y1 in fill.lines)
    return (
        f'<pattern id="{pattern_id(leaf)}" width="{fill.size}" height="{fill.size}" '
        f'patternUnits="userSpaceOnUse"><rect width="{fill.size}" height="{fill.size}" '
        f'fill="{fill.colour}"/><path d="{path}" stroke="#ffffff" '
        f'stroke-opacity="{fill.alpha:g}" stroke-width="{fill.width:g}"/></pattern>'
    )


def _frame(match: re.Match[str]) -> str:
    leaf = match[1]
    if leaf not in FILLS:
        return match[0]
    head, _, rest = match[0].partition("<rect ")
    rect, _, text = rest.partition(">")
    rect = _FILL.sub(f' fill="{fill_of(leaf)}"', rect, count=1)
    if text and FILLS[leaf].light_text:
        text = text.replace("<text ", '<text fill="#ffffff" ', 1)
    return f"{head}<rect {rect}>{text}"


def _legend(leaves: list[str], width: int, top: int) -> tuple[str, int]:
    """The legend's entries from ``top`` down, wrapped within ``width``: its SVG, its height."""
    parts, x, row = [], 10.0, 0
    entries = [(None, CODE_NOTE), *((leaf, FILLS[leaf].label) for leaf in leaves)]
    for leaf, label in entries:
        wide = (SWATCH + 5 if leaf else 0) + len(label) * CHAR_WIDTH
        if x > 10 and x + wide > width - 10:
            x, row = 10.0, row + 1
        base = top + row * LEGEND_HEIGHT + 12
        if leaf is not None:
            parts.append(
                f'<rect x="{x:g}" y="{base - 10}" width="{SWATCH}" height="{SWATCH}" '
                f'fill="{fill_of(leaf)}" data-state="{leaf.strip("[]")}"/>'
            )
            x += SWATCH + 5
        parts.append(f'<text x="{x:g}" y="{base}">{label}</text>')
        x += len(label) * CHAR_WIDTH + GAP
    return '<g id="sidecar-legend">' + "".join(parts) + "</g>", (row + 1) * LEGEND_HEIGHT


def paint_states(svg: str) -> str:
    """An inferno flamegraph with its synthetic frames in their states' fills and, where it
    has any, a legend of them in a row added under the graph."""
    shown = {match[1] for match in _FRAME.finditer(svg) if match[1] in FILLS}
    root = _ROOT.search(svg)
    at = svg.find('<svg id="frames"')
    if not shown or root is None or at < 0:
        return svg
    leaves = [leaf for leaf in FILLS if leaf in shown]
    width, height = int(root[1]), int(root[2])
    legend, extra = _legend(leaves, width, height)
    patterns = "".join(_pattern(leaf, FILLS[leaf]) for leaf in leaves if FILLS[leaf].lines)
    grown = str(height + extra)
    head = root[0].replace(f'height="{height}"', f'height="{grown}"', 1)
    head = head.replace(f'viewBox="0 0 {width} {height}"', f'viewBox="0 0 {width} {grown}"')
    body = svg[root.end() : at].replace(
        f'height="{height}" fill="url(#background)"', f'height="{grown}" fill="url(#background)"'
    )
    frames = _FRAME.sub(_frame, svg[at:])
    defs = f"<defs>{patterns}</defs>" if patterns else ""
    return svg[: root.start()] + head + body + defs + legend + frames
