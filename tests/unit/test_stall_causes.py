"""What a stall says beyond its state: the states tied with it, and the throttling of the
target's cgroup around it (``sample.cgroup.ThrottleLog``), through the record summary's rows,
``stats --json``'s shape and the store (schema 11, and a schema 10 database migrated)."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

import jsonschema

from sidecar.analyze.stalls import stall_rows, summary_line
from sidecar.classify.stalls import Stall, Throttled, stall_of
from sidecar.sample.cgroup import CgroupCpu, CpuUnknown, ThrottleLog, Throttling
from sidecar.store.query import Range, Reader
from sidecar.store.schema import STALL_THROTTLE
from sidecar.store.stallquery import StallReader
from tests.support.stats_schema import STALLS
from tests.unit.test_store import at_schema, open_store, query_all
from tests.unit.test_store_stalls import batch

if TYPE_CHECKING:
    from sidecar._native import Stall as NativeStall

LOOP = "main (app.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:600)"
SPIN = f"{LOOP};handle (app.py:9);score (app.py:40)"


def native(stacks: list[tuple[str, str, int]], start: float = 100.0) -> NativeStall:
    samples = sum(count for _, _, count in stacks)
    return {
        "thread_id": 7,
        "start": start,
        "end": start + samples / 100,
        "ongoing": False,
        "samples": samples,
        "gc": 0,
        "callback": "handle (app.py:9)",
        "stacks": stacks,
        "other": 0,
        "holders": [],
        "task": None,
    }


def reading(periods: int, throttled: int, lost: float, path: str = "/pod") -> CgroupCpu:
    return CgroupCpu(
        version=1,
        path=path,
        directory=Path("/sys/fs/cgroup/cpu") / path.strip("/"),
        cores=0.2,
        period_seconds=0.1,
        throttling=Throttling(periods, throttled, lost),
        at=0.0,
    )


def test_a_tie_is_named_by_the_first_state_and_said() -> None:
    stall = stall_of(native([("busy", SPIN, 6), ("gil", SPIN, 6), ("blocked", SPIN, 2)]), {})
    assert (stall.state, stall.tied) == ("busy", ("gil",))
    assert stall.to_json()["tied"] == ["gil"]
    line = summary_line([stall], 100)
    assert "longest 0.14 s busy at score (app.py:40) (gil as many samples)" in line, line
    alone = stall_of(native([("busy", SPIN, 7), ("gil", SPIN, 6)]), {})
    assert alone.tied == () and "as many" not in summary_line([alone], 100)


def test_a_cpu_wait_stall_says_the_throttling_around_it() -> None:
    log = ThrottleLog()
    log.note(reading(10, 2, 0.1), when=99.5)
    log.note(reading(15, 6, 0.4), when=100.2)  # inside the stall: not a bound of it
    log.note(reading(21, 11, 0.85), when=101.0)
    log.note(reading(30, 11, 0.85), when=102.0)
    stall = stall_of(native([("cpu_wait", SPIN, 30), ("busy", SPIN, 10)]), {})
    assert stall.state == "cpu_wait" and stall.end == 100.4
    (marked,) = log.mark([stall])
    assert marked.throttling == Throttled(11, 9, 0.75, 1.5)
    rows = "\n".join(stall_rows([marked], 5, 0.01))
    assert "cpu_wait  waiting for a CPU, at score (app.py:40)" in rows, rows
    assert "the cgroup throttled 9 of 11 periods, 0.75 s lost, over 1.5 s around it" in rows
    jsonschema.validate([marked.to_json()], STALLS)
    assert marked.to_json()["throttling"] == {
        "periods": 11,
        "throttled_periods": 9,
        "seconds_lost": 0.75,
        "span_s": 1.5,
    }


def test_no_throttling_is_told_without_readings_around_it_or_a_limit() -> None:
    stall = stall_of(native([("cpu_wait", SPIN, 30)]), {})
    log = ThrottleLog()
    log.note(reading(10, 2, 0.1), when=100.1)  # after the start: nothing encloses it
    log.note(reading(12, 3, 0.2), when=101.0)
    assert log.mark([stall])[0].throttling is None
    moved = ThrottleLog()
    moved.note(reading(10, 2, 0.1), when=99.0)
    moved.note(reading(3, 0, 0.0, path="/other"), when=101.0)  # another cgroup: no span
    assert moved.around(stall.start, stall.end) is None
    unlimited = ThrottleLog()
    unlimited.note(CpuUnknown("no cgroup"), when=99.0)
    unlimited.note(None, when=99.0)
    assert not unlimited.readings
    rows = "\n".join(stall_rows([stall], 5, 0.01))
    assert "cgroup" not in rows and stall.to_json()["throttling"] is None


def test_the_store_keeps_ties_and_throttling_and_older_rows_read_none(tmp_path: Path) -> None:
    db = tmp_path / "v10.db"
    conn = at_schema(db, 10)
    conn.close()
    store, record = open_store(db)
    now = int(time.time()) // 10 * 10
    throttled = Throttled(11, 9, 0.75, 1.5)
    kept = Stall(
        start=now + 1.0,
        duration_s=0.4,
        ongoing=False,
        thread_id=11,
        thread="MainThread",
        samples=40,
        states={"busy": 0.2, "blocked": 0.0, "gil": 0.2, "cpu_wait": 0.0, "gc": 0.0},
        state="busy",
        site="h (app.py:9)",
        holder=None,
        callback="h (app.py:9)",
        tied=("gil",),
        throttling=throttled,
    )
    store.write([batch(record, now, [kept])])
    store.close()
    columns = {row[1] for row in query_all(db, "PRAGMA table_info(stalls)")}
    assert {"tied", "throttle_periods", "throttle_span"} <= columns
    (found,), _ = StallReader(Reader(db)).stalls(1, Range(now, now + 10))
    assert found["tied"] == ["gil"] and found["throttling"] == throttled.to_json()
    # a row of schema 10 as the migration left it: the columns' defaults
    with sqlite3.connect(db) as conn:
        conn.execute(
            f"UPDATE stalls SET tied = '', {', '.join(f'{c} = NULL' for c in STALL_THROTTLE)}"
        )
    (found,), _ = StallReader(Reader(db)).stalls(1, Range(now, now + 10))
    assert found["tied"] == [] and found["throttling"] is None


def test_the_mark_of_a_stall_in_progress_is_explained_only_under_a_row_with_it() -> None:
    """A stall still going when sampling ended is marked "+" in the table, and the legend
    says so; when that stall is too short for the table's rows, neither is printed."""
    stalls = [stall_of(native([("busy", SPIN, n)], start=100.0 + n), {}) for n in range(20, 26)]
    ongoing = dataclasses.replace(stalls[0], ongoing=True)  # the shortest
    table = stall_rows([ongoing, *stalls[1:]], 5, 0.01)
    assert not any("+" in line for line in table), table
    table = stall_rows([ongoing, *stalls[1:]], 6, 0.01)
    assert table[-1] == "+ still stalled when sampling ended", table
    assert sum(line.startswith(" 0.20 s+") for line in table) == 1, table
