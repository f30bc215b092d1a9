"""The asyncio task scan: real targets with a known tree of tasks under each CPython version
from 3.11, read by the real native scanner through the real CLI (``sidecar tasks``), and the
one-line refusal of older versions, which leaves the target running.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import ROOT, Spawner, proc_status, sidecar
from pythons import interpreter

TARGET = ROOT / "targets" / "tasks_tree.py"
SCANNED = ("3.11", "3.12", "3.13", "3.14", "3.15")


def await_lines(path: Path) -> dict[str, int]:
    """The line of each ``# await: NAME`` marker in a target's source."""
    lines: dict[str, int] = {}
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        match = re.search(r"# await: (\w+)", text)
        if match:
            lines[match[1]] = number
    return lines


@pytest.mark.parametrize("version", SCANNED)
def test_tasks_prints_the_known_tree(spawn: Spawner, version: str) -> None:
    target = spawn.target("tasks_tree", python=interpreter(version))
    at = await_lines(TARGET)
    result = sidecar("tasks", "--pid", str(target.pid))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    summary = lines[0]
    assert summary.startswith(f"PID {target.pid} · Python {version}."), summary
    # main, parent, child, spinner; the spinner is on the loop or queued behind its sleep(0)
    assert re.search(r"4 tasks: running [01] · ready [01] · waiting 3\b", summary), summary
    frame = "{} (targets/tasks_tree.py:{})"
    parent = lines.index("'parent' [waiting] awaits task 'child'")
    assert lines[parent + 1 : parent + 6] == [
        "    " + frame.format("parent", at["parent"]),
        "    └─ 'child' [waiting] awaits a Future",
        "           " + frame.format("worker", at["worker"]),
        "           " + frame.format("leaf_sleep", at["leaf_sleep"]),
        lines[parent + 5],
    ]
    assert re.fullmatch(r" {11}sleep \(asyncio/tasks\.py:\d+\)", lines[parent + 5])
    main = lines.index("'Task-1' [waiting] awaits a Future")
    assert lines[main + 1] == "    " + frame.format("main", at["main"])
    spinner = [i for i, line in enumerate(lines) if line.startswith("'spinner' [")]
    assert len(spinner) == 1
    # running: in burn(), called from its loop; ready: queued behind its sleep(0)
    where = {"'spinner' [running]": at["spinning"], "'spinner' [ready]": at["spinner"]}
    assert lines[spinner[0]] in where, lines[spinner[0]]
    assert lines[spinner[0] + 1] == "    " + frame.format("spinner", where[lines[spinner[0]]])


@pytest.mark.parametrize("version", ["3.9", "3.10"])
def test_older_versions_are_refused_in_one_line(spawn: Spawner, version: str) -> None:
    target = spawn.target("spin", "--sleep", python=interpreter(version))
    result = sidecar("tasks", "--pid", str(target.pid))
    assert result.returncode == 1
    assert result.stdout == ""
    expected = (
        f"sidecar: error: PID {target.pid}: asyncio tasks are read from CPython 3.11 on; "
        rf"this process runs Python {re.escape(version)}\.\d+\n"
    )
    assert re.fullmatch(expected, result.stderr), result.stderr
    assert proc_status(target.pid)["State"][0] in "RS", "the target was left stopped"


def test_a_missing_process_is_one_line() -> None:
    result = sidecar("tasks", "--pid", "4194305")
    assert result.returncode == 1
    assert result.stderr == "sidecar: error: no process with PID 4194305 (or it exited)\n"
