"""The sampler waits for a CPU too: when it missed many of its ticks, ``record``'s summary and
``stats`` set the sampled shares beside the kernel's own count of the same threads, and
``stats --json`` gives both in its ``sampling`` block. Recordings made by hand, no process
(the same under a real competing load: tests/live/test_sampling_bias.py)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from sidecar.analyze.stats import MISSED_NOTED, Sampling, TargetStats, stats_document
from sidecar.analyze.threads import analyze
from sidecar.commands.record import summary
from sidecar.profile import Target
from sidecar.sample.record import KernelReading, Recording, SampleKey, Tally
from tests.support.stats_schema import SCHEMA

LOOP = (
    "main (app.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:607)"
    ";BaseEventLoop._run_once (asyncio/base_events.py:1884)"
)
IDLE = f"{LOOP};EpollSelector.select (selectors.py:468)"
BUSY = f"{LOOP};Handle._run (asyncio/events.py:80);spin (app.py:9)"
LOOP_TID, POOL_TID = 100, 101
SPAN_S = 3.0


def recording(
    *,
    ticks: int = 86,
    missed: int = 206,
    on_cpu_s: float = 1.14,
    waiting_s: float = 0.72,
    states: dict[str, int] | None = None,
    schedstat: bool = True,
) -> Recording:
    """A recording of a loop thread (and an idle pool thread, which no loop share counts):
    its states per tick, the sampler's counters, and the kernel's counters of both threads
    at either end (``schedstat`` False: a kernel that keeps none, its wait never moving)."""
    states = states or {"busy": 27, "cpu_wait": 20, "idle": 39}
    stacks = {SampleKey(LOOP_TID, state, BUSY if state != "idle" else IDLE): n
              for state, n in states.items() if n}  # fmt: skip
    stacks[SampleKey(POOL_TID, "idle", "worker (pool.py:1);wait (threading.py:1)")] = ticks
    counts = Tally(stacks=stacks, thread_names={LOOP_TID: "MainThread", POOL_TID: "pool"})
    ns = 1_000_000_000
    wait = int(waiting_s * ns) if schedstat else 0
    before = {LOOP_TID: (5 * ns, 2 * ns if schedstat else 0), POOL_TID: (ns, 0)}
    after = {
        LOOP_TID: (5 * ns + int(on_cpu_s * ns), before[LOOP_TID][1] + wait),
        POOL_TID: (ns + ns // 100, 0),
    }
    stats: Any = {
        "samples": ticks,
        "errors": 0,
        "late": ticks // 2,
        "missed": missed,
        "retried": 0,
        "lag_mean": 0.2,
        "lag_max": 0.878,
        "reader": "walker (Python 3.11.7, offsets from table)",
        "on_cpu": "os",
        "gil": "the GIL's holder",
        "cpu_wait": "schedstat",
        "last_error": None,
    }
    return Recording(
        counts=counts,
        target=Target(pid=4242, cmdline="python app.py", python_version="3.11.7"),
        rate_hz=100.0,
        stats=stats,
        exited=False,
        interrupted=False,
        elapsed=SPAN_S,
        kernel_before=KernelReading(before, None),
        kernel_after=KernelReading(after, None),
    )


def document(rec: Recording) -> dict[str, Any]:
    analysis = analyze(rec.counts.to_profile(), holders=rec.counts.holders())
    doc = stats_document([TargetStats(analysis, None, [], rec.kernel_json(), Sampling.of(rec))])
    jsonschema.validate(doc, SCHEMA)
    return doc


def test_many_ticks_missed_set_the_shares_beside_the_kernels() -> None:
    rec = recording()
    lines = summary(rec)
    shares = next(i for i, line in enumerate(lines) if line.startswith("event loop: "))
    # 86 ticks taken, 206 missed; the loop thread ran 1.14 s of 3 s and waited 0.72 s; its
    # samples read busy 27 of 86, busy or cpu_wait 47 of 86
    assert lines[shares + 1] == (
        "the sampler missed 206 of 292 ticks (71%), waiting for a CPU itself, so the shares may "
        "be off: by the kernel the event loop was on a CPU 38.0% of the span (busy 31.4% by "
        "samples) and runnable 62.0% (busy and cpu_wait 54.7%)"
    )
    sampling = document(rec)["targets"][0]["sampling"]
    assert sampling == {
        "rate_hz": 100.0,
        "ticks": 86,
        "missed": 206,
        "late": 43,
        "missed_share": 0.7055,
        "lag_max_s": 0.878,
        "kernel_on_cpu_share": 0.38,
        "kernel_runnable_share": 0.62,
        "note": lines[shares + 1],
    }


def test_the_line_is_left_out_when_no_tick_or_few_were_missed() -> None:
    for missed in (0, 4):  # 4 of 404: under MISSED_NOTED, as a quiet host misses
        rec = recording(ticks=400, missed=missed, states={"busy": 120, "idle": 280})
        assert Sampling.of(rec).missed_share < MISSED_NOTED
        assert not any("the sampler missed" in line for line in summary(rec))
        sampling = document(rec)["targets"][0]["sampling"]
        assert sampling["note"] is None and sampling["missed"] == missed
        assert sampling["kernel_on_cpu_share"] == 0.38  # the kernel's share is given anyway
    # at the threshold, the line is there
    rec = recording(ticks=95, missed=5, states={"busy": 30, "idle": 65})
    assert any(line.startswith("the sampler missed 5 of 100 ticks (5%)") for line in summary(rec))


def test_thousands_are_separated_as_on_the_ticks_line() -> None:
    rec = recording(ticks=1_200, missed=3_400, states={"busy": 400, "idle": 800})
    lines = summary(rec)
    assert lines[0].startswith("ticks 1,200 in 3.0 s")
    assert any(line.startswith("the sampler missed 3,400 of 4,600 ticks (74%)") for line in lines)


def test_without_the_kernels_counters_the_line_says_they_were_not_read() -> None:
    rec = recording(schedstat=False)
    note = Sampling.of(rec).note(analyze(rec.counts.to_profile()))
    assert note == (
        "the sampler missed 206 of 292 ticks (71%), waiting for a CPU itself, so the shares may "
        "be off (the kernel's counters of the threads could not be read to check them)"
    )
    sampling = document(rec)["targets"][0]["sampling"]
    assert sampling["kernel_on_cpu_share"] is None and sampling["note"] == note


def test_a_profile_file_has_no_sampling_block() -> None:
    analysis = analyze(recording().counts.to_profile())
    doc = stats_document([analysis])
    jsonschema.validate(doc, SCHEMA)
    assert doc["targets"][0]["sampling"] is None


def test_the_kernels_shares_are_per_sampled_thread() -> None:
    """Without an event loop the shares are of every sampled thread: the kernel's seconds are
    summed over them and divided by the span of each."""
    rec = recording(states={"busy": 40, "idle": 46})
    loopless = {SampleKey(k.thread_id, k.state, k.stack.replace(LOOP, "main (app.py:1)")): n
                for k, n in rec.counts.stacks.items()}  # fmt: skip
    rec.counts.stacks = loopless
    sampling = Sampling.of(rec)
    assert sampling.threads == 2
    # (1.14 + 0.01) s on a CPU over 2 threads of 3 s
    assert sampling.on_cpu_share == pytest.approx(1.15 / 6)
    assert "by the kernel the threads were on a CPU 19.2%" in (
        sampling.note(analyze(rec.counts.to_profile())) or ""
    )
