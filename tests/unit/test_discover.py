"""Discovery's rules on given /proc text and on this interpreter's own /proc; no process is
started (the real targets: tests/live/test_discover_targets.py; a program that is not Python,
running and gone: tests/live/test_discover_programs.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sidecar.classify.process import framework_from_frames, loop_from_frames
from sidecar.discover import (
    describe,
    framework_from_maps,
    looks_like_python,
    python_version_from_maps,
    read_proc,
    read_proc_or_empty,
)
from sidecar.errors import TargetError, TargetGone


def test_this_interpreter_is_python_without_a_framework() -> None:
    info = describe(os.getpid())
    assert info.python_version == f"{sys.version_info.major}.{sys.version_info.minor}"


SITE = "/srv/venv/lib/python3.12/site-packages"
MAPS = (
    "7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0\n"
    f"7f02-7f03 r-xp 0 08:01 2 {SITE}/aiohttp/_http_parser.cpython-312-x86_64-linux-gnu.so\n"
    f"7f04-7f05 r-xp 0 08:01 3 {SITE}/tornado/speedups.abi3.so\n"
)


def test_maps_rules() -> None:
    assert python_version_from_maps(MAPS) == "3.12"
    # a Tornado server using aiohttp's client maps both: Tornado is the server
    assert framework_from_maps(MAPS) == "tornado"
    assert framework_from_maps(MAPS.splitlines()[1]) == "aiohttp"
    assert framework_from_maps("") == "unknown"
    assert loop_from_frames({}) == "unknown" and framework_from_frames({}) == "unknown"


def test_proc_is_read_by_one_rule() -> None:
    """A process gone, or a file that cannot be read, is a TargetError (never a bare OSError);
    what a scan only looks at reads as empty instead."""
    assert looks_like_python(os.getpid())
    assert f"\nPid:\t{os.getpid()}\n" in read_proc(os.getpid(), "status")
    # no process has the PID pid_max: the kernel hands out PIDs below it
    gone = int(Path("/proc/sys/kernel/pid_max").read_text())
    with pytest.raises(TargetGone, match=f"no process with PID {gone}"):
        read_proc(gone, "maps")
    assert read_proc_or_empty(gone, "cmdline") == ""
    assert not looks_like_python(gone)
    # a file of a live process that cannot be read as text: the memory, at address 0
    with pytest.raises(TargetError, match=f"cannot read /proc/{os.getpid()}/mem"):
        read_proc(os.getpid(), "mem")
    assert read_proc_or_empty(os.getpid(), "mem") == ""
