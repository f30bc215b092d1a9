"""The UI, in real Chromium, of a loop starved of the GIL (``targets/gil.py``: a thread named
``holder`` spins in pure Python beside it) and of one collecting garbage: the timeline's gil
series, the GIL filter of the flamegraph, the loop's gil and gc shares, and the table of who
held the GIL while the loop waited, each as the API has it. A module of its own: the spinning thread
takes a core, which the other UI tests' load should not have to share."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.support.charts import bucket_x, hover
from tests.support.helpers import CHROMIUM, CHROMIUM_ARGS, REPORTS, Serve, Spawner, wait_until

#: Seconds of 1 s windows the range holds.
SECONDS = 8


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        raise RuntimeError("chromium is not installed (.ci/run installs it with apt-get)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def open_page(browser: Browser, url: str, loaded: str) -> Page:
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.errors = errors  # type: ignore[attr-defined]
    page.goto(url)
    page.wait_for_function(
        "sel => { const el = document.querySelector(sel);"
        " return el && el.dataset.loading === '0'; }",
        arg=loaded,
    )
    return page


def test_the_gil_filter_timeline_shares_and_holders_show(
    browser: Browser, spawn: Spawner, serve: Callable[..., Serve], tmp_path: Path
) -> None:
    starved = spawn.target("gil", "--holder", "spin")
    collector = spawn.target("gil", "--gc")
    start = math.floor(time.time())
    server = serve(pids=(starved.pid, collector.pid), db=tmp_path / "gil.db")
    assert wait_until(lambda: len(server.targets()) == 2, timeout=20), server.targets()
    ids = {t["pid"]: t["id"] for t in server.targets()}
    hog = ids[starved.pid]
    time.sleep(SECONDS + 2)
    end = math.floor(time.time()) - 2
    span = f"from={start}&to={end}"
    line = server.settled(f"/api/timeline?target={hog}&{span}")
    stats = server.settled(f"/api/stats?{span}")
    by_pid = {t["pid"]: t for t in stats["targets"]}
    assert by_pid[starved.pid]["gil_share"] > 0.5, by_pid

    # the flamegraph of the starved target: the GIL filter keeps the loop's waits for the GIL
    page = open_page(browser, f"{server.url}/?target={hog}&{span}", "#flame")
    legend = page.locator("#timeline-title + .legend").inner_text()
    assert "gil" in legend and "waiting for the GIL" in legend
    page.locator('#state-filter button[data-state="gil"]').click()
    page.wait_for_function(
        "() => new URLSearchParams(location.search).get('state') === 'gil'"
        " && document.querySelector('#flame').dataset.loading === '0'"
    )
    # the page shows the event-loop threads unless asked for all (the holder waits at times too)
    folded = server.request(f"/api/profile?target={hog}&{span}&state=gil&threads=loop")[1]
    folded = folded.decode()
    total = sum(int(row.rpartition(" ")[2]) for row in folded.splitlines())
    assert page.eval_on_selector("#flame", "el => el.dataset.samples") == str(total)
    assert page.locator('#state-filter button[aria-checked="true"]').inner_text() == "GIL"
    # every sample under the filter ends in the [gil] leaf: searching it matches them all
    page.locator("#search").fill("[gil]")
    page.wait_for_function(
        "() => Number(document.querySelector('#search-status').dataset.matches) > 0"
    )
    assert float(page.locator("#search-status").get_attribute("data-share") or 0) == 1.0
    page.locator("#search").fill("")
    # the timeline's tooltip of a bucket gives its gil samples as the API does
    bucket = max(line["buckets"], key=lambda b: b["gil"])
    tip = hover(
        page, "#timeline", bucket_x(page, "#timeline", bucket["t"] + line["step"] / 2, start, end)
    )
    gil = tip.locator('[data-series="gil"]').inner_text()
    assert gil.split()[1].replace(",", "") == str(bucket["gil"]), (gil, bucket)
    page.screenshot(path=str(REPORTS / "ui-gil-flamegraph.png"), full_page=True)
    assert not page.errors  # type: ignore[attr-defined]

    # the frameworks view: gil and gc shares, and who held the GIL, of both targets
    page = open_page(browser, f"{server.url}/?view=frameworks&{span}", "#frameworks")
    expected = stats["frameworks"]["unknown"]
    card = page.locator('.fw-card[data-framework="unknown"]')
    assert float(card.get_attribute("data-gil-share") or -1) == expected["gil_share"]
    shown = card.locator('[data-share="gil"]').inner_text()
    assert abs(float(shown[:-1]) - 100 * expected["gil_share"]) <= 0.05 + 1e-9, shown
    shown = card.locator('[data-share="gc"]').inner_text()
    assert abs(float(shown[:-1]) - 100 * expected["gc_share"]) <= 0.05 + 1e-9, shown
    rows = page.locator("#gil-holders tbody tr")
    held = by_pid[starved.pid]["gil_holders"]
    assert rows.count() == len(held) and held, held  # the collector's loop never waited
    first = rows.first
    assert first.get_attribute("data-pid") == str(starved.pid)
    assert first.get_attribute("data-thread") == "holder" == held[0]["thread"]
    assert first.get_attribute("data-site") == held[0]["site"]
    assert held[0]["site"].startswith("spin (targets/gil.py:")
    assert "spin" in first.inner_text() and "holder" in first.inner_text()
    assert float(first.get_attribute("data-share") or -1) == held[0]["share"]
    summary = page.locator("#gil-summary").inner_text()
    assert f"PID {starved.pid}: the loop waited for the GIL" in summary
    page.screenshot(path=str(REPORTS / "ui-gil-frameworks.png"), full_page=True)
    assert not page.errors  # type: ignore[attr-defined]

    # with the collector picked, its loop never waited: the table says so
    page = open_page(
        browser, f"{server.url}/?view=frameworks&target={ids[collector.pid]}&{span}", "#frameworks"
    )
    assert "never waited for the GIL" in page.locator("#gil-holders").inner_text()
    assert not page.errors  # type: ignore[attr-defined]
