"""The GIL and the garbage collector, on real interpreters 3.8 to 3.15 and real aiohttp, uvloop
and Tornado services: a loop starved by a thread that holds the GIL reads ``gil`` with that
thread named as holder; threads that let the GIL go cause no ``gil``; on 3.15 the share agrees
with CPython's own remote unwinder (``_remote_debugging``'s GIL_REQUESTED flag), sampled at the
same time; the collector's share agrees with the target's own clock of its collections.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sidecar import _native
from sidecar.analyze.threads import Analysis, analyze
from sidecar.classify.window import window_of
from sidecar.sample.record import Tally
from tests.support.helpers import LoadDriver, Proc, Spawner, sidecar
from tests.support.pprof_tool import pprof, tags
from tests.support.ptrace_only import AS_APP_USER, needs_setpriv, run_with_ptrace_only
from tests.support.pythons import each_version, interpreter

#: Seconds each case samples, and at what rate: 300 samples of the loop thread.
SECONDS = 1.5
RATE_HZ = 200


def _sampled(
    pid: int, seconds: float = SECONDS, blocking: bool = False
) -> tuple[Analysis, _native.SamplerStats]:
    """The loop's analysis of ``seconds`` of samples, with who held the GIL."""
    counts = Tally()
    with _native.Sampler(pid, rate_hz=RATE_HZ, blocking=blocking) as sampler:
        time.sleep(seconds)
        for window in sampler.drain(flush=True):
            counts.add(window_of(window))
        stats = sampler.stats()
    # torn reads of threads that run on as they are read: counted, never kept
    assert stats["errors"] <= 0.1 * stats["samples"], stats["last_error"]
    return analyze(counts.to_profile(), holders=counts.holders()), stats


def _gil_source(version: str) -> str:
    if version == "3.15":
        return "the thread states' flags"
    return "the GIL's holder, and the waiters' futex in /proc"


@each_version
def test_a_spinning_thread_starves_the_loop_and_a_sleeping_one_does_not(
    spawn: Spawner, version: str
) -> None:
    """Beside a thread spinning in Python, most of the loop's samples wait for the GIL, and
    the spinning thread holds it, in its function (before, they read idle or blocked). Beside
    one in ``time.sleep``, which lets the GIL go, the loop is idle, not waiting for it. The
    two targets are sampled at the same time."""
    python = interpreter(version)
    starved = spawn.target("gil", "--holder", "spin", python=python)
    beside_sleep = spawn.target("gil", "--holder", "sleep", python=python)
    with ThreadPoolExecutor(2) as pool:
        sampling = [pool.submit(_sampled, target.pid) for target in (starved, beside_sleep)]
        (analysis, stats), (quiet, _) = (future.result() for future in sampling)
    assert stats["gil"] == _gil_source(version)
    assert analysis.share("gil") > 0.5, analysis.states
    thread, site, _, _ = analysis.top_holders(1)[0]
    assert thread == "holder"
    assert site.startswith("spin (") and "targets/gil.py:" in site, site
    # the holder is named for nearly all of them (none only while the GIL is handed over)
    named = sum(n for (name, _), n in analysis.gil_holders.items() if name == "holder")
    assert named >= 0.9 * analysis.states["gil"], analysis.gil_holders
    assert quiet.share("gil") <= 0.02, quiet.states
    assert quiet.share("idle") > 0.8, quiet.states


@pytest.mark.parametrize("version", ["3.12", "3.15"])
def test_in_blocking_mode_a_starved_loop_reads_gil_too(spawn: Spawner, version: str) -> None:
    """Blocking mode stops the threads before it reads them: their run states and the futex a
    waiter sleeps in are read before the stop (a stopped thread's wait is cut short), so the
    loop reads gil as it does without stopping it (3.12: the futex; 3.15: the flags)."""
    target = spawn.target("gil", "--holder", "spin", python=interpreter(version))
    analysis, stats = _sampled(target.pid, blocking=True)
    assert stats["gil"] == _gil_source(version)
    assert analysis.share("gil") > 0.5, analysis.states
    assert analysis.top_holders(1)[0][0] == "holder", analysis.gil_holders


