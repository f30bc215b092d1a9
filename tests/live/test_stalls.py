"""Stalls of real event loops, found by the real sampler: aiohttp (asyncio and uvloop) and
Tornado services whose /freeze route holds the loop a known time (in ``time.sleep``, in Python
code, in garbage collections, or waiting for the GIL another thread holds), called on a
schedule; callbacks of the same code back to back on every version the walker reads; and the
same through ``record`` and ``stats --json``.

A stall's length is measured from the samples' own times, so it may be off by a period at
either end (and by how late a tick was read: the sampler's own worst lag is allowed for).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from sidecar.classify.stalls import Stall
from sidecar.sample.record import Recording, record
from tests.support.helpers import Proc, Spawner, running_state, sidecar
from tests.support.pythons import WALKED, interpreter
from tests.support.stats_schema import SCHEMA

RATE_HZ = 100
#: /freeze calls one after another, each (how, ms) with a pause after it; then two at once.
SCHEDULE = (("sleep", 150), ("spin", 250), ("sleep", 350))
AT_ONCE = ("sleep", 200)
#: what each way of freezing reads as, and the function named at fault
READS = {"sleep": ("blocked", "freeze_sleep"), "spin": ("busy", "freeze_spin")}


def _recorded(target: Proc, seconds: float, drive: Callable[[], None]) -> Recording:
    """``seconds`` of samples of ``target`` while ``drive`` runs beside, started once sampling
    has begun."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            time.sleep(0.3)
            drive()
        except BaseException as error:  # handed to the test
            errors.append(error)

    driver = threading.Thread(target=run, daemon=True)
    rec = record(target.pid, duration=seconds, rate_hz=RATE_HZ, on_attach=lambda _: driver.start())
    driver.join(timeout=30)
    assert not errors, errors
    return rec


def _tolerance(rec: Recording) -> float:
    """Two periods, and the latest tick's lag."""
    return 2 / RATE_HZ + rec.stats["lag_max"]


def _freeze(target: Proc, how: str, ms: float, held: list[float] | None = None) -> None:
    """Calls /freeze; ``held`` gets how long it held the loop by the target's own clock (a
    loaded machine makes sleeps end late)."""
    said = target.get(f"/freeze?how={how}&ms={ms:g}", timeout=30).decode()
    match = re.match(r"froze the loop ([\d.]+) ms", said)
    assert match, said
    if held is not None:
        held.append(float(match[1]) / 1000)


def _one_stall_by_stats(
    target: Proc, freeze: tuple[str, float, list[float]], at: float, seconds: float
) -> dict[str, Any]:
    """The one stall ``stats --json`` finds over ``seconds`` of ``target``, frozen (``_freeze``'s
    how, ms, held) ``at`` seconds in; the document checked against its schema."""
    timer = threading.Timer(at, _freeze, args=(target, *freeze))
    timer.start()
    result = sidecar("stats", "--pid", str(target.pid), "--duration", f"{seconds:g}", "--json")
    timer.join()
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    (stall,) = doc["targets"][0]["stalls"]
    return dict(stall)


