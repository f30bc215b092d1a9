"""Profiles read back as they were written: py-spy's SVGs, which tell no state but the
selector's wait, read as not telling the rest."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import LoadDriver, Proc, Spawner, sidecar
from tests.support.py_spy_svg import PY_SPY

#: record's and stats' line of the loop's shares
STATES_LINE = re.compile(r"^event loop: .* of [\d,]+ samples.*$", re.M)


def _shares_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    found = STATES_LINE.findall(result.stdout + result.stderr)
    assert len(found) == 1, result
    return str(found[0])


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
