"""Every format sidecar writes, read back: round trips through each format's one writer and one
reader, sidecar's SVGs with their embedded stacks (and edited ones), pprof from Go's pprof, and
hostile pprof and speedscope files, each refused in one line (recordings read back:
tests/live/test_profiles_read_back.py)."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar import _native
from sidecar.errors import ProfileFormatError
from sidecar.formats.export import FORMATS, export
from sidecar.formats.inputs import parse_profile, sniff
from sidecar.formats.render import RenderOptions
from sidecar.profile import parse_folded
from tests.support.helpers import one_error_line, sidecar
from tests.support.pprof_tool import GO
from tests.unit.test_svg import GOLDEN_INPUT, STACKS

EMBEDDED = re.compile(r'(<metadata id="sidecar-folded"[^>]*>)(.*?)(</metadata>)', re.S)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks=STACKS, fmt=st.sampled_from(sorted(FORMATS)), width=st.sampled_from([0.1, 5.0]))
def test_every_format_reads_back_the_stacks_it_was_written_from(
    stacks: dict[str, int], fmt: str, width: float
) -> None:
    profile = parse_folded("".join(f"{s} {c}\n" for s, c in stacks.items()))
    data = export(profile, fmt, RenderOptions(min_width=width))
    assert sniff(data) == fmt
    assert parse_profile(data, source=f"x.{fmt}").stacks == profile.stacks


def _svg(min_width: float = 5.0) -> str:
    profile = parse_folded(GOLDEN_INPUT)
    return export(profile, "svg", RenderOptions(min_width=min_width)).decode()


def test_an_svg_whose_embedded_stacks_disagree_with_its_frames_is_read_from_its_frames() -> None:
    svg = _svg()
    exact = parse_profile(svg.encode())
    assert exact.stacks == parse_folded(GOLDEN_INPUT).stacks and not exact.notes
    # a count edited (1234 -> 1233 samples): the total no longer matches the drawn root
    edited = svg.replace(" 1234\n", " 1233\n")
    assert edited != svg
    profile = parse_profile(edited.encode(), source="e.svg")
    assert any("disagree with its frames" in note for note in profile.notes), profile.notes
    assert profile.total == exact.total
    # the same total moved from one drawn frame to another
    moved = svg.replace(" 1234\n", " 1233\n").replace(" 812\n", " 813\n")
    profile = parse_profile(moved.encode(), source="m.svg")
    assert any("'<module> (app.py:1);run" in note for note in profile.notes), profile.notes
    # text that is not folded stacks
    garbled = EMBEDDED.sub(r"\1not folded\3", svg, count=1)
    profile = parse_profile(garbled.encode(), source="g.svg")
    assert any("not folded text" in note for note in profile.notes), profile.notes
    # a second element of the same id is not read: the first one decides
    twice = svg.replace("</svg>\n", '<metadata id="sidecar-folded">main 1\n</metadata></svg>\n')
    assert parse_profile(twice.encode()).stacks == exact.stacks


def test_the_embedded_stacks_keep_xmls_special_characters_and_are_read_by_the_rules_of_xml(
    tmp_path: Path,
) -> None:
    svg = _svg(min_width=0)
    assert 'x &lt; y &amp; "quoted" (weird (name).py:3) 2' in svg
    # an entity in it is refused as anywhere in the document
    hostile = tmp_path / "h.svg"
    hostile.write_text(EMBEDDED.sub(r"\1&xxe;\3", svg, count=1))
    assert "&xxe;" in one_error_line(sidecar("stats", str(hostile)))


def test_a_pprof_file_go_rewrote_reads_as_sidecar_wrote_it(tmp_path: Path) -> None:
    profile = parse_folded(GOLDEN_INPUT)
    ours = tmp_path / "x.pb.gz"
    ours.write_bytes(export(profile, "pprof"))
    theirs = tmp_path / "go.pb.gz"
    done = subprocess.run(
        # Go's pprof shortens names like '<module>' when it symbolizes: it is asked not to
        [GO, "tool", "pprof", "-proto", "-symbolize=none", "-output", str(theirs), str(ours)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert theirs.read_bytes() != ours.read_bytes()
    read = parse_profile(theirs.read_bytes(), source=str(theirs))
    assert read.stacks == profile.stacks
    stats = sidecar("stats", str(theirs))
    assert stats.returncode == 0, stats.stderr
    assert "blocked 4.5%" in stats.stdout  # 97 of the loop's 2,145 samples


def _pprof(data: bytes) -> bytes:
    return gzip.compress(data)


HOSTILE_PPROF = {
    "truncated.pb.gz": (lambda good: good[: len(good) // 2], "gzip stream is corrupt"),
    "garbage.pb.gz": (lambda _: _pprof(b"\xff" * 64), "protobuf message is corrupt"),
    # field 2 (a sample) whose location 9 is not listed
    "unlisted.pb.gz": (lambda _: _pprof(bytes([0x12, 0x02, 0x08, 0x09])), "location 9"),
    "empty.pb.gz": (lambda _: _pprof(b""), "without sample types"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_PPROF))
def test_a_corrupt_pprof_file_is_refused_in_one_line(tmp_path: Path, name: str) -> None:
    good = export(parse_folded(GOLDEN_INPUT), "pprof")
    make, said = HOSTILE_PPROF[name]
    bad = tmp_path / name
    bad.write_bytes(make(good))
    line = one_error_line(sidecar("stats", str(bad)))
    assert said in line and str(bad) in line, line
    other = tmp_path / "good.folded"
    other.write_text(GOLDEN_INPUT)
    assert said in one_error_line(sidecar("diff", str(other), str(bad), "-o", "-"))


def test_a_pprof_files_indexes_are_checked_and_its_size_bounded_once_decompressed() -> None:
    good = gzip.decompress(export(parse_folded(GOLDEN_INPUT), "pprof"))
    # the first sample's first location id (field 2, then field 1 of it) set to 99
    at = good.index(b"\x12") + 2
    assert good[at] == 0x0A  # the packed location ids of the first sample
    broken = bytearray(good)
    broken[at + 2] = 99
    with pytest.raises(ValueError, match="location 99, which is not listed"):
        _native.decode_pprof(bytes(broken), max_bytes=1 << 20)
    bomb = gzip.compress(bytes(4 << 20))  # 4 MB of zeros in 4 kB
    with pytest.raises(ValueError, match="refused: more than 1 MB once decompressed"):
        _native.decode_pprof(bomb, max_bytes=1 << 20)


HOSTILE_SPEEDSCOPE = {
    "deep.json": ("[" * 100_000 + "]" * 100_000, "not JSON"),
    "list.json": ("[1, 2]", "no 'profiles' list"),
    "frames.json": ('{"profiles": [], "shared": {"frames": [{"name": 3}]}}', "frame 0 has no name"),
    "index.json": (
        '{"shared": {"frames": [{"name": "a"}]}, "profiles": [{"type": "sampled",'
        ' "samples": [[0, 5]], "weights": [1]}]}',
        "naming no listed frame",
    ),
    "weights.json": (
        '{"shared": {"frames": [{"name": "a"}]}, "profiles": [{"type": "sampled",'
        ' "samples": [[0]], "weights": [0.5]}]}',
        "not a whole number",
    ),
    "huge.json": (
        '{"shared": {"frames": [{"name": "a"}]}, "profiles": [{"type": "sampled",'
        ' "samples": [[0]], "weights": [1' + "0" * 30 + "]}]}",
        "past the most a profile counts",
    ),
    "evented.json": (
        '{"shared": {"frames": [{"name": "a"}]}, "profiles": [{"type": "evented", "events": []}]}',
        "evented profiles are not read",
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SPEEDSCOPE))
def test_a_hostile_speedscope_file_is_refused_in_one_line(tmp_path: Path, name: str) -> None:
    text, said = HOSTILE_SPEEDSCOPE[name]
    bad = tmp_path / name
    bad.write_text(text)
    line = one_error_line(sidecar("stats", str(bad)))
    assert said in line and str(bad) in line, line


def test_formats_are_told_by_content() -> None:
    assert sniff(gzip.compress(b"anything")) == "pprof"
    assert sniff(b'{"profiles": []}') == "speedscope"
    assert sniff(b"\n  {\n") == "speedscope"
    assert sniff(b"{lambda} (app.py:3);main 12\n") == "folded"
    with pytest.raises(ProfileFormatError, match="speedscope JSON or a gzipped pprof"):
        parse_profile(b"\x89PNG\r\n\x1a\n\0\0")
    doc = json.loads(export(parse_folded(GOLDEN_INPUT), "speedscope"))
    assert doc["profiles"][0]["type"] == "sampled"
