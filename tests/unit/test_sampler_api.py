"""The native Sampler's refusals without a target (no such process, bad options), and its
render_svg and process_start_time (against real processes: tests/live/test_sampler.py)."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from sidecar import _native


def test_missing_process_is_a_process_lookup_error() -> None:
    with pytest.raises(ProcessLookupError, match="no process with PID"):
        _native.Sampler(2**22 + 12345)


@pytest.mark.parametrize(
    "kwargs",
    [{"rate_hz": 0}, {"rate_hz": -5}, {"window": 0}, {"reader": "gdb"}, {"clock": "wall"}],
)
def test_bad_options_are_value_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _native.Sampler(os.getpid(), **kwargs)


def test_render_svg_is_inferno_svg() -> None:
    svg = _native.render_svg(["a;b 3", "a;c 1"], title="T", inverted=True)
    assert svg.startswith("<?xml") and "<title>a (4 samples, 100.00%)</title>" in svg
    with pytest.raises(ValueError, match="palette"):
        _native.render_svg(["a 1"], palette="nope")


def test_process_start_time_tells_processes_apart() -> None:
    first = subprocess.Popen(["sleep", "5"])
    try:
        start = _native.process_start_time(first.pid)
        assert isinstance(start, int) and start > 0
    finally:
        first.kill()
        first.wait()
    assert _native.process_start_time(first.pid) is None
