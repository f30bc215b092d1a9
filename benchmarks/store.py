"""The store under the demo load: database bytes per target-hour, query times, sidecar CPU.

1. ``sidecar serve`` (100 Hz, 10 s windows) on the demo's aiohttp and Tornado services under the
   demo's wrk load for ``minutes``: the database's growth over the second half of the run (stack
   interning makes the start grow faster) and the serve process's CPU.
2. A 24 h database of the windows recorded in step 1, replayed every 10 s for both targets and
   downsampled as the service would; profile queries of the last 1 h and 24 h (median of 7).

``benchmarks/bench.py`` runs it (``--only store``) through ``measure``: part 6 of REPORT.md.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from benchmarks.common import cpu_seconds, serve
from sidecar.store import ProcessRecord, Store, WindowBatch
from sidecar.store.query import Range, Reader
from targets.demo import start_loads
from tests.support.batches import window_batch
from tests.support.procs import Procs

WINDOW = 10


def readonly(path: Path) -> closing[sqlite3.Connection]:
    return closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True))


def db_bytes(path: Path) -> int:
    """Live pages of the database as a reader sees it (committed WAL frames included): the WAL
    file grows to its checkpoint threshold and is then reused, so over a short run file sizes
    would measure the WAL, not the data."""
    with readonly(path) as conn:
        pages, free, size = (conn.execute(f"PRAGMA {name}").fetchone()[0]
                             for name in ("page_count", "freelist_count", "page_size"))  # fmt: skip
    return int((pages - free) * size)


#: What the database's pages hold, by the tables (and their indexes) of each part.
PARTS = {
    "packed counts": ("window_counts", "hour_counts"),
    "stacks: frames, prefix tree, stack flags": ("frames", "nodes", "stacks"),
    "windows: ticks and per-state sums": ("windows",),
}


def db_parts(path: Path) -> dict[str, int]:
    """Bytes of pages per part of the database (SQLite's dbstat), the rest as "other"."""
    with readonly(path) as conn:
        pages = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
        owners = dict(conn.execute("SELECT name, tbl_name FROM sqlite_schema").fetchall())
    out = dict.fromkeys([*PARTS, "other"], 0)
    for name, size in pages:
        table = owners.get(name, name)
        part = next((p for p, tables in PARTS.items() if table in tables), "other")
        out[part] += int(size)
    return out


def record_demo(db: Path, minutes: float, procs: Procs) -> dict[str, Any]:
    wrk = shutil.which("wrk")
    assert wrk, "wrk is required"
    aio, aio_url = procs.target("aiohttp_app", "--uvloop")
    tor, tor_url = procs.target("tornado_app")
    seconds = int(minutes * 60)
    loads = start_loads(wrk, {"aiohttp": str(aio_url), "tornado": str(tor_url)}, seconds + 30)
    try:
        server = serve(procs, [aio.pid, tor.pid], db, 100, WINDOW)
        time.sleep(seconds / 2)
        size0, cpu0, t0 = db_bytes(db), cpu_seconds(server.pid), time.monotonic()
        time.sleep(seconds / 2)
        size1, cpu1, t1 = db_bytes(db), cpu_seconds(server.pid), time.monotonic()
        procs.stop(server)
    finally:
        for load in loads:
            load.terminate()
            load.wait(timeout=15)
    wal = Path(f"{db}-wal")
    return {"load": os.getloadavg()[1], "wal_bytes": wal.stat().st_size if wal.exists() else 0,
            "bytes_per_target_hour": (size1 - size0) / ((t1 - t0) / 3600) / 2,
            "cpu_per_target": (cpu1 - cpu0) / (t1 - t0) / 2, "final_bytes": db_bytes(db),
            "parts": db_parts(db), "seconds": seconds}  # fmt: skip


Entry = tuple[str, int, str, int]


def stored(db: Path) -> dict[tuple[int, int], list[Entry]]:
    """The windows stored in ``db``: (window, target id) → (stack text, thread, state, count)."""
    reader = Reader(db, WINDOW)
    rows = reader.entries()
    texts = reader.stack_texts({r[3] for r in rows})
    windows: dict[tuple[int, int], list[Entry]] = {}
    for window, target, _, stack, thread, state, count in rows:
        windows.setdefault((window, target), []).append((texts[stack], thread, state, count))
    return windows


def build_day(source: Path, day_db: Path) -> int:
    """24 h of windows for two targets, replaying the recorded windows in a cycle."""
    per_target: dict[int, list[list[Entry]]] = {}
    for (_, target), rows in sorted(stored(source).items()):
        per_target.setdefault(target, []).append(rows)
    store = Store(day_db)
    now = int(time.time()) // WINDOW * WINDOW
    start = now - 24 * 3600
    keys = []
    for index, target in enumerate(sorted(per_target)):
        record = ProcessRecord(10_000 + index, 1, f"demo-target-{index}", start)
        store.attach(record)
        keys.append((record.key, per_target[target]))
    batches: list[WindowBatch] = []
    for step, window in enumerate(range(start, now, WINDOW)):
        for key, cycle in keys:
            rows = cycle[step % len(cycle)]
            batches.append(window_batch(key, window, WINDOW, 1000, rows))
        if len(batches) >= 200:
            store.write(batches)
            batches = []
    if batches:
        store.write(batches)
    while store.downsample(time.time(), max_spans=500):
        pass
    while store.roll_up(time.time(), max_hours=48):
        pass
    store.close()
    return sum(os.path.getsize(p) for p in (day_db, Path(f"{day_db}-wal")) if p.exists())


def time_queries(day_db: Path, runs: int = 7) -> dict[str, list[float]]:
    reader = Reader(day_db, WINDOW)
    now = time.time()
    out: dict[str, list[float]] = {"1h": [], "24h": []}
    for _ in range(runs):
        for name, hours in (("1h", 1), ("24h", 24)):
            began = time.perf_counter()
            profile = reader.profile(None, Range.aligned(now - hours * 3600, now, WINDOW))
            out[name].append(time.perf_counter() - began)
            assert profile.total > 0
    return out


def measure(minutes: float, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Steps 1 and 2: the figures of the report, as a dict."""
    with tempfile.TemporaryDirectory() as tmp, Procs(Path(tmp)) as procs:
        live_db, day_db = Path(tmp) / "live.db", Path(tmp) / "day.db"
        log(f"recording the demo load for {minutes:g} min ...")
        live = record_demo(live_db, minutes, procs)
        log(f"  {live['bytes_per_target_hour'] / 1e6:.3f} MB per target-hour, CPU "
            f"{live['cpu_per_target']:.2%} per target")  # fmt: skip
        day_size = build_day(live_db, day_db)
        log(f"  24 h database: {day_size / 1e6:.2f} MB")
        times = time_queries(day_db)
    one, day = statistics.median(times["1h"]), statistics.median(times["24h"])
    return {"minutes": minutes, "live": live, "day_bytes": day_size, "times": times,
            "query_1h": one, "query_24h": day, "ratio": day / one,
            "mb_per_target_hour": live["bytes_per_target_hour"] / 1e6}  # fmt: skip
