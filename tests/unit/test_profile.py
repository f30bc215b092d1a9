"""Folded text in and out, and the export formats."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from sidecar.errors import ProfileFormatError
from sidecar.formats.export import export
from sidecar.profile import parse_folded

TEXT = (
    "a (x.py:1);b (x.py:2) 3\n"
    "a (x.py:1);c (x.py:3);[idle] 5\n"
    "\n"
    "# comment\n"
    "a (x.py:1);b (x.py:2) 1,000\n"
)


def test_parse_merges_repeated_stacks_and_reads_separators() -> None:
    profile = parse_folded(TEXT)
    assert profile.stacks == {"a (x.py:1);b (x.py:2)": 1003, "a (x.py:1);c (x.py:3);[idle]": 5}
    assert profile.total == 1008
    assert profile.marked


def test_round_trip_through_folded_text() -> None:
    profile = parse_folded(TEXT)
    assert parse_folded(profile.to_folded()).stacks == profile.stacks


@pytest.mark.parametrize("text", ["", "\n\n", "no count here\n", "a;b x\n"])
def test_bad_folded_text_is_refused(text: str) -> None:
    with pytest.raises(ProfileFormatError):
        parse_folded(text, source="f.txt")


def test_speedscope_export_weights_every_stack() -> None:
    profile = parse_folded(TEXT)
    doc = json.loads(export(profile, "speedscope"))
    frames = doc["shared"]["frames"]
    prof = doc["profiles"][0]
    assert prof["type"] == "sampled"
    assert sum(prof["weights"]) == profile.total
    stacks = {";".join(_frame_text(frames[i]) for i in s) for s in prof["samples"]}
    assert stacks == set(profile.stacks)


def _frame_text(frame: dict[str, object]) -> str:
    if "file" in frame:
        return f"{frame['name']} ({frame['file']}:{frame['line']})"
    return str(frame["name"])


def test_svg_export_is_xml_with_every_function() -> None:
    profile = parse_folded(TEXT)
    svg = export(profile, "svg").decode()
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    for name in ("a (x.py:1)", "b (x.py:2)", "[idle]"):
        assert name in svg
