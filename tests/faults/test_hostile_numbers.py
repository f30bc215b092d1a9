"""Hostile numbers in profile files, through every command that reads them (``stats``,
``render``, ``diff`` on either side): counts of thousands of digits, counts past 2^64 or
wrapping it, counts that add up past what a profile holds, and the same in an SVG's titles,
``fg:x``/``fg:w``, coordinates and ``total_samples``. Each is refused in one line that names
the file and the bound (``sidecar.profile.MAX_SAMPLES``), with exit 1 and nothing written; one
bound, every reader."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from sidecar.profile import MAX_SAMPLES
from tests.support.faultkit import Entry, record
from tests.support.helpers import sidecar

pytestmark = pytest.mark.faults

GOOD = "a;b 3\na;c 5\n"
#: an inferno-style SVG of GOOD, as sidecar renders it (made once per test run)
SVG_OF_GOOD: dict[str, str] = {}

FOLDED: dict[str, str] = {
    "5,000 digits": f"a;b {'9' * 5000}\n",
    "4,000 digits": f"a;b {'9' * 4000}\n",
    "2^64 - 1 beside 5": f"a;b {2**64 - 1}\na;c 5\n",
    "2^64 + 1": f"a;b {2**64 + 1}\n",
    "counts adding up past the bound": f"a;b {MAX_SAMPLES}\na;c 1\n",
}
#: the same SVG without inferno's exact counts, read by its geometry and titles
GEOMETRIC = re.compile(r' fg:x="\d+" fg:w="\d+"')
SVG: dict[str, Callable[[str], str]] = {
    "fg:w of 5,000 digits": lambda s: s.replace('fg:w="3"', f'fg:w="{"9" * 5000}"', 1),
    "fg:x past the bound": lambda s: s.replace('fg:x="0"', f'fg:x="{2**64}"', 1),
    "a title's count of 5,000 digits":
        lambda s: s.replace("b (3 samples", f"b ({'9' * 5000} samples", 1),
    "a title's count of 400 digits and a fraction (no fg:)":
        lambda s: GEOMETRIC.sub("", s).replace("b (3 samples", f"b ({'9' * 400}.5 samples", 1),
    "a width of 1e400 (no fg:)":
        lambda s: GEOMETRIC.sub("", s).replace('width="37.5000%"', 'width="1e400%"', 1),
}  # fmt: skip
#: what the one line says, for each kind
SAID = re.compile(
    r"past the most a profile counts \(9,007,199,254,740,991\)|not a number it can hold"
)


def _refused(tmp_path: Path, bad: Path) -> int:
    """Every command on ``bad``: one line naming it and the bound, exit 1, nothing written.
    Returns how many commands were tried."""
    good = tmp_path / "good.folded"
    good.write_text(GOOD)
    out = tmp_path / "out.svg"
    runs = [
        ("stats", str(bad)),
        ("render", str(bad), "-o", str(out)),
        ("diff", str(bad), str(good), "-o", str(out)),
        ("diff", str(good), str(bad), "-o", str(out)),
    ]
    if bad.suffix == ".svg":
        runs.remove(("render", str(bad), "-o", str(out)))  # render takes folded text only
    for args in runs:
        result = sidecar(*args, timeout=60)
        lines = result.stderr.splitlines()
        assert result.returncode == 1, (args, result.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith(f"sidecar: error: {bad}"), (args, lines)
        assert SAID.search(lines[0]), (args, lines)
        assert not out.exists(), args
    return len(runs)


def test_hostile_numbers_are_refused_in_one_line_by_every_reader(tmp_path: Path) -> None:
    entry = Entry("hostile numbers in profile files", "hostile files", rounds=1)
    for name, text in FOLDED.items():
        bad = tmp_path / "bad.folded"
        bad.write_text(text)
        entry.inputs += _refused(tmp_path, bad)
        entry.fault(f"folded: {name}")
    good = tmp_path / "good.folded"
    good.write_text(GOOD)
    rendered = tmp_path / "good.svg"
    assert sidecar("render", str(good), "-o", str(rendered)).returncode == 0
    svg = rendered.read_text()
    assert 'fg:w="3"' in svg and "b (3 samples" in svg, "the rendering these cases edit"
    for name, edit in SVG.items():
        bad = tmp_path / "bad.svg"
        changed = edit(svg)
        assert changed != svg, name
        bad.write_text(changed)
        entry.inputs += _refused(tmp_path, bad)
        entry.fault(f"SVG: {name}")
    # a total_samples of 5,000 digits is no count read: said as a note, the profile stands
    bad = tmp_path / "total.svg"
    bad.write_text(svg.replace('total_samples="8"', f'total_samples="{"9" * 5000}"'))
    result = sidecar("stats", str(bad))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    entry.inputs += 1
    entry.note("every count past 2^53 - 1, alone or summed, refused in one line by each reader")
    record(entry)


def test_edges_of_the_command_line_are_refused_in_one_line(tmp_path: Path) -> None:
    """``record -d nan`` recorded until killed, ``--max-db-size 0`` meant no cap, and ``render``
    took a file with NUL bytes that ``stats`` refused: each is one line and exit 2 (a usage
    error) or 1 (a bad input), before anything starts."""
    entry = Entry("edges of the command line", "hostile files", rounds=1)
    for duration in ("nan", "inf", "-1", "0"):
        for command in (("record", "-p", "1", "-o", str(tmp_path / "r.svg")), ("stats", "-p", "1")):
            result = sidecar(*command, "-d", duration, timeout=30)
            lines = result.stderr.splitlines()
            assert result.returncode == 2, (command, duration, result.stderr)
            assert lines == [lines[0]] and "positive number of seconds" in lines[0], lines
            entry.inputs += 1
    for cap in ("0", "100", "63K"):
        result = sidecar("serve", "--db", str(tmp_path / "s.db"), "--max-db-size", cap, timeout=30)
        assert result.returncode == 2, (cap, result.stderr)
        assert "--max-db-size must be at least 64K" in result.stderr, result.stderr
        assert not (tmp_path / "s.db").exists()
        entry.inputs += 1
    nul = tmp_path / "nul.folded"
    nul.write_bytes(b"a;b 3\na\0;c 5\n")
    svg = tmp_path / "good.svg"
    good = tmp_path / "good.folded"
    good.write_text(GOOD)
    assert sidecar("render", str(good), "-o", str(svg)).returncode == 0
    for bad, said in ((nul, "binary data, not a profile"), (svg, "already a flamegraph SVG")):
        for command in (("render", str(bad), "-o", str(tmp_path / "out.svg")), ("stats", str(bad))):
            result = sidecar(*command, timeout=30)
            if command[0] == "stats" and bad == svg:
                assert result.returncode == 0, result.stderr  # stats reads an SVG as it is
                continue
            assert result.returncode == 1, (command, result.stderr)
            assert result.stderr.splitlines() == [f"sidecar: error: {bad}: " + said + (
                "; expected folded stacks, a flamegraph SVG, speedscope JSON or a gzipped "
                "pprof file" if bad == nul else
                "; render takes folded stacks, speedscope or pprof (stats and diff read SVGs "
                "as they are)"
            )], result.stderr  # fmt: skip
            assert not (tmp_path / "out.svg").exists()
            entry.inputs += 1
    entry.fault("nonsense durations, caps and inputs", entry.inputs)
    record(entry)
