"""Slow requests in the store (schema 13) on real SQLite files: a database of schema 12
migrated; slow requests written once each, read back by range (those that overlap it), route,
trace id, length and target, with those a window did not keep summed; moved by downsampling
into the coarser window and taken by retention with the window they ended in."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from sidecar.classify.requests import SlowRequest
from sidecar.store import ProcessRecord, WindowBatch
from sidecar.store.query import QueryError, Range, Reader, UnknownTarget
from sidecar.store.requestquery import RequestReader
from sidecar.store.schema import MIGRATIONS
from tests.support.batches import window_batch
from tests.unit.test_slow_requests import slow
from tests.unit.test_store import at_schema, open_store, query_all, query_one

HANDLER = "main (app.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:600);h (app.py:9)"
TRACE = "ab" * 16


def batch(
    record: ProcessRecord, window: int, requests: list[SlowRequest], dropped: int = 0
) -> WindowBatch:
    rows = [(HANDLER, 11, "idle", 5)]
    return window_batch(
        record.key, window, 10, 5, rows, slow_requests=requests, slow_requests_dropped=dropped
    )


def at(start: float, duration: float, path: str, trace: str | None = None) -> SlowRequest:
    return replace(slow(duration, path, trace=trace), start=start)


def test_a_version_12_database_gains_the_slow_requests(tmp_path: Path) -> None:
    db = tmp_path / "v12.db"
    at_schema(db, 12).close()
    store, record = open_store(db)
    assert query_one(db, "PRAGMA user_version") == len(MIGRATIONS)
    now = int(time.time()) // 10 * 10
    store.write([batch(record, now, [at(now + 1, 0.8, "/items/1")])])
    store.close()
    found, total = RequestReader(Reader(db)).requests(1, Range(now, now + 10))
    assert total == 1 and found[0][2].duration_s == 0.8
    assert found[0][2].await_sites()[0]["site"] == "ItemHandler.get (app.py:12)"


def test_slow_requests_come_back_by_range_route_trace_and_length(tmp_path: Path) -> None:
    db = tmp_path / "requests.db"
    store, record = open_store(db)
    base = (int(time.time()) // 3600 - 3) * 3600
    first = [at(base + 2, 0.6, "/items/1", TRACE), at(base + 9.5, 1.5, "/items/2")]
    store.write(
        [batch(record, base, first), batch(record, base + 10, [at(base + 12, 3.0, "/x")], 2)]
    )
    store.write([batch(record, base, first)])  # handed over twice: each kept once
    reader = RequestReader(Reader(db))
    span = Range(base, base + 20)
    found, total = reader.requests(1, span)
    assert total == 3
    assert [(r.start, r.path) for _, _, r in found] == [
        (base + 2, "/items/1"),
        (base + 9.5, "/items/2"),
        (base + 12, "/x"),
    ]
    assert found[0][:2] == (1, record.pid) and found[0][2].stacks == slow(0.6, "/").stacks
    # the second began in the first window and was in flight in the second: in both
    assert [r.path for _, _, r in reader.requests(1, Range(base + 10, base + 20))[0]] == [
        "/items/2",
        "/x",
    ]
    assert reader.requests(1, span, route="GET /items/([^/]+)")[1] == 3
    assert reader.requests(1, span, route="/items/([^/]+)")[1] == 3
    assert reader.requests(1, span, route="POST /items/([^/]+)")[1] == 0
    assert [r.path for _, _, r in reader.requests(1, span, trace=TRACE)[0]] == ["/items/1"]
    assert reader.requests(1, span, min_ms=1000)[1] == 2
    longest, total = reader.requests(None, span, limit=1, longest=True)
    assert (total, [r.duration_s for _, _, r in longest]) == (3, [3.0])
    assert reader.dropped(1, span) == 2
    with pytest.raises(UnknownTarget):
        reader.requests(7, span)
    with pytest.raises(QueryError, match="'limit'"):
        reader.requests(1, span, limit=0)

    # downsampling moves them into the coarser window; retention takes them with it
    while store.downsample(time.time()):
        pass
    assert {w for (w,) in query_all(db, "SELECT window FROM slow_requests")} == {base}
    assert reader.requests(1, span)[1] == 3
    while store.prune(base + 3600):
        pass
    assert query_one(db, "SELECT COUNT(*) FROM slow_requests") == 0
    assert query_one(db, "PRAGMA integrity_check") == "ok"
    store.close()
