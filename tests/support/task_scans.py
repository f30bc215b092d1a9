"""Task scans of real targets through the CLI, shared by the task tests (tests/live/test_tasks.py,
test_task_chains.py, test_task_shares.py, tests/serve/test_serve_tasks.py): the await sites a
target's source marks, ``sidecar record --tasks``, and the counts of a folded task profile."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from sidecar.rules.tasks import TASK_LEAVES
from tests.support.helpers import sidecar


def await_lines(path: Path) -> dict[str, int]:
    """The line of each ``# await: NAME`` marker in a target's source."""
    lines: dict[str, int] = {}
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        match = re.search(r"# await: (\w+)", text)
        if match:
            lines[match[1]] = number
    return lines


def record_tasks(
    pid: int, out: Path, duration: float, rate: int = 47
) -> subprocess.CompletedProcess[str]:
    """``sidecar record --tasks`` of ``pid`` into ``out`` as folded stacks (the task profile
    beside it, ``NAME.tasks.folded``), scanning at ``rate`` Hz, 47 unless told (each scan at a
    random instant of its period, so the targets' cycles, 40 ms requests and 10 Hz tickers,
    meet them at every phase)."""
    return sidecar(
        "record",
        "--pid",
        str(pid),
        "--duration",
        f"{duration:g}",
        "--tasks",
        "--task-rate",
        str(rate),
        "--format",
        "folded",
        "-o",
        str(out),
    )


def task_counts(path: Path) -> dict[str, int]:
    """A folded task profile: every line ends in a state's leaf."""
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        assert stack.rsplit(";", 1)[-1] in TASK_LEAVES, line
        counts[stack] = counts.get(stack, 0) + int(count)
    return counts
