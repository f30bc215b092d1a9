"""What a py-spy user types: py-spy's flags that mean something else here answered in one line
(a note for ``--idle``, exit 2 for the others), never the usage of the whole command, the same
way by every command that reads a process; a command that takes the flag keeps it."""

from __future__ import annotations

import pytest

from sidecar.cli import build_parser
from sidecar.commands.habits import ANSWERS
from tests.support.helpers import sidecar

GONE = str(2**22 + 4321)  # no such process


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("--gil", "[gil] frame"),
        ("-g", "[gil] frame"),
        ("--native", "Python frames only"),
        ("-n", "Python frames only"),
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
    assert lines[0].startswith("sidecar: note: --idle: idle threads are kept already"), lines
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


#: The commands that read a process, and py-spy's flags among ANSWERS they take themselves.
READERS = {"record": ("-s", "--subprocesses"), "top": ("-s", "--subprocesses"),
           "dump": ("-s", "--subprocesses"), "tasks": (), "stats": ()}  # fmt: skip


def test_dump_answers_native_as_record_does() -> None:
    """``dump --native`` got argparse's "unrecognized arguments" under the usage of all of
    sidecar; it is answered in the line ``record`` gives."""
    lines = {
        command: sidecar(command, "-p", GONE, "--native").stderr.strip().splitlines()
        for command in ("record", "dump")
    }
    assert lines["dump"] == lines["record"], lines
    assert lines["dump"] == [
        "sidecar: error: --native is py-spy's: sidecar reads Python frames only; C and Rust "
        "frames are not read"
    ]


@pytest.mark.parametrize("command", sorted(READERS))
def test_every_command_that_reads_a_process_answers_py_spys_flags(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    for flags, goes_on, _ in ANSWERS:
        for flag in flags:
            if flag in READERS[command]:
                args = parser.parse_args([command, "-p", GONE, flag])  # its own option
                assert args.subprocesses is True
                continue
            if goes_on:
                parser.parse_args([command, "-p", GONE, flag])
                said = capsys.readouterr().err.splitlines()
                assert said == [said[0]] and said[0].startswith(f"sidecar: note: {flag}: ")
                continue
            with pytest.raises(SystemExit) as ended:
                parser.parse_args([command, "-p", GONE, flag])
            assert ended.value.code == 2
            said = capsys.readouterr().err.splitlines()
            assert len(said) == 1 and said[0].startswith(f"sidecar: error: {flag} is py-spy's: ")
            if flag in ("-s", "--subprocesses"):
                assert f"`sidecar {command}` reads one process" in said[0], said
