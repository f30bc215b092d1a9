"""The sampler waits for a CPU too: a real asyncio loop (on a CPU 30 ms of every 100), sampled
by ``stats --json`` and ``record`` while a bounded competing load takes the sampler's CPU from
it. The load is a real-time spinner sharing that one CPU with the sampler, 25 ms on and 75 ms
off, so the sampler misses about a fifth of its ticks on any host, loaded or not (spinners of
the normal class do not: beside 8 of them on 2 cores the sampler missed 0 to 28% of its ticks,
the kernel running a thread that sleeps between short runs, as the sampler does, soon after it
wakes). It takes a quarter of that CPU from the rest of the host for 12 s at most. The target
runs on the other CPUs, outside the load.

- ``stats --json``'s ``sampling`` block counts the ticks missed as the sampler did, gives the
  kernel's share of the span the loop thread was on a CPU and runnable (its ``kernel`` block's
  seconds over the span), and its ``note`` says so beside the sampled shares, in figures.
- ``record``'s summary has the same line right after the shares, its figures those of its
  ticks line.

The same arithmetic on hand-made recordings: tests/unit/test_sampling_bias.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from sidecar.analyze.stats import MISSED_NOTED
from tests.support.helpers import Spawner
from tests.support.procs import PYTHON, ROOT
from tests.support.stats_schema import SCHEMA

#: an asyncio loop whose one task spins 30 ms (wall clock) and sleeps 70 ms
DUTY = """\
import asyncio, time

def spin(until):
    while time.monotonic() < until:
        sum(range(100))

async def main():
    while True:
        spin(time.monotonic() + 0.03)
        await asyncio.sleep(0.07)

asyncio.run(main())
"""
#: a real-time (SCHED_FIFO) spinner on one CPU, 25 ms on and 75 ms off, for LIFE s at most;
#: exit status 3 when the kernel does not let it be real-time
BURSTS = """\
import os, sys, time
cpu, life = int(sys.argv[1]), float(sys.argv[2])
os.sched_setaffinity(0, {cpu})
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
except OSError:
    sys.exit(3)
end = time.monotonic() + life
while time.monotonic() < end:
    t = time.monotonic() + 0.025
    while time.monotonic() < t:
        pass
    time.sleep(0.075)
"""
NOTE = re.compile(
    r"the sampler missed (?P<missed>[\d,]+) of (?P<due>[\d,]+) ticks \((?P<pct>\d+)%\), waiting "
    r"for a CPU itself, so the shares may be off: by the kernel the event loop was on a CPU "
    r"(?P<on>[\d.]+)% of the span \(busy (?P<busy>[\d.]+)% by samples\) and runnable "
    r"(?P<run>[\d.]+)% \(busy and cpu_wait (?P<sampled_run>[\d.]+)%\)"
)
SECONDS = 2.5


def run_on(cpu: int, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, its every thread on ``cpu``."""
    return subprocess.run(
        [PYTHON, "-m", "sidecar", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )


@pytest.mark.slow
def test_a_sampler_kept_from_its_cpu_says_so_beside_the_shares(
    spawn: Spawner, tmp_path: Path
) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: the target could not run outside the sampler's load")
    loaded = cpus[-1]  # not CPU 0, which other live tests pin spinners to
    script = tmp_path / "duty.py"
    script.write_text(DUTY)
    target = subprocess.Popen(
        [sys.executable, str(script)],
        preexec_fn=lambda: os.sched_setaffinity(0, set(cpus) - {loaded}),
        text=True,
    )
    spawn.procs.append(target)
    bursts = spawn.command(sys.executable, "-S", "-c", BURSTS, str(loaded), "12")
    time.sleep(1.5)  # started, its interpreter set up for the attach
    if bursts.poll() == 3:
        pytest.skip("the kernel refuses a real-time spinner here")
    assert target.poll() is None and bursts.poll() is None

    result = run_on(loaded, "stats", "--pid", str(target.pid), "-d", str(SECONDS), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    one = doc["targets"][0]
    sampling, kernel = one["sampling"], one["kernel"]
    figures = f"sampling {sampling}, kernel {kernel}"
    assert sampling["missed_share"] >= MISSED_NOTED, figures
    assert sampling["missed_share"] == pytest.approx(
        sampling["missed"] / (sampling["ticks"] + sampling["missed"]), abs=1e-4
    )
    # the kernel's shares are its seconds of the loop thread over the span
    loop = kernel["loop_threads"]
    assert sampling["kernel_on_cpu_share"] == pytest.approx(
        loop["on_cpu_s"] / kernel["span_s"], abs=0.002
    ), figures
    assert sampling["kernel_runnable_share"] == pytest.approx(
        (loop["on_cpu_s"] + loop["waiting_s"]) / kernel["span_s"], abs=0.002
    ), figures
    # the loop spins 30 ms of every 100 by the clock: runnable that long at least (more when
    # the other CPUs are busy and it waits for one)
    assert sampling["kernel_runnable_share"] > 0.2, figures
    note = NOTE.fullmatch(sampling["note"] or "")
    assert note is not None, figures
    assert int(note["missed"].replace(",", "")) == sampling["missed"]
    assert int(note["due"].replace(",", "")) == sampling["ticks"] + sampling["missed"]
    assert float(note["on"]) == pytest.approx(100 * sampling["kernel_on_cpu_share"], abs=0.051)
    assert float(note["run"]) == pytest.approx(100 * sampling["kernel_runnable_share"], abs=0.051)
    assert float(note["busy"]) == pytest.approx(100 * one["busy_share"], abs=0.051)
    assert float(note["sampled_run"]) == pytest.approx(
        100 * (one["busy_share"] + one["cpu_wait_share"]), abs=0.11
    )

    out = tmp_path / "p.folded"
    result = run_on(loaded, "record", "--pid", str(target.pid), "-d", str(SECONDS), "-f",
                    "folded", "-o", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    line = next((line for line in lines if line.startswith("ticks ")), "")
    ticks = re.match(
        r"ticks ([\d,]+) in .* · errors ([\d,]+) · late [\d,]+ · missed ([\d,]+) · ", line
    )
    assert ticks is not None, result.stderr
    taken = int(ticks[1].replace(",", "")) + int(ticks[2].replace(",", ""))
    missed = int(ticks[3].replace(",", ""))
    shares = next(i for i, line in enumerate(lines) if line.startswith("event loop: "))
    note = NOTE.fullmatch(lines[shares + 1])
    assert note is not None, result.stderr
    assert (note["missed"], note["due"]) == (f"{missed:,}", f"{taken + missed:,}"), result.stderr
    assert missed >= MISSED_NOTED * (taken + missed), result.stderr
    print(figures)
    print(lines[shares + 1])
