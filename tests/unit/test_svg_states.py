"""The states in the flamegraph SVGs sidecar writes: each synthetic frame in its state's fill,
the web UI's (its stylesheet's colours, its flamegraph's stripes, read from the files the UI
serves), a legend of the states shown, code frames in inferno's warm hues, and the SVG read
back exactly as before (a live recording: tests/live/test_svg_states.py)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sidecar.formats.export import export
from sidecar.formats.render import RenderOptions, render_svg
from sidecar.formats.svg import read_svg
from sidecar.formats.svg_counts import embed
from sidecar.formats.svg_states import FILLS, fill_of
from sidecar.profile import parse_folded

WEB = Path(__file__).resolve().parents[2] / "sidecar/serve/web"
NS = {"svg": "http://www.w3.org/2000/svg"}
LOOP = "main (app.py:1);run_forever (asyncio/base_events.py:600)"
ALL_STATES = f"""{LOOP};select (selectors.py:468);[idle] 500
{LOOP};handler (app.py:20);crunch (app.py:7) 300
{LOOP};handler (app.py:20);sleep (time.py:0);[blocked] 100
{LOOP};handler (app.py:20);[gil] 80
{LOOP};handler (app.py:20);[cpu_wait] 60
{LOOP};handler (app.py:20);crunch (app.py:7);[gc] 40
"""
TASKS = """main (app.py:1);serve (app.py:9);[running] 20
main (app.py:1);serve (app.py:9);[ready] 10
main (app.py:1);poll (app.py:30);[waiting] 70
"""


def frames(svg: bytes) -> list[tuple[str, str, str | None]]:
    """(name, its rect's fill, its text's fill) of each drawn frame."""
    root = ET.fromstring(svg)
    found = []
    for group in root.iterfind(".//svg:svg[@id='frames']/svg:g", NS):
        title = group.findtext("svg:title", default="", namespaces=NS)
        rect, text = group.find("svg:rect", NS), group.find("svg:text", NS)
        assert rect is not None
        found.append(
            (
                title.rsplit(" (", 1)[0],
                rect.get("fill", ""),
                text.get("fill") if text is not None else None,
            )
        )
    return found


def legend(svg: bytes) -> list[tuple[str, str, str]]:
    """(state, swatch fill, label) of each entry of the legend; [] without one."""
    root = ET.fromstring(svg)
    group = root.find(".//svg:g[@id='sidecar-legend']", NS)
    if group is None:
        return []
    entries, swatch = [], None
    for element in group:
        if element.tag.endswith("rect"):
            swatch = element
        elif swatch is not None:
            entries.append(
                (swatch.get("data-state", ""), swatch.get("fill", ""), element.text or "")
            )
            swatch = None
    return entries


def patterns(svg: bytes) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    return {p.get("id", ""): p for p in root.iterfind(".//svg:pattern", NS)}


def check_painted(svg: bytes) -> set[str]:
    """Every synthetic frame in its fill (white text on the dark ones), every code frame in
    inferno's rgb, and the legend naming exactly the states drawn; the states drawn."""
    shown = set()
    for name, fill, text in frames(svg):
        if name in FILLS:
            shown.add(name)
            assert fill == fill_of(name), (name, fill)
            assert (text == "#ffffff") == FILLS[name].light_text, (name, text)
        else:
            assert re.fullmatch(r"rgb\(\d+,\d+,\d+\)", fill), (name, fill)
    assert [entry[0] for entry in legend(svg)] == [s.strip("[]") for s in FILLS if s in shown]
    for state, fill, label in legend(svg):
        assert fill == fill_of(f"[{state}]") and label.startswith(f"{state}: "), (state, label)
    for leaf in shown:
        if FILLS[leaf].lines:
            pattern = patterns(svg)[fill_of(leaf)[5:-1]]
            rect = pattern.find("svg:rect", NS)
            assert rect is not None and rect.get("fill") == FILLS[leaf].colour
    return shown


def _option(body: str, key: str) -> float:
    """A number in the options of one of js/flame.js's ``stripes(...)`` calls."""
    found = re.search(rf"{key}: ([\d.]+)", body)
    assert found is not None, (key, body)
    return float(found[1])


