"""Discovery against real processes: framework, loop, Python version, command line, identity."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sidecar import _native
from sidecar.discover import (
    describe,
    framework_from_frames,
    framework_from_maps,
    looks_like_python,
    loop_from_frames,
    python_version_from_maps,
    read_proc,
    read_proc_or_empty,
)
from sidecar.errors import TargetError, TargetGone
from tests.support.fixed_rate import profile_under_load
from tests.support.helpers import Spawner, wait_until

VARIANTS = [
    ("aiohttp_app", (), "aiohttp", "asyncio"),
    ("aiohttp_app", ("--uvloop",), "aiohttp", "uvloop"),
    ("tornado_app", (), "tornado", "asyncio"),
    ("tornado_app", ("--uvloop",), "tornado", "uvloop"),
]
IDS = ["aiohttp", "aiohttp-uvloop", "tornado", "tornado-uvloop"]


def stat_field_22(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[19])


@pytest.mark.parametrize(("module", "args", "framework", "loop"), VARIANTS, ids=IDS)
def test_every_variant_is_told_from_its_maps_and_from_its_frames(
    spawn: Spawner, module: str, args: tuple[str, ...], framework: str, loop: str
) -> None:
    target = spawn.target(module, *args)
    info = describe(target.pid)
    assert (info.framework, info.loop, info.framework_source) == (framework, loop, "maps")
    assert info.python_version == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"targets.{module}" in info.cmdline
    assert (info.pid, info.start_time) == (target.pid, stat_field_22(target.pid))
    # the frames of a live recording under load say the same, on their own
    path = "/sleep"
    profile = profile_under_load(spawn, target.pid, target.url + path, rate=40, seconds=1.5)
    assert framework_from_frames(profile.stacks) == framework
    assert loop_from_frames(profile.stacks) == loop
    refined = describe(target.pid, profile.stacks)
    assert (refined.framework, refined.loop, refined.framework_source) == (
        framework,
        loop,
        "frames",
    )


def test_a_reused_pid_is_not_the_same_process(spawn: Spawner) -> None:
    target = spawn.target("aiohttp_app")
    info = describe(target.pid)
    target.popen.terminate()
    target.popen.wait(timeout=10)
    assert _native.process_start_time(target.pid) != info.start_time
    with pytest.raises(TargetGone):
        describe(target.pid)


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