@pytest.mark.parametrize("holder", ["none", "recv"])
def test_no_thread_or_one_in_a_socket_read_causes_no_wait(spawn: Spawner, holder: str) -> None:
    target = spawn.target("gil", "--holder", holder)
    analysis, _ = _sampled(target.pid)
    assert analysis.share("gil") <= 0.02, analysis.states
    assert not analysis.gil_holders


@pytest.mark.parametrize(
    ("module", "args"),
    [("aiohttp_app", ()), ("aiohttp_app", ("--uvloop",)), ("tornado_app", ())],
    ids=["aiohttp", "aiohttp-uvloop", "tornado"],
)
def test_a_service_whose_thread_pool_crunches_waits_for_the_gil(
    spawn: Spawner, load: LoadDriver, module: str, args: tuple[str, ...]
) -> None:
    """Under load, /executor classifies in the loop's thread pool: the loop waits for the GIL
    the pool's threads hold, in the classifier; /sleep alone leaves it free."""
    service = spawn.target(module, *args)
    load.start(f"{service.url}/executor?repeat=2000", seconds=SECONDS + 2, connections=8)
    time.sleep(0.5)
    analysis, _ = _sampled(service.pid)
    assert analysis.share("gil") > 0.25, analysis.states
    thread, site, _, _ = analysis.top_holders(1)[0]
    assert thread in ("asyncio_*", "uvloop_*"), thread  # the default executor's threads, as one
    assert "targets/handlers.py:" in site, site
    load.close()
    load.start(f"{service.url}/sleep", seconds=SECONDS + 2, connections=8)
    time.sleep(0.5)
    quiet, _ = _sampled(service.pid)
    assert quiet.share("gil") <= 0.02, quiet.states


#: CPython 3.15's own remote unwinder sampling the loop thread: the share of its samples with
#: THREAD_STATUS_GIL_REQUESTED, printed at the end.
REFERENCE = textwrap.dedent(
    """
    import sys, time, _remote_debugging as rd
    pid, seconds, rate = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    unwinder = rd.RemoteUnwinder(pid, all_threads=True)
    waits = total = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            interpreters = unwinder.get_stack_trace()
        except (RuntimeError, OSError):
            continue
        for interpreter in interpreters:
            for thread in interpreter.threads:
                if thread.thread_id == pid:
                    total += 1
                    waits += bool(thread.status & rd.THREAD_STATUS_GIL_REQUESTED)
        time.sleep(1 / rate)
    print(waits / total if total else -1.0, total)
    """
)


def test_the_gil_share_agrees_with_cpythons_own_flag(spawn: Spawner) -> None:
    """On 3.15, the loop thread's gil share is within 0.1 of the share of the samples that
    CPython's ``_remote_debugging`` flags GIL_REQUESTED, sampling the same target at once."""
    python = interpreter("3.15")
    target = spawn.target("gil", "--holder", "spin", python=python)
    reference = subprocess.Popen(
        [str(python), "-c", REFERENCE, str(target.pid), str(SECONDS), str(RATE_HZ)],
        stdout=subprocess.PIPE,
        text=True,
    )
    analysis, _ = _sampled(target.pid)
    out, _ = reference.communicate(timeout=30)
    theirs, samples = out.split()
    assert int(samples) > 50, out
    assert abs(analysis.share("gil") - float(theirs)) <= 0.1, (analysis.states, theirs)


def _gc_clock(target: Proc) -> tuple[float, float]:
    target.popen.send_signal(signal.SIGUSR1)
    line = target.line()
    name, seconds, clock = line.split()
    assert name == "gc", line
    return float(seconds), float(clock)


