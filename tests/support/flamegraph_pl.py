"""A test fixture: SVGs in the structure flamegraph.pl writes, made from a profile.

flamegraph.pl is not installed on the test machines, so this writes what its documented output looks
like: a ``<g>`` per frame with a ``<title>`` ("name (1,234 samples, 5.67%)", thousands separators,
XML escapes), a ``<rect>`` in pixels (``x``/``width`` with one decimal, integer ``y``, no ``fg:``
attributes) and a ``<text>`` label, inside ``<g id="frames">``, in hash order (shuffled here),
frames narrower than ``minwidth`` pixels left out, counts in titles multiplied by ``factor``.
It is written for the tests of sidecar's reader, not copied from flamegraph.pl.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from xml.sax.saxutils import escape

IMAGE_WIDTH = 1200
XPAD = 10
FRAME_HEIGHT = 16
FONT_SIZE = 12


@dataclass
class _Node:
    name: str
    depth: int
    start: int
    end: int


def _frames(stacks: dict[str, int]) -> tuple[list[_Node], int]:
    """Frames merged the flamegraph way: sorted stacks, equal prefixes share a frame."""
    nodes: list[_Node] = []
    open_: list[_Node] = []
    time = 0
    for stack in sorted(stacks):
        names = ["", *stack.split(";")]
        shared = 0
        while shared < len(open_) and shared < len(names) and open_[shared].name == names[shared]:
            shared += 1
        for node in open_[shared:]:
            node.end = time
        del open_[shared:]
        for depth in range(shared, len(names)):
            node = _Node(names[depth], depth, time, time)
            nodes.append(node)
            open_.append(node)
        time += stacks[stack]
    for node in open_:
        node.end = time
    return nodes, time


def flamegraph_pl_svg(
    stacks: dict[str, int],
    *,
    inverted: bool = False,
    minwidth: float = 0.1,
    factor: float = 1.0,
    countname: str = "samples",
    seed: int = 0,
    jitter: float = 0.0,
) -> str:
    """The SVG flamegraph.pl would draw for these folded stacks (frames in shuffled order)."""
    nodes, timemax = _frames(stacks)
    widthpertime = (IMAGE_WIDTH - 2 * XPAD) / timemax
    minwidth_time = minwidth / widthpertime
    nodes = [n for n in nodes if n.end - n.start >= minwidth_time]
    depthmax = max(n.depth for n in nodes)
    ypad1 = FONT_SIZE * 3
    ypad2 = FONT_SIZE * 2 + 10
    height = (depthmax + 1) * FRAME_HEIGHT + ypad1 + ypad2
    rng = random.Random(seed)
    rng.shuffle(nodes)
    out = [
        '<?xml version="1.0" standalone="no"?>',
        '<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" '
        '"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">',
        f'<svg version="1.1" width="{IMAGE_WIDTH}" height="{height}" onload="init(evt)" '
        f'viewBox="0 0 {IMAGE_WIDTH} {height}" xmlns="http://www.w3.org/2000/svg" '
        'xmlns:xlink="http://www.w3.org/1999/xlink">',
        "<!-- Flame graph stack visualization. -->",
        "<!-- NOTES:  -->",
        "<defs>",
        '\t<linearGradient id="background" y1="0" y2="1" x1="0" x2="0" >',
        '\t\t<stop stop-color="#eeeeee" offset="5%" />',
        "\t</linearGradient>",
        "</defs>",
        '<style type="text/css">',
        "\ttext { font-family:Verdana; font-size:12px; fill:rgb(0,0,0); }",
        "</style>",
        '<script type="text/ecmascript">',
        "<![CDATA[",
        '\t"use strict";',
        "\tfunction init(evt) { }",
        "]]>",
        "</script>",
        f'<rect x="0.0" y="0" width="{IMAGE_WIDTH}.0" height="{height}.0" '
        'fill="url(#background)"  />',
        f'<text id="title" x="{IMAGE_WIDTH / 2:.2f}" y="24" >Flame Graph</text>',
        f'<text id="details" x="{XPAD:.2f}" y="{height - 17}" > </text>',
        '<g id="frames">',
    ]
    for node in nodes:
        x1 = XPAD + node.start * widthpertime
        x2 = XPAD + node.end * widthpertime
        if inverted:
            y1 = ypad1 + node.depth * FRAME_HEIGHT
        else:
            y1 = height - ypad2 - (node.depth + 1) * FRAME_HEIGHT + 1
        y = y1 + (rng.uniform(-jitter, jitter) if jitter else 0)
        samples = round((node.end - node.start) * factor)
        samples_txt = f"{samples:,}"
        if node.depth == 0:
            info = f"all ({samples_txt} {countname}, 100%)"
        else:
            pct = 100 * samples / (timemax * factor)
            info = f"{escape(node.name)} ({samples_txt} {countname}, {pct:.2f}%)"
        width = f"{x2 - x1:.1f}"
        y_txt = f"{y:.1f}" if jitter else str(y1)
        out.append("<g >")
        out.append(
            f'<title>{info}</title><rect x="{x1:.1f}" y="{y_txt}" width="{width}" '
            f'height="15.0" fill="rgb(230,100,50)" rx="2" ry="2" />'
        )
        out.append(f'<text  x="{x1 + 3:.2f}" y="{y1 + 10.5}" ></text>')
        out.append("</g>")
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
