"""Discovery against real targets: framework, loop, Python version, command line, identity (the
rules on given text and this interpreter: tests/unit/test_discover.py)."""

from __future__ import annotations

import sys

import pytest

from sidecar import _native
from sidecar.classify.process import framework_from_frames, loop_from_frames
from sidecar.discover import (
    describe,
)
from sidecar.errors import TargetGone
from tests.support.fixed_rate import profile_under_load
from tests.support.helpers import Spawner

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
