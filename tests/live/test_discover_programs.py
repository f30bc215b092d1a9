"""Discovery of a running program that is not Python, and of its PID once it exited (the rules
on given text and on this interpreter's own /proc: tests/unit/test_discover.py)."""

from __future__ import annotations

import pytest

from sidecar.discover import describe, looks_like_python, read_proc, read_proc_or_empty
from sidecar.errors import TargetGone
from tests.support.programs import running_cat


def test_a_process_that_is_not_python() -> None:
    with running_cat() as cat:
        info = describe(cat.pid)
    assert (info.pid, info.framework, info.python_version) == (cat.pid, "unknown", "")
    assert info.cmdline == "cat"


def test_a_program_is_read_by_the_rules_while_it_runs_and_once_gone() -> None:
    """A live program that is not Python is not taken for one; once it exited, its PID is a
    TargetGone to read, and empty to a scan."""
    with running_cat() as cat:
        assert read_proc(cat.pid, "cmdline") == "cat\x00"
        assert not looks_like_python(cat.pid)
    with pytest.raises(TargetGone, match=f"no process with PID {cat.pid}"):
        read_proc(cat.pid, "maps")
    assert read_proc_or_empty(cat.pid, "cmdline") == ""
    assert not looks_like_python(cat.pid)
