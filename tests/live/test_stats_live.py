"""``sidecar stats`` as the real CLI, live and from files recorded of real targets (folded, SVG,
plain py-spy), its JSON checked with the strict schema of tests/support/stats_schema.py, and
the table."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from sidecar.formats.export import export
from sidecar.formats.render import RenderOptions
from sidecar.rules.frames import STATES
from tests.support.fixed_rate import profile_under_load, start_load, wait_measuring
from tests.support.helpers import Spawner, sidecar
from tests.support.stats_schema import SCHEMA


def stats_json(*args: str) -> dict[str, Any]:
    result = sidecar("stats", *args, "--json")
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    # every test here reads a target that was sampled: its shares, and its framework's, are
    # of samples, and the five states sum to 1 (each rounded to 4 places)
    assert doc["targets"] and doc["frameworks"], doc
    for shares in [*doc["targets"], *doc["frameworks"].values()]:
        assert shares["samples"] > 0, shares
        total = sum(shares[f"{state}_share"] for state in STATES)
        assert abs(total - 1) < 1e-3, shares
    return doc


@pytest.mark.slow
def test_live_stats_json_of_aiohttp_on_uvloop(spawn: Spawner) -> None:
    target = spawn.target("aiohttp_app", "--uvloop")
    wait_measuring(start_load(spawn, target.url + "/sleep", rate=50, seconds=4))
    doc = stats_json("--pid", str(target.pid), "--duration", "2")
    (one,) = doc["targets"]
    assert (one["pid"], one["framework"], one["loop"]) == (target.pid, "aiohttp", "uvloop")
    assert one["samples"] >= 150
    assert one["idle_share"] > 0.5
    assert set(doc["frameworks"]) == {"aiohttp"}
    assert doc["frameworks"]["aiohttp"]["samples"] == one["samples"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One recording of Tornado serving /sleep-old, /blocking and /cpu, written as folded and SVG.

    The loop is on CPU for a fraction of a percent of the time with /sleep-old and /blocking
    alone (none of 301 samples was busy in one run); /cpu at 10 req/s, about 8 ms of Python
    each, gives the busy lines of the table samples of their own."""
    spawner = Spawner()
    out = tmp_path_factory.mktemp("recorded")
    try:
        target = spawner.target("tornado_app")
        profile = profile_under_load(
            spawner,
            target.pid,
            target.url + "/sleep-old",
            rate=100,
            rate_hz=100,
            extra=((target.url + "/blocking", 6), (target.url + "/cpu?repeat=2000", 10)),
        )
    finally:
        spawner.close()
    paths = {"folded": out / "rec.folded", "svg": out / "rec.svg"}
    for fmt, path in paths.items():
        path.write_bytes(export(profile, fmt, RenderOptions(title="tornado")))
    return paths


@pytest.mark.slow
def test_stats_of_the_svg_equal_stats_of_the_folded_file(recorded: dict[str, Path]) -> None:
    from_folded = stats_json(str(recorded["folded"]))
    from_svg = stats_json(str(recorded["svg"]))
    assert from_svg == from_folded
    (one,) = from_folded["targets"]
    assert (one["framework"], one["loop"]) == ("tornado", "asyncio")
    assert one["blocked_share"] > 0.05


@pytest.mark.slow
def test_table_names_the_blocking_call_and_top_functions(recorded: dict[str, Path]) -> None:
    result = sidecar("stats", str(recorded["svg"]))
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith("profile: tornado on asyncio")
    assert "event loop: busy " in text and "stack depth (Python frames, busy samples)" in text
    assert "  above the loop entry: mean " in text and "busy time in: framework " in text, text
    assert "top functions, self time" in text and "top functions, total time" in text, text
    blocking = text.split("top blocking call sites", 1)[1].splitlines()
    assert blocking[1].startswith("blocking_sleep (targets/handlers.py:"), text


@pytest.mark.slow
def test_a_plain_py_spy_profile_tells_idle_and_no_other_state(
    spawn: Spawner, tmp_path: Path
) -> None:
    pyspy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if pyspy is None:
        pytest.skip("py-spy CLI not installed")
    target = spawn.target("aiohttp_app")
    out = tmp_path / "plain.txt"
    argv = [pyspy, "record", "--pid", str(target.pid), "--duration", "2", "--idle"]
    argv += ["--nonblocking", "--format", "raw", "--output", str(out)]
    subprocess.run(
        argv,
        check=True,
        capture_output=True,
        timeout=60,
    )
    result = sidecar("stats", str(out), "--json")
    assert result.returncode == 0, result.stderr
    # a file without sidecar's leaves tells idle (the selector's wait) and no other state
    assert "the other states are not told by this file" in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    (one,) = doc["targets"]
    assert one["framework"] == "aiohttp" and one["blocked_share"] is None, one
    assert one["idle_share"] > 0.8, one  # the idle server waits in the selector
    table = sidecar("stats", str(out))
    assert "not told by this file" in table.stdout, table.stdout
