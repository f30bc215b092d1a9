"""A cgroup v1 with a CPU quota, for the tests of a target at its CPU limit: a fresh group under
/sys/fs/cgroup/cpu limited to 0.2 CPU (``cpu.cfs_quota_us`` 20000 of ``cpu.cfs_period_us``
100000) and removed after, as the fixture ``limited`` (one test's) or ``limited_group`` (a
context manager, for a fixture of a module). It needs root and a writable v1 cpu hierarchy
there: without them the fixture fails in CI (``CI=true``) and skips elsewhere (``needed``), with
the reason either way; ``limited_group`` raises ``Unavailable`` with it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support.pythons import in_ci

CPU = Path("/sys/fs/cgroup/cpu")


class Unavailable(RuntimeError):
    """No cgroup can be made here; the message says why."""


def needed(reason: str) -> NoReturn:
    """A test without what it needs: fails in CI, skips elsewhere."""
    if in_ci():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@contextlib.contextmanager
def limited_group() -> Iterator[Path]:
    """A fresh v1 cpu cgroup with a quota of 0.2 CPU and a high weight, removed on leaving
    (every process still in it moved back to the root first); ``Unavailable`` when none can
    be made. A process goes in by writing its PID to ``cgroup.procs``."""
    if not (CPU / "cgroup.procs").is_file() or not os.access(CPU, os.W_OK):
        raise Unavailable(
            f"no writable cgroup v1 cpu hierarchy at {CPU}: run as root on a host that mounts "
            "the v1 cpu controller there"
        )
    group = CPU / f"sidecar-test-{os.getpid()}"
    try:
        group.mkdir()
    except OSError as err:
        raise Unavailable(f"cannot make a cgroup under {CPU}: {err}") from err
    try:
        (group / "cpu.cfs_period_us").write_text("100000\n")
        (group / "cpu.cfs_quota_us").write_text("20000\n")
        # A weight ten times the default, so the group gets its fifth of a CPU beside a
        # loaded host's other runnable processes: the quota, not the neighbours, binds it.
        (group / "cpu.shares").write_text("10240\n")
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # gone meanwhile
                (CPU / "cgroup.procs").write_text(f"{pid}\n")
        for _ in range(50):  # a process killed a moment ago may still be leaving it
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        else:
            group.rmdir()


@pytest.fixture
def limited() -> Iterator[Path]:
    """A fresh v1 cpu cgroup with a quota of 0.2 CPU and a high weight, removed after the test
    (every process still in it moved back to the root first)."""
    try:
        with limited_group() as group:
            yield group
    except Unavailable as err:
        needed(str(err))


def kernel_stat(group: Path) -> tuple[int, int, int]:
    """``nr_periods``, ``nr_throttled`` and ``throttled_time`` (ns), read straight."""
    values = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(values["nr_periods"]), int(values["nr_throttled"]), int(values["throttled_time"])