@pytest.mark.parametrize("version", ["3.11", "3.15"])
def test_the_collectors_share_agrees_with_the_targets_own_clock(
    spawn: Spawner, version: str
) -> None:
    """The loop collects a large heap ten times a second and times each collection with
    ``gc.callbacks``: the share of its samples with a [gc] frame is within 25% of that clock's
    share of the same span."""
    target = spawn.target("gil", "--gc", python=interpreter(version))
    time.sleep(0.3)
    before = _gc_clock(target)
    analysis, _ = _sampled(target.pid, seconds=3.0)
    after = _gc_clock(target)
    clock = (after[0] - before[0]) / (after[1] - before[1])
    assert clock > 0.05, clock  # the collections are a real part of the loop's time
    assert analysis.gc_share == pytest.approx(clock, rel=0.25), (analysis.gc_samples, clock)
    assert analysis.states["gil"] == 0


#: A sampler of the PID in argv[1] for 1.5 s: where its GIL states came from, and the samples
#: read as waiting for the GIL of all.
_SAMPLE_WITH_PTRACE_ONLY = """
import json, sys, time
from sidecar import _native

with _native.Sampler(int(sys.argv[1]), rate_hz=200) as sampler:
    time.sleep(1.5)
    stats = sampler.stats()
    rows = [row for window in sampler.drain(flush=True) for row in window["stacks"]]
print(json.dumps({
    "gil": stats["gil"],
    "total": sum(row.count for row in rows),
    "waits": sum(row.count for row in rows if row.gil),
}))
"""


@needs_setpriv
def test_a_sampler_that_may_not_read_syscall_says_so_and_never_guesses(spawn: Spawner) -> None:
    """As the Kubernetes manifests deploy it (the app under a user of its own, sidecar with
    CAP_SYS_PTRACE its only capability), the target's /proc ``syscall`` files are closed to
    the sampler: before 3.15 nothing else tells a thread waiting for the GIL, so no sample
    reads as one, and the GIL's source says why."""
    target = spawn.target("gil", "--holder", "spin", prefix=AS_APP_USER)
    result = run_with_ptrace_only(_SAMPLE_WITH_PTRACE_ONLY, target.pid)
    assert result["gil"].startswith("the GIL's holder only: "), result
    assert result["total"] >= 200 and result["waits"] == 0, result


def test_gil_and_gc_frames_read_back_the_same_from_every_profile_file(
    spawn: Spawner, tmp_path: Path
) -> None:
    """A recording of a starved loop that collects garbage, written as folded text, SVG and
    pprof: ``stats`` of the folded and SVG files finds the same gil and gc samples as the
    recording, whose pprof labels the gil samples ``state=gil``."""
    target = spawn.target("gil", "--holder", "spin", "--gc")
    folded = tmp_path / "p.folded"
    done = sidecar("record", "--pid", str(target.pid), "--duration", "2", "--rate", "200",
                   "--format", "folded", "-o", str(folded))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(r"event loop: .* gil \d+\.\d% \(GIL held by 'holder' at spin \(", done.stderr)
    text = folded.read_text()
    assert ";[gil] " in text and ";[gc] " in text
    svg = tmp_path / "p.svg"
    assert sidecar("render", str(folded), "-o", str(svg)).returncode == 0
    shares = [json.loads(sidecar("stats", str(path), "--json").stdout)["targets"][0]
              for path in (folded, svg)]  # fmt: skip
    assert shares[0]["gil_share"] > 0.3 and shares[0]["gc_share"] > 0
    for key in ("samples", "gil_share", "gc_share", "busy_share"):
        assert shares[0][key] == shares[1][key], key
    # holders are known live only
    assert shares[0]["gil_holders"] == []
    profile = tmp_path / "p.pb.gz"
    done = sidecar("record", "--pid", str(target.pid), "--duration", "1", "--rate", "200",
                   "--format", "pprof", "-o", str(profile))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "gil" in tags(pprof(profile, "-tags"))["state"]
    waits = pprof(profile, "-top", "-tagfocus=state=gil", "-nodecount=50")
    assert "[gil]" in waits and "EpollSelector.select" in waits, waits