def _schedule(target: Proc, held: list[float]) -> None:
    for how, ms in SCHEDULE:
        _freeze(target, how, ms, held)
        time.sleep(0.25)
    both = [threading.Thread(target=_freeze, args=(target, *AT_ONCE, held)) for _ in range(2)]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    time.sleep(0.25)
    # a loop kept busy by many short requests (a few ms each) has no stall
    until = time.monotonic() + 0.8

    def short_requests() -> None:
        while time.monotonic() < until:
            target.get("/cpu?repeat=100")

    clients = [threading.Thread(target=short_requests) for _ in range(4)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()


@pytest.mark.parametrize(
    ("module", "args"),
    [("aiohttp_app", ()), ("aiohttp_app", ("--uvloop",)), ("tornado_app", ())],
    ids=["aiohttp", "aiohttp-uvloop", "tornado"],
)
def test_each_freeze_of_a_schedule_is_one_stall_of_its_length(
    spawn: Spawner, module: str, args: tuple[str, ...]
) -> None:
    target = spawn.target(module, *args)
    held: list[float] = []
    rec = _recorded(target, 4.4, lambda: _schedule(target, held))
    # On a loaded host a short request kept from its CPU holds the loop too: such a stall
    # reads cpu_wait in the request's own code, not in a freeze (seen beside other suites).
    stalls = [
        s
        for s in rec.counts.stalls()
        if not (s.state == "cpu_wait" and not s.site.startswith("freeze_"))
    ]
    expected = [*SCHEDULE, AT_ONCE, AT_ONCE]
    found = [(s.state, round(s.duration_s, 3), s.site) for s in stalls]
    assert len(stalls) == len(expected) == len(held), (found, held)
    # the two at once end in either order: their lengths are compared as a pair
    held[-2:] = sorted(held[-2:], key=lambda h: abs(h - stalls[-2].duration_s))
    for stall, (how, ms), truth in zip(stalls, expected, held, strict=True):
        state, function = READS[how]
        held_by = (state,)
        if state == "busy":  # a spin on a loaded host may wait for its CPU most of the time
            state, held_by = running_state(stall.states), ("busy", "cpu_wait")
        assert abs(stall.duration_s - truth) <= _tolerance(rec), (found, held, how, ms)
        assert (stall.state, stall.ongoing) == (state, False), found
        assert stall.site.startswith(f"{function} (targets/handlers.py:"), found
        assert stall.callback and stall.thread == "MainThread", stall
        assert sum(stall.states[s] for s in held_by) > 0.9 * stall.duration_s, stall
    # the two sent at once were served one after the other: two stalls, end to start
    first, second = stalls[-2:]
    assert second.start - first.end < _tolerance(rec), found


def test_a_gil_stall_names_the_holder_and_a_collection_reads_gc(spawn: Spawner) -> None:
    target = spawn.target("aiohttp_app")

    held: list[float] = []

    def drive() -> None:
        # starts the thread that holds the GIL (a stall of some 50 ms: none), whose name the
        # sampler reads within a second
        _freeze(target, "gil", 30)
        time.sleep(1.2)
        _freeze(target, "gil", 300)
        time.sleep(0.3)
        _freeze(target, "gc", 250, held)

    rec = _recorded(target, 3.8, drive)
    found = [(s.state, round(s.duration_s, 3), s.site, s.holder) for s in rec.counts.stalls()]
    assert len(found) == 2, found
    gil, gc = rec.counts.stalls()
    # the loop waited for the GIL most of it, held by the thread summing in one C call
    assert gil.state == "gil" and gil.states["gil"] > 0.6 * gil.duration_s, gil
    assert gil.site.startswith("hold_gil (targets/handlers.py:"), gil
    assert gil.holder == "holder", gil
    assert gc.state == "gc" and gc.states["gc"] > 0.8 * gc.duration_s, gc
    assert gc.site.startswith("freeze_gc (targets/handlers.py:"), gc
    assert abs(gc.duration_s - held[0]) <= _tolerance(rec), (gc, held)


@pytest.mark.parametrize("version", WALKED)
def test_the_same_callback_twice_in_a_row_is_two_stalls(spawn: Spawner, version: str) -> None:
    """Two plain callbacks of the same function at the same depth, with no poll between:
    only the thread's count of contexts entered tells them apart. The idle loop before, between
    and after the rounds has no stall."""
    target = spawn.target("stalls", "--rounds", "2", "--ms", "150", python=interpreter(version))
    rec = _recorded(target, 1.9, lambda: None)
    stalls: list[Stall] = rec.counts.stalls()
    found = [(round(s.duration_s, 3), s.site, s.callback) for s in stalls]
    assert len(stalls) == 4, found
    for stall in stalls:
        assert abs(stall.duration_s - 0.15) <= _tolerance(rec), found
        assert stall.callback.startswith("hold (targets/stalls.py:"), found
        assert stall.state == "blocked", found


def test_record_and_stats_say_the_stalls(spawn: Spawner, tmp_path: object) -> None:
    target = spawn.target("aiohttp_app")
    held: list[float] = []
    stall = _one_stall_by_stats(target, ("sleep", 300, held), at=1.0, seconds=2)
    assert stall["state"] == "blocked" and abs(stall["duration_s"] - held[0]) <= 0.05, (stall, held)
    assert stall["site"].startswith("freeze_sleep (targets/handlers.py:"), stall

    timer = threading.Timer(1.0, _freeze, args=(target, "spin", 200, held))
    timer.start()
    out = f"{tmp_path}/p.svg"
    result = sidecar("record", "--pid", str(target.pid), "-d", "2", "-o", out, "--stall-ms", "150")
    timer.join()
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    summary = next(line for line in lines if line.startswith("stalls ≥ 150 ms: "))
    # a spin on a loaded host may wait for its CPU most of the time: then it says so
    longest = re.match(
        r"stalls ≥ 150 ms: 1 · longest ([\d.]+) s (busy|cpu_wait waiting for a CPU,) at "
        r"freeze_spin \(targets/handlers.py:",
        summary,
    )
    assert longest and abs(float(longest[1]) - held[1]) <= 0.05, (summary, held)
    assert any(line.startswith("longest stalls (lengths within 10 ms") for line in lines), lines

    # a process without an event loop has no stall to tell, and no line says it has none
    plain = spawn.target("spin")
    result = sidecar("record", "--pid", str(plain.pid), "-d", "1", "-o", f"{tmp_path}/s.svg")
    assert result.returncode == 0, result.stderr
    assert "all threads (no event loop seen): busy" in result.stderr, result.stderr
    assert "stalls" not in result.stderr, result.stderr

    # a threshold out of bounds: one line, exit 2, before any sampling
    result = sidecar("stats", "--pid", str(target.pid), "--stall-ms", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("sidecar stats: error: argument")


def test_a_cpu_starved_stall_says_so_with_the_throttling_around_it(
    limited: Path, spawn: Spawner, tmp_path: Path
) -> None:
    """A 500 ms spin of the loop in a cgroup limited to 0.2 CPU gets about a fifth of its wall
    time on a CPU: the stall reads cpu_wait, at the spinning frame, with the periods the
    cgroup throttled around it, in ``record``'s table and ``stats --json`` alike."""
    target = spawn.target("aiohttp_app")
    (limited / "cgroup.procs").write_text(f"{target.pid}\n")
    held: list[float] = []
    timer = threading.Timer(1.2, _freeze, args=(target, "spin", 500, held))
    timer.start()
    out = tmp_path / "starved.svg"
    result = sidecar("record", "--pid", str(target.pid), "-d", "3", "-o", str(out))
    timer.join()
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    rows = [i for i, line in enumerate(lines) if re.match(r"\s*[\d.]+ s\s+\d\d:", line)]
    assert len(rows) == 1, result.stderr
    row, below = lines[rows[0]], lines[rows[0] + 2]
    assert "cpu_wait  waiting for a CPU, at freeze_spin (targets/handlers.py:" in row, row
    throttled = re.fullmatch(
        r"\s+the cgroup throttled (\d+) of (\d+) periods, ([\d.]+) s lost, over ([\d.]+) s "
        r"around it",
        below,
    )
    assert throttled, result.stderr
    periods, of, lost, span = (float(group) for group in throttled.groups())
    # a loop spinning half a second at a fifth of a CPU is throttled in most periods around it
    assert of >= 4 and periods >= of / 2 and lost > 0.2 and span >= 0.5, below
    print(row, below, sep="\n")

    stall = _one_stall_by_stats(target, ("spin", 500, held), at=1.2, seconds=3)
    assert stall["state"] == "cpu_wait", stall
    assert stall["states"]["cpu_wait"] > 0.5 * stall["duration_s"], stall
    assert stall["site"].startswith("freeze_spin (targets/handlers.py:"), stall
    cgroup = stall["throttling"]
    assert cgroup["throttled_periods"] >= cgroup["periods"] / 2 > 1, stall
    assert cgroup["span_s"] >= stall["duration_s"], stall
    print(stall)
