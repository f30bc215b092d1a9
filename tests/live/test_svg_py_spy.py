"""The flamegraph SVG reader on a py-spy SVG of a live target, recorded as the test runs (the
round trips, golden files and hostile inputs: tests/unit/test_svg.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sidecar.formats.inputs import load_profile
from tests.support.helpers import LoadDriver, Spawner
from tests.support.py_spy_svg import PY_SPY, check_py_spy_svg

# --- py-spy's real SVGs ------------------------------------------------------------------------


@pytest.mark.slow
def test_py_spy_svg_of_a_live_target(spawn: Spawner, load: LoadDriver, tmp_path: Path) -> None:
    target = spawn.target("aiohttp_app")
    load.start(target.url + "/cpu?repeat=50", 6)
    out = tmp_path / "py-spy.svg"
    result = subprocess.run(
        [
            *(str(PY_SPY), "record", "--pid", str(target.pid), "--duration", "3"),
            *("-o", str(out), "--nonblocking"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    check_py_spy_svg(out)
    profile = load_profile(str(out))
    assert any("classify_path" in stack for stack in profile.stacks)
