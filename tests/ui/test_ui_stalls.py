"""Stalls in the UI, in real Chromium: a real aiohttp service whose /freeze route holds its loop a
known time, sampled by a real ``sidecar serve``. The timeline's stall lane marks each stall the
API lists where it happened, its tooltip says what held the loop, a click selects the stall's
range for the flamegraph, and the Longest stalls table lists them longest first (or says there
were none)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, Page

from tests.support.charts import bucket_x
from tests.support.helpers import REPORTS, Serve, Spawner, running_state, wait_until
from tests.ui import test_ui_gil
from tests.ui.test_ui import flame_state, query
from tests.ui.test_ui_gil import open_page

#: The module's Chromium: test_ui_gil's fixture.
browser = test_ui_gil.browser


#: (how, ms, state, function) of each /freeze, in the order they are called.
FREEZES = (("sleep", 300, "blocked", "freeze_sleep"), ("spin", 200, "busy", "freeze_spin"))
#: The lane marks and its tooltip.
MARKS = "#timeline .stall-mark"
TIP = "#timeline .tooltip"


def whole_seconds(stall: dict[str, Any]) -> tuple[int, int]:
    """The range picking a stall selects: its start to its end, widened to whole seconds."""
    return math.floor(stall["start"]), math.ceil(stall["start"] + stall["duration_s"])


def selected_range(page: Page, stall: dict[str, Any]) -> None:
    """Waits until the flamegraph shows the stall's range (whole seconds), then checks the
    address and the label say the same."""
    low, high = whole_seconds(stall)
    page.wait_for_function(
        "([from, to]) => { const d = document.querySelector('#flame').dataset;"
        " return d.loading === '0' && d.from === from && d.to === to; }",
        arg=[str(low), str(high)],
    )
    assert query(page)["sel"] == f"{low}~{high}"
    assert int(flame_state(page)["samples"]) > 0
    assert page.locator("#selection-label").inner_text().startswith("Selected")


def test_stalls_are_marked_on_the_timeline_and_listed_longest_first(
    browser: Browser, spawn: Spawner, serve: Callable[..., Serve], tmp_path: Path
) -> None:
    target = spawn.target("aiohttp_app")
    start = math.floor(time.time())
    server = serve(pids=(target.pid,), db=tmp_path / "stalls.db")
    assert wait_until(lambda: any(t["samples"] for t in server.targets()), timeout=20)
    target_id = server.targets()[0]["id"]
    for how, ms, _, _ in FREEZES:
        target.get(f"/freeze?how={how}&ms={ms}", timeout=30)
        time.sleep(0.5)

    def listed() -> list[dict[str, Any]]:
        return list(server.json(f"/api/stalls?target={target_id}&from={start}")["stalls"])

    assert wait_until(lambda: len(listed()) >= len(FREEZES), timeout=15), listed()
    end = math.ceil(time.time()) + 1
    doc = server.json(f"/api/stalls?target={target_id}&from={start}&to={end}")
    stalls = doc["stalls"]
    # a spin on a loaded host may wait for its CPU most of the time: cpu_wait, not busy
    assert [(s["state"], s["site"].split(" (")[0]) for s in stalls] == [
        (running_state(s["states"]) if state == "busy" else state, function)
        for s, (_, _, state, function) in zip(stalls, FREEZES, strict=False)
    ], stalls
    assert len(stalls) == len(FREEZES), stalls
    assert doc["stall_ms"] == 100, doc

    page = open_page(browser, f"{server.url}/?target={target_id}&from={start}&to={end}", "#flame")
    page.wait_for_function("() => document.querySelector('#stalls').dataset.loading === '0'")

    # one mark per stall the API lists, where the chart's time axis puts its start, in order
    marks = page.locator(MARKS)
    assert marks.count() == len(stalls)
    canvas = page.locator("#timeline canvas").bounding_box()
    assert canvas is not None
    lefts = []
    for i, stall in enumerate(stalls):
        box = marks.nth(i).bounding_box()
        assert box is not None
        expected = canvas["x"] + bucket_x(page, "#timeline", stall["start"], start, end)
        assert abs(box["x"] - expected) <= 2, (box, expected, stall)
        assert box["width"] >= 4
        assert marks.nth(i).get_attribute("data-state") == stall["state"]
        lefts.append(box["x"])
    assert lefts == sorted(lefts) and lefts[0] < lefts[1], lefts
    assert f"{len(stalls)} stalls ≥ 100 ms marked" in page.locator("#stall-count").inner_text()

    # hovering the first mark says what held the loop: time.sleep's caller, blocked, 0.30 s
    first = stalls[0]
    marks.nth(0).hover()
    tip = page.locator(TIP)
    tip.wait_for(state="visible")
    assert tip.locator("[data-site]").inner_text() == f"at {first['site']}"
    assert first["site"].startswith("freeze_sleep (targets/handlers.py:"), first
    text = tip.inner_text()
    assert f"{first['duration_s']:.2f} s stall" in text and "blocked" in text, text
    assert first["thread"] in text and first["callback"] in text, text
    # serve's task scans fell in it: the request's task is named, as the API names it
    assert first["task"] and first["task"]["request"], first
    assert tip.locator("[data-task]").inner_text() == f"task {first['task']['name']} (a request)"
    page.locator(".timeline-panel").screenshot(path=str(REPORTS / "ui-stalls-tooltip.png"))

    # clicking it selects its range: the flamegraph shows it, and the mark says it is picked
    marks.nth(0).click()
    selected_range(page, first)
    assert marks.nth(0).get_attribute("aria-current") == "true"
    assert marks.nth(1).get_attribute("aria-current") == "false"

    # the table: both, longest first, with their sites; the picked one marked; a row selects
    rows = page.locator("#stalls tbody tr")
    assert rows.count() == len(stalls)
    by_length = sorted(stalls, key=lambda s: -s["duration_s"])
    assert [float(rows.nth(i).get_attribute("data-duration") or 0) for i in range(2)] == [
        s["duration_s"] for s in by_length
    ]
    for i, stall in enumerate(by_length):
        assert rows.nth(i).get_attribute("data-site") == stall["site"]
        assert stall["site"].split(" (")[0] in rows.nth(i).inner_text()
    assert rows.nth(0).get_attribute("aria-selected") == "true"  # the 300 ms one, picked
    summary = page.locator("#stalls-summary").inner_text()
    assert summary.startswith("the 2 longest of 2 stalls ≥ 100 ms in this range"), summary
    rows.nth(1).click()
    selected_range(page, by_length[1])
    assert rows.nth(1).get_attribute("aria-selected") == "true"
    page.screenshot(path=str(REPORTS / "ui-stalls.png"), full_page=True)
    assert not page.errors  # type: ignore[attr-defined]

    # a range without stalls: no mark, and the table says so
    page = open_page(
        browser, f"{server.url}/?target={target_id}&from={start - 60}&to={start - 30}", "#flame"
    )
    page.wait_for_function("() => document.querySelector('#stalls').dataset.loading === '0'")
    assert page.locator(MARKS).count() == 0
    empty = page.locator("#stalls [data-empty]").inner_text()
    assert empty == "No stall of ≥ 100 ms in this range.", empty
    assert not page.errors  # type: ignore[attr-defined]
