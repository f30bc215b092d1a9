"""Discovery's rules on given /proc text, this interpreter and a process that is not Python (the
real targets: tests/live/test_discover_targets.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

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
from tests.support.helpers import wait_until


def test_a_process_that_is_not_python() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.1)
        info = describe(sleeper.pid)
        assert (info.framework, info.python_version) == ("unknown", "")
        assert info.cmdline == "sleep 30"
    finally:
        sleeper.kill()
        sleeper.wait()


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
    sleeper = subprocess.Popen(["sleep", "30"])

    def started() -> bool:
        return read_proc(sleeper.pid, "cmdline") == "sleep\x0030\x00"

    try:
        assert wait_until(started, timeout=10)
        assert not looks_like_python(sleeper.pid)
        assert looks_like_python(os.getpid())
    finally:
        sleeper.kill()
        sleeper.wait()
    with pytest.raises(TargetGone, match=f"no process with PID {sleeper.pid}"):
        read_proc(sleeper.pid, "maps")
    assert read_proc_or_empty(sleeper.pid, "cmdline") == ""
    assert not looks_like_python(sleeper.pid)
    # a file of a live process that cannot be read as text: the memory, at address 0
    with pytest.raises(TargetError, match=f"cannot read /proc/{os.getpid()}/mem"):
        read_proc(os.getpid(), "mem")
    assert read_proc_or_empty(os.getpid(), "mem") == ""
