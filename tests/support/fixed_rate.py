"""Fixed-rate load (``targets/load.py``) and in-process recordings for the analysis tests."""

from __future__ import annotations

import select
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from sidecar.profile import Profile
from sidecar.sample.record import record
from tests.support.helpers import PYTHON, ROOT, Spawner


def start_load(spawn: Spawner, url: str, rate: float, seconds: float) -> subprocess.Popen[str]:
    """Drives ``url`` at ``rate`` requests per second; stops by itself after ``seconds`` (plus
    a short warm-up), and with the test at the latest."""
    popen = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "targets.load",
            url,
            "--rate",
            str(rate),
            "--duration",
            str(seconds),
            "--warmup",
            "0.5",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    spawn.procs.append(popen)
    return popen


def wait_measuring(popen: subprocess.Popen[str], timeout: float = 60.0) -> None:
    """Waits for the load tool's ``measuring`` line: its users run at the asked rate."""
    assert popen.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([popen.stderr], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = popen.stderr.readline()
        if not line:
            raise RuntimeError(f"the load tool exited: {popen.wait()}")
        if line.startswith("measuring "):
            return
    raise TimeoutError("the load tool did not start measuring")


def profile_under_load(
    spawn: Spawner,
    pid: int,
    url: str,
    *,
    rate: float,
    seconds: float = 3.0,
    rate_hz: float = 200.0,
    extra: tuple[tuple[str, float], ...] = (),
) -> Profile:
    """A sidecar recording of ``pid`` (the real sampler) while ``url`` is driven at ``rate``;
    ``extra`` adds (url, rate) loads running alongside."""
    loads = [(url, rate), *extra]
    return profiles_under_load(spawn, [pid], loads, seconds=seconds, rate_hz=rate_hz)[0]


def profiles_under_load(
    spawn: Spawner,
    pids: Sequence[int],
    loads: Sequence[tuple[str, float]],
    *,
    seconds: float = 3.0,
    rate_hz: float = 200.0,
) -> list[Profile]:
    """Recordings of several processes at the same time, while every (url, rate) of ``loads``
    is driven: whatever else runs on the machine then weighs on all of them alike."""
    running = [start_load(spawn, url, rate, seconds + 1.0) for url, rate in loads]
    for load in running:
        wait_measuring(load)
    with ThreadPoolExecutor(max_workers=len(pids)) as pool:
        recordings = list(
            pool.map(lambda pid: record(pid, duration=seconds, rate_hz=rate_hz), pids)
        )
    for load in running:
        load.wait(timeout=30)
    profiles = []
    for rec in recordings:
        profile = rec.counts.to_profile()
        profile.target = rec.target
        profile.rate_hz = rate_hz
        profiles.append(profile)
    return profiles
