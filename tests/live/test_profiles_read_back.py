"""Profiles read back as they were written: every format ``record`` writes, ``stats`` and ``diff``
read, with the shares ``record`` printed; sidecar's SVGs exactly, whatever their minimum width;
any SVG's frames too narrow to draw counted as no state; and py-spy's SVGs, which tell no state
but the selector's wait, read as not telling the rest (the readers' hostile inputs:
tests/unit/test_read_formats.py)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.helpers import LoadDriver, Proc, Spawner, sidecar
from tests.support.py_spy_svg import PY_SPY

#: record's and stats' line of the loop's shares
STATES_LINE = re.compile(r"^event loop: .* of [\d,]+ samples.*$", re.M)
EMBEDDED = re.compile(r'<metadata id="sidecar-folded".*?</metadata>\n', re.S)
SUFFIXES = {"folded": ".folded", "svg": ".svg", "speedscope": ".json", "pprof": ".pb.gz"}


def _busy_and_blocked(spawn: Spawner, load: LoadDriver, *args: str) -> Proc:
    """The aiohttp demo, its loop busy in /cpu and blocked in /blocking's time.sleep: about 5%
    busy (4-5% here; with 3 repeats, 1.5%, a CI run once recorded no busy sample in 3 s)."""
    target = spawn.target("aiohttp_app", *args)
    load.start(target.url + "/cpu?repeat=300", 40, connections=1)
    load.start(target.url + "/blocking", 40, connections=1)
    target.get("/blocking")  # served: the loop is up, and the load under way beside it
    time.sleep(0.5)
    return target


def _shares_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    found = STATES_LINE.findall(result.stdout + result.stderr)
    assert len(found) == 1, result
    return str(found[0])


def _record(target: Proc, out: Path, fmt: str, seconds: str = "2") -> str:
    """Records ``target`` into ``out``; the shares line record printed of what it wrote."""
    result = sidecar("record", "--pid", str(target.pid), "-d", seconds, "-f", fmt, "-o", str(out))
    return _shares_line(result)


@pytest.mark.slow
def test_every_format_record_writes_stats_and_diff_read_as_recorded(
    spawn: Spawner, load: LoadDriver, tmp_path: Path
) -> None:
    target = _busy_and_blocked(spawn, load)
    files = {}
    for fmt, suffix in SUFFIXES.items():
        out = tmp_path / f"x{suffix}"
        said = _record(target, out, fmt, "3")
        assert "busy 0.0%" not in said and "blocked 0.0%" not in said, said
        # the file read back gives the shares of what was written, to the sample
        assert _shares_line(sidecar("stats", str(out))) == said, fmt
        files[fmt] = out
    # every pair of formats diffs, as profiles of the same service
    for before, after in (("pprof", "speedscope"), ("speedscope", "svg"), ("svg", "folded")):
        result = sidecar("diff", str(files[before]), str(files[after]), "-o", "-")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("<?xml"), result.stdout[:200]


@pytest.mark.slow
def test_sidecars_svgs_read_back_exactly_and_others_count_no_state_for_narrow_frames(
    spawn: Spawner, load: LoadDriver, tmp_path: Path
) -> None:
    target = _busy_and_blocked(spawn, load)
    folded = tmp_path / "x.folded"
    recorded = _record(target, folded, "folded", "3")
    truth = json.loads(sidecar("stats", str(folded), "--json").stdout)["targets"][0]
    for width in ("0.1", "2"):  # render's default minimum width, and a wide one
        svg = tmp_path / f"x-{width}.svg"
        result = sidecar("render", str(folded), "-o", str(svg), "--min-width", width)
        assert result.returncode == 0, result.stderr
        assert _shares_line(sidecar("stats", str(svg))) == recorded
        same = sidecar("diff", str(folded), str(svg), "--folded", "-")
        assert "states of" not in same.stderr and "no frame changed" in same.stderr, same.stderr
        # without the stacks it carries (as an older sidecar's SVG, or one rendered elsewhere),
        # the width of frames too narrow to draw is no state, and the reading says how much
        drawn = tmp_path / f"x-{width}-drawn.svg"
        drawn.write_text(EMBEDDED.sub("", svg.read_text(), count=1))
        assert drawn.stat().st_size < svg.stat().st_size
        result = sidecar("stats", str(drawn), "--json")
        read = json.loads(result.stdout)["targets"][0]
        if width == "2":
            assert read["pruned_share"] > 0 and "[pruned]" in result.stderr, result.stderr
            assert "not drawn" in _shares_line(sidecar("stats", str(drawn)))
        told = sum(read[f"{state}_share"] for state in ("busy", "idle", "blocked", "gil"))
        assert told + read["cpu_wait_share"] + read["untold_share"] == pytest.approx(1, abs=1e-3)
        # an off-CPU leaf is only ever lost with its frame, never gained
        for state in ("idle", "blocked", "gil", "cpu_wait"):
            assert read[f"{state}_share"] <= truth[f"{state}_share"], (state, width)


def _py_spy_idle_svg(target: Proc, out: Path) -> None:
    result = subprocess.run(
        [
            *(str(PY_SPY), "record", "--idle", "-f", "flamegraph", "--pid", str(target.pid)),
            *("--duration", "3", "--rate", "50", "-o", str(out), "--nonblocking"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_py_spy_svgs_say_what_they_do_not_tell(
    spawn: Spawner, load: LoadDriver, tmp_path: Path, loop: str
) -> None:
    target = spawn.target("aiohttp_app", *(["--uvloop"] if loop == "uvloop" else []))
    load.start(target.url + "/blocking", 30, connections=2)
    # what the loop did, as sidecar samples it: mostly blocked in time.sleep
    live = json.loads(sidecar("stats", "--pid", str(target.pid), "-d", "2", "--json").stdout)
    assert live["targets"][0]["blocked_share"] > 0.5, live
    svg = tmp_path / "py-spy.svg"
    _py_spy_idle_svg(target, svg)
    line = _shares_line(sidecar("stats", str(svg)))
    read = json.loads(sidecar("stats", str(svg), "--json").stdout)["targets"][0]
    # no figure for busy or blocked: py-spy's file does not tell them (it read busy ~90% before)
    assert re.search(r"\bbusy \d", line) is None and re.search(r"\bblocked \d", line) is None
    assert read["busy_share"] is None and read["blocked_share"] is None
    if loop == "asyncio":  # the selector's wait is in the file: idle is told
        assert "busy, blocked, gil, cpu_wait: not told by this file" in line, line
        assert read["idle_share"] is not None and read["idle_share"] < 0.5
    else:  # uvloop polls in C: not even idle is
        assert "busy, idle, blocked, gil, cpu_wait: not told by this file" in line, line
        assert read["idle_share"] is None and read["untold_share"] == 1.0
