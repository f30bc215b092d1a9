"""``GET /api/functions`` in-process, over a real database: the top functions are the core's
analysis of the profile ``/api/profile`` gives for the same selection (busy samples of the
event-loop threads, frames above the loop's entry), an ``[idle]`` leaf is nobody's self time,
and errors take the API's one JSON shape (the real process in Chromium:
tests/ui/test_ui_functions.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.batches import window_batch

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

#: A uvloop service: no Python frame of the loop's own above its entry, ``run_app``.
LOOP = (
    "<module> (app.py:30);main (app.py:20);"
    "run_app (/venv/lib/python3.11/site-packages/aiohttp/web.py:500)"
)
HANDLE = "_handle_request (/venv/lib/python3.11/site-packages/aiohttp/web_protocol.py:450)"
HANDLER = f"{LOOP};{HANDLE};handler (app.py:10)"
ROWS = [
    (LOOP, 11, "idle", 80),  # the loop's idle wait: ends in [idle] under run_app
    (f"{HANDLER};crunch (app.py:5)", 11, "busy", 15),
    (f"{HANDLER};dumps (/usr/lib/python3.11/json/__init__.py:231)", 11, "busy", 4),
    (LOOP, 11, "busy", 5),  # uvloop's own C code: the entry is the innermost frame
    (HANDLER, 11, "blocked", 3),
    ("worker (pool.py:3);crunch (app.py:5)", 12, "busy", 40),  # not a loop thread
]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    from fastapi.testclient import TestClient

    from sidecar.serve.api import create_app
    from sidecar.serve.service import ServeConfig, Service
    from sidecar.store import ProcessRecord, Store

    db = tmp_path / "functions.db"
    now = int(time.time()) // 10 * 10
    store = Store(db)
    record = ProcessRecord(4242, 1, "python app.py", now, "aiohttp", "uvloop")
    store.attach(record)
    batch = window_batch(record.key, now - 10, 10, 100, ROWS, {11: "MainThread", 12: "pool"})
    store.write([batch])
    store.close()
    service = Service(ServeConfig(db=db, window=10))  # its reader; nothing sampled
    try:
        yield TestClient(create_app(service)), f"from={now - 10}&to={now}"
    finally:
        service.writer.store.close()


def test_functions_are_the_analysis_of_the_same_profile(api: tuple[TestClient, str]) -> None:
    from sidecar.analyze.threads import analyze
    from sidecar.profile import parse_folded

    client, span = api
    for selection in ("", "&threads=loop", "&state=busy,idle", "&thread=MainThread"):
        answer = client.get(f"/api/functions?target=1&{span}{selection}")
        assert answer.status_code == 200, answer.text
        doc = answer.json()
        folded = client.get(f"/api/profile?target=1&{span}{selection}").text
        analysis = analyze(parse_folded(folded))
        assert doc["busy"] == analysis.states["busy"] == 24
        assert doc["threads"] == "loop"
        rows = {f["key"]: (f["self"], f["total"]) for f in doc["functions"]}
        assert rows == {
            key: (analysis.self_samples[key], total)
            for key, total in analysis.total_samples.items()
        }
        totals = [f["total"] for f in doc["functions"]]
        assert totals == sorted(totals, reverse=True)
    handler = "handler (app.py)"
    assert rows == {
        "_handle_request (/venv/lib/python3.11/site-packages/aiohttp/web_protocol.py)": (0, 19),
        handler: (0, 19),
        "crunch (app.py)": (15, 15),
        "dumps (/usr/lib/python3.11/json/__init__.py)": (4, 4),
    }
    # the 80 idle samples under run_app are nobody's self time, nor are frames up to the
    # loop's entry (in every sample) ranked; the worker thread's samples are not the loop's
    assert not any(key.startswith(("run_app", "main", "<module>", "worker")) for key in rows)
    layers = {f["name"]: f["layer"] for f in doc["functions"]}
    assert layers == {
        "_handle_request": "framework",
        "handler": "application",
        "crunch": "application",
        "dumps": "stdlib",
    }
    (first,) = [f for f in doc["functions"] if f["key"] == handler]
    assert first["file"] == "app.py" and first["name"] == "handler"


def test_limit_no_busy_samples_and_errors(api: tuple[TestClient, str]) -> None:
    client, span = api
    top = client.get(f"/api/functions?target=1&{span}&limit=1").json()
    assert top["count"] == 4 and len(top["functions"]) == 1
    assert top["functions"][0]["total"] == 19
    idle = client.get(f"/api/functions?target=1&{span}&state=idle").json()
    assert idle == {"busy": 0, "threads": "loop", "count": 0, "functions": []}
    # a thread that runs no event loop: its own busy samples, as stats counts them then
    pool = client.get(f"/api/functions?target=1&{span}&thread=pool").json()
    assert pool["threads"] == "all" and pool["busy"] == 40
    assert [(f["name"], f["self"], f["total"]) for f in pool["functions"]][:1] == [
        ("crunch", 40, 40)
    ]
    for query, status, code in (
        (f"target=1&{span}&limit=0", 400, "invalid_parameter"),
        (f"target=1&{span}&state=sleepy", 400, "bad_request"),
        (f"target=1&{span}&threads=some", 400, "invalid_parameter"),
        (f"target=7&{span}", 404, "unknown_target"),
        ("target=1&from=1000&to=2000", 404, "no_samples"),
    ):
        refused = client.get(f"/api/functions?{query}")
        assert refused.status_code == status, (query, refused.text)
        assert refused.json()["error"]["code"] == code, query