def test_the_fills_are_the_web_uis() -> None:
    """The SVG writer's colours are the UI's stylesheet's and its flamegraph's, and its stripes
    are the flamegraph's tiles: the same size, lines, opacity and width."""
    css = dict(re.findall(r"--([a-z-]+): (#[0-9a-f]{6});", (WEB / "app.css").read_text()))
    for leaf, var in (("[idle]", "idle"), ("[blocked]", "blocked"), ("[gil]", "gil"),
                      ("[cpu_wait]", "cpu-wait"), ("[gc]", "gc")):  # fmt: skip
        assert FILLS[leaf].colour == css[var], leaf
    flame = (WEB / "js/flame.js").read_text()
    tasks = dict(re.findall(r'(\w+): "(#[0-9a-f]{6})"', flame.split("TASK_COLOURS = ")[1][:200]))
    assert set(tasks) == {"running", "ready", "waiting"}
    for state, colour in tasks.items():
        assert FILLS[f"[{state}]"].colour == colour, state
    consts = dict(re.findall(r'const (\w+_COLOUR) = "(#[0-9a-f]{6})";', flame))
    tiles = re.findall(r"this\.(\w+) = stripes\(this\.ctx, ([^,]+), \{(.*?)\}\);", flame, re.S)
    assert {name for name, _, _ in tiles} == {"stripes", "hatched", "ruled"}
    striped = {fill.colour: fill for fill in FILLS.values() if fill.lines}
    for name, colour, body in tiles:
        fill = striped[consts.get(colour, colour.strip('"'))]
        options = (_option(body, "size"), _option(body, "alpha"), _option(body, "lineWidth"))
        assert (fill.size, fill.alpha, fill.width) == options, name
        lines = re.findall(r"\[([-\d., ]+)\]", body)
        assert list(fill.lines) == [tuple(float(n) for n in line.split(",")) for line in lines]


def test_each_state_is_painted_with_a_legend_and_reads_back_exactly() -> None:
    profile = parse_folded(ALL_STATES)
    for inverted in (False, True):
        svg = export(profile, "svg", RenderOptions(title="states", inverted=inverted))
        assert check_painted(svg) == {"[idle]", "[blocked]", "[gil]", "[cpu_wait]", "[gc]"}
        assert len(patterns(svg)) == 3  # blocked, gil, cpu_wait: one tile each
        assert read_svg(svg).stacks == profile.stacks
        # the legend's row is under the graph: the document grew by it, frames stay put
        plain = render_svg(profile.folded_lines(), RenderOptions(title="states", inverted=inverted))
        height = lambda doc: int(ET.fromstring(doc).get("height", "0"))  # noqa: E731
        assert height(svg) == height(plain.encode()) + 18
        assert [f[0] for f in frames(svg)] == [f[0] for f in frames(plain.encode())]
    tasks = parse_folded(TASKS)
    svg = export(tasks, "svg", RenderOptions(title="tasks", count_name="task-samples"))
    assert check_painted(svg) == {"[running]", "[ready]", "[waiting]"}
    assert read_svg(svg).stacks == tasks.stacks


@pytest.mark.parametrize("width", [1200, 500])
def test_the_legend_wraps_within_the_width(width: int) -> None:
    svg = export(parse_folded(ALL_STATES), "svg", RenderOptions(width=width))
    root = ET.fromstring(svg)
    group = root.find(".//svg:g[@id='sidecar-legend']", NS)
    assert group is not None
    rows = {float(text.get("y", "0")) for text in group.iterfind("svg:text", NS)}
    assert len(rows) == (1 if width == 1200 else 3), rows
    for text in group.iterfind("svg:text", NS):
        assert float(text.get("x", "0")) + len(text.text or "") * 7.3 <= width - 10 + 1e-6


def test_a_profile_without_synthetic_frames_is_drawn_as_inferno_draws_it() -> None:
    profile = parse_folded(f"{LOOP};handler (app.py:20);crunch (app.py:7) 300\n")
    svg = export(profile, "svg", RenderOptions(title="code"))
    plain = render_svg(profile.folded_lines(), RenderOptions(title="code"))
    assert svg == embed(plain, profile.to_folded()).encode()
    assert legend(svg) == [] and not patterns(svg)
