"""Slow requests in the UI, in real Chromium: a real Tornado service sampled by a real ``sidecar
serve --task-rate 20 --slow-ms 300``. Three /items requests of 700 ms (one with a
``traceparent``, one whose path holds markup), and a fourth in flight while /freeze blocks the
loop 300 ms: the Slow requests panel lists them longest first as ``GET /api/requests`` does, a
row's click shows its split and the stall it sat through (or says there was none), and a click
on the stall lists the requests it delayed as the API has them."""

from __future__ import annotations

import http.client
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, Page

from tests.support.helpers import REPORTS, Serve, Spawner, wait_until
from tests.ui import test_ui_gil
from tests.ui.test_ui_gil import open_page
from tests.ui.test_ui_stalls import selected_range

#: The module's Chromium: test_ui_gil's fixture.
browser = test_ui_gil.browser

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
#: The paths of the 700 ms requests sent one after the other (the first carries TRACE), and the
#: one in flight during the freeze. The second's path is markup: it must show as text.
QUIET = ("/items/slow-0", "/items/<b>slow-1<b>", "/items/slow-2")
FROZEN = "/items/frozen"
ROUTE = "/items/([^/]+)"


def get(port: int, path: str, headers: dict[str, str] | None = None) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        response.read()
        assert response.status == 200, (path, response.status)
    finally:
        conn.close()


def length(r: dict[str, Any]) -> str:
    """A request's duration as the panel says it: "≥0.70 s (≤0.75 s)"."""
    return f"≥{r['duration_ms'] / 1000:.2f} s (≤{r['duration_max_ms'] / 1000:.2f} s)"


def loaded(page: Page, selector: str) -> None:
    page.wait_for_function(
        "sel => { const el = document.querySelector(sel);"
        " return el && el.dataset.loading === '0'; }",
        arg=selector,
    )


def row_of(page: Page, table: str, path: str) -> Any:
    rows = page.locator(f"{table} tbody tr")
    for i in range(rows.count()):
        if rows.nth(i).locator("[data-request]").text_content() == f"GET {path}":
            return rows.nth(i)
    raise AssertionError(f"no row of {path} in {table}")


