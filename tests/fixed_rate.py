"""Fixed-rate load (``targets/load.py``) and in-process recordings for the analysis tests."""

from __future__ import annotations

import subprocess
import time

from helpers import PYTHON, ROOT, Spawner

from sidecar.profile import Profile
from sidecar.sample import record


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
        stderr=subprocess.DEVNULL,
        text=True,
    )
    spawn.procs.append(popen)
    return popen


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
    loads = [start_load(spawn, url, rate, seconds + 1.0)]
    loads += [start_load(spawn, other, other_rate, seconds + 1.0) for other, other_rate in extra]
    time.sleep(1.2)  # locust's start-up and warm-up
    rec = record(pid, duration=seconds, rate_hz=rate_hz)
    for load in loads:
        load.wait(timeout=30)
    profile = rec.counts.to_profile()
    profile.target = rec.target
    profile.rate_hz = rate_hz
    return profile
