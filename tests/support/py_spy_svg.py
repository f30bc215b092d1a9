"""py-spy's flamegraph SVGs: its binary, and the check that sidecar reads one exactly (the
golden one of tests/unit/test_svg.py and a live one of tests/live/test_svg_py_spy.py)."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from sidecar.formats.render import RenderOptions, render_svg
from sidecar.formats.svg import read_flamegraph, read_svg, to_profile

PY_SPY = Path(sys.executable).with_name("py-spy")


def _render(stacks: dict[str, int], **options: object) -> bytes:
    lines = [f"{s} {c}" for s, c in stacks.items()]
    return render_svg(lines, RenderOptions(**options)).encode()  # type: ignore[arg-type]


def svg_titles(svg: Path) -> tuple[int, list[tuple[str, int]]]:
    """(total_samples, [(title name, title count)]) read independently with ElementTree."""
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    frames_el = next(e for e in root.iter(f"{ns}svg") if e.get("id") == "frames")
    total = int(frames_el.get("total_samples", "0"))
    out = []
    for group in frames_el.iter(f"{ns}g"):
        title = group.find(f"{ns}title")
        assert title is not None and title.text is not None
        match = re.fullmatch(r"(.*) \(([\d,]+) samples?, [\d.]+%\)", title.text, re.S)
        assert match, title.text
        out.append((match[1], int(match[2].replace(",", ""))))
    return total, out


def check_py_spy_svg(svg: Path) -> None:
    total, titles = svg_titles(svg)
    graph = read_flamegraph(svg.read_bytes(), str(svg))
    assert graph.exact  # py-spy's SVGs are inferno's, with fg:x / fg:w
    profile = to_profile(graph, str(svg))
    # The stacks read back add up to the SVG's total.
    assert total > 0
    assert profile.total == total == graph.total
    # Every frame's count is the one in its title.
    assert sorted((f.name, f.count) for f in graph.frames) == sorted(titles)
    # The profile rendered again reads back identically.
    for inverted in (False, True):
        again = read_svg(_render(profile.stacks, min_width=0, inverted=inverted))
        assert again.stacks == profile.stacks