def test_slow_requests_are_listed_and_linked_to_the_stalls(
    browser: Browser, spawn: Spawner, serve: Callable[..., Serve], tmp_path: Path
) -> None:
    target = spawn.target("tornado_app")
    assert target.port is not None
    start = math.floor(time.time())
    server = serve("--task-rate", "20", "--slow-ms", "300", pids=(target.pid,))
    assert wait_until(lambda: any(t["samples"] for t in server.targets()), timeout=20)
    target_id = server.targets()[0]["id"]
    for n, path in enumerate(QUIET):
        headers = {"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"} if n == 0 else {}
        get(target.port, f"{path}?ms=700", headers)
    # a request in flight while the loop is blocked 300 ms in time.sleep
    frozen = threading.Thread(target=get, args=(target.port, f"{FROZEN}?ms=700"))
    frozen.start()
    time.sleep(0.2)
    get(target.port, "/freeze?how=sleep&ms=300")
    frozen.join()

    span = f"target={target_id}&from={start}"
    paths = {*QUIET, FROZEN}

    def requests() -> list[dict[str, Any]]:
        return list(server.json(f"/api/requests?{span}&order=longest")["requests"])

    def stalls() -> list[dict[str, Any]]:
        return [
            s
            for s in server.json(f"/api/stalls?{span}")["stalls"]
            if s["site"].startswith("freeze_sleep (")
        ]

    assert wait_until(lambda: paths <= {r["path"] for r in requests()}, timeout=30), requests()
    assert wait_until(lambda: len(stalls()) == 1, timeout=15), stalls()
    time.sleep(1.5)  # the windows the last requests ended in are written
    end = math.ceil(time.time()) + 1
    doc = server.json(f"/api/requests?target={target_id}&from={start}&to={end}&order=longest")
    listed = doc["requests"]
    assert doc["slow_ms"] == 300 and doc["total"] == len(listed), doc
    by_path = {r["path"]: r for r in listed}
    assert by_path[QUIET[0]]["trace"] == TRACE, by_path[QUIET[0]]
    assert all(by_path[p]["route"] == ROUTE for p in paths), listed
    (stall,) = stalls()

    page = open_page(browser, f"{server.url}/?target={target_id}&from={start}&to={end}", "#flame")
    loaded(page, "#requests")

    # the panel: every request the API lists, longest first, with its duration's bounds, route,
    # trace id and top await site, all as text (the markup in a path is not markup)
    rows = page.locator("#requests tbody tr")
    assert rows.count() == len(listed)
    for i, r in enumerate(listed):
        row = rows.nth(i)
        assert row.locator("td").nth(0).inner_text() == length(r), r
        assert row.locator("[data-request]").text_content() == f"GET {r['path']}"
        assert row.locator("[data-route]").text_content() == r["route"]
        assert row.locator("[data-trace]").text_content() == (r["trace"] or "none")
        top = r["await_sites"][0] if r["await_sites"] else None
        assert row.locator("td[data-site]").get_attribute("data-site") == (
            top["site"] if top else ""
        )
        if top:
            assert top["site"].startswith(row.locator("td[data-site] .fn").inner_text() + " ("), r
    assert page.locator("#requests b").count() == 0
    summary = page.locator("#requests-summary").inner_text()
    assert summary.startswith(f"the {len(listed)} longest of {len(listed)} requests in flight"), (
        summary
    )
    assert "300 ms or longer" in summary, summary

    # a click on the frozen request: its split as the API has it, and the stall it sat through
    row_of(page, "#requests", FROZEN).click()
    loaded(page, "#request-detail")
    detail = page.locator("#request-detail")
    request = by_path[FROZEN]
    for state in ("running", "ready", "waiting"):
        item = detail.locator(f"[data-split] li[data-state={state}]")
        assert float(item.get_attribute("data-share") or -1) == request["shares"][state]
        assert item.inner_text() == f"{state} {request['shares'][state] * 100:.1f}%"
    sites = detail.locator("[data-sites] tbody tr")
    assert [sites.nth(i).get_attribute("data-site") for i in range(sites.count())] == [
        s["site"] for s in request["await_sites"]
    ]
    assert request["await_sites"][0]["site"].startswith("ItemHandler.get ("), request
    sat = detail.locator("[data-stalls] li")
    assert sat.count() == 1
    assert float(sat.get_attribute("data-start") or 0) == stall["start"]
    assert sat.get_attribute("data-state") == "blocked"
    assert stall["site"] in sat.inner_text()
    assert row_of(page, "#requests", FROZEN).get_attribute("aria-selected") == "true"
    page.set_viewport_size({"width": 1024, "height": 900})
    page.locator("#requests").scroll_into_view_if_needed()
    page.screenshot(path=str(REPORTS / "ui-requests.png"), full_page=True)

    # the first request ran before the freeze: it sat through none, and says so
    row_of(page, "#requests", QUIET[0]).click()
    loaded(page, "#request-detail")
    assert (
        detail.locator("[data-title]").text_content()
        == f"GET {QUIET[0]} · {length(by_path[QUIET[0]])}"
    )
    empty = detail.locator("[data-stalls][data-empty]").inner_text()
    assert empty == "No stall of ≥ 100 ms while it was in flight.", empty

    # a click on the stall in the stalls table: its range selected, as before, and the slow
    # requests it delayed listed as /api/requests over the stall lists them
    stall_row = page.locator("#stalls tbody tr[data-site^='freeze_sleep (']")
    assert float(stall_row.get_attribute("data-start") or 0) == stall["start"]
    stall_row.click()
    selected_range(page, stall)
    loaded(page, "#stall-requests")
    over = server.json(
        f"/api/requests?target={target_id}&from={stall['start']}"
        f"&to={stall['start'] + stall['duration_s']}&order=longest"
    )["requests"]
    assert FROZEN in {r["path"] for r in over} and QUIET[0] not in {r["path"] for r in over}, over
    delayed = page.locator("#stall-requests tbody tr")
    assert [
        delayed.nth(i).locator("[data-request]").text_content() for i in range(delayed.count())
    ] == [f"GET {r['path']}" for r in over]
    # a delayed request's row shows its split in turn
    row_of(page, "#stall-requests", FROZEN).click()
    loaded(page, "#request-detail")
    assert detail.locator("[data-title]").text_content() == f"GET {FROZEN} · {length(request)}"
    assert not page.errors  # type: ignore[attr-defined]

    # a range without slow requests says so, at serve's threshold
    page = open_page(
        browser, f"{server.url}/?target={target_id}&from={start - 60}&to={start - 30}", "#flame"
    )
    loaded(page, "#requests")
    empty = page.locator("#requests [data-empty]").inner_text()
    assert empty == "No request in flight 300 ms or longer in this range.", empty
    assert not page.errors  # type: ignore[attr-defined]
