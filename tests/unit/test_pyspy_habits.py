"""What a py-spy user types: py-spy's flags that mean something else here answered in one line
(a note for ``--idle``, exit 2 for the others), never the usage of the whole command."""

from __future__ import annotations

import pytest

from tests.support.helpers import sidecar

GONE = str(2**22 + 4321)  # no such process


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("--gil", "[gil] frame"),
        ("-g", "[gil] frame"),
        ("--native", "Python frames only"),
        ("-n", "Python frames only"),
        ("--subprocesses", "serve --match"),
        ("-s", "serve --match"),
    ],
)
def test_a_flag_that_means_something_else_is_answered_in_one_line(flag: str, says: str) -> None:
    result = sidecar("record", "-p", GONE, "-d", "1", flag)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sidecar: error: {flag} is py-spy's: "), lines
    assert says in lines[0]


def test_idle_is_a_note_and_the_run_goes_on() -> None:
    result = sidecar("record", "-p", GONE, "-d", "1", "--idle")
    assert result.returncode == 1  # on to the attach, which finds no such process
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("sidecar: note: --idle: idle samples are kept already"), lines
    assert len(lines) == 2 and "no process with PID" in lines[1], lines


def test_short_flags_and_nonblocking_are_taken() -> None:
    result = sidecar("record", "-p", GONE, "-d", "1", "-r", "50", "-f", "folded", "-t",
                     "--nonblocking")  # fmt: skip
    assert result.returncode == 1 and "no process with PID" in result.stderr, result.stderr
    both = sidecar("record", "-p", GONE, "--blocking", "--nonblocking")
    assert both.returncode == 2 and "choose one" in both.stderr


def test_a_pid_or_a_command_and_not_both() -> None:
    neither = sidecar("record", "-d", "1")
    assert neither.returncode == 2
    assert neither.stderr.strip().splitlines() == [
        "sidecar: error: give --pid PID, or -- COMMAND to start a program and sample it"
    ]
    both = sidecar("record", "-p", GONE, "--", "python3", "-c", "pass")
    assert both.returncode == 2 and "give --pid PID, or -- COMMAND" in both.stderr
