"""A large profile file: a million unique stacks, 38 MB of folded text (benchmarks/stacks.py,
the shape of issue 49's file). ``stats`` reads it in a fresh process whose peak RSS (its own,
by GNU time: ``benchmarks.inputs.run``) stays within 4x the file, and counts every sample.
What it costs in time beside ``render``: benchmarks/REPORT-inputs.md (tests assert no
timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.inputs import run
from benchmarks.stacks import write_folded
from tests.support.faultkit import Entry, record
from tests.support.procs import PYTHON

pytestmark = pytest.mark.faults

STACKS = 1_000_000
#: The most memory a command may take, of the input it reads (the issue's goal).
WITHIN = 4.0


def test_stats_of_a_million_stacks_stays_within_four_times_the_file(tmp_path: Path) -> None:
    path = tmp_path / "million.folded"
    size = write_folded(path, STACKS, seed=1, depth=(1, 2), fanout=600, short=True)
    samples = 0
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            samples += int(line.rsplit(" ", 1)[1])
    out = tmp_path / "stats.json"
    figures = run([PYTHON, "-m", "sidecar", "stats", str(path), "--json"], out)
    target = json.loads(out.read_text())["targets"][0]
    # no thread runs an event loop: the shares are of every sample of the file
    assert target["samples"] == samples and target["loop"] == "unknown", target
    assert target["idle_share"] > 0 and target["blocked_share"] > 0, target
    peak = figures["peak"]
    assert peak <= WITHIN * size, f"peak RSS {peak / 2**20:.0f} MB for {size / 2**20:.0f} MB"
    entry = Entry("stats of a million unique stacks", "hostile files", rounds=1, inputs=1)
    entry.note(
        f"{STACKS:,} stacks, {size / 2**20:.1f} MB: peak RSS {peak / 2**20:.0f} MB "
        f"({peak / size:.2f}x the file), {samples:,} samples counted"
    )
    record(entry)
