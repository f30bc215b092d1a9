"""The UI, in real Chromium, as a first hour sees it: a real gunicorn arbiter and its aiohttp
workers beside the aiohttp demo, whose /freeze holds the loop 700 ms (stalls, and slow
requests), sampled by a real ``sidecar serve``. The page asks the API for nothing the API says
is absent (the master's loop never blocks: no [blocked] profile of it, and no 404 in the
console, refresh after refresh); at 1024 px wide no button's label breaks over two lines and
the stalls and slow requests tables fit their panels, every other table fitting or scrolling
within its own; and "Who held the GIL" lists no holder of 0.0%, saying how many it left out."""

from __future__ import annotations

import contextlib
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Request, Response

from tests.serve.test_prefork import gunicorn
from tests.support.helpers import REPORTS, Serve, Servers, Spawner, wait_until
from tests.ui import test_ui_gil

#: The module's Chromium: test_ui_gil's fixture.
browser = test_ui_gil.browser
#: The freezes the demo serves while it is sampled: each a stall and a slow request.
FREEZES = 4


@dataclass
class Run:
    server: Serve
    master: int
    workers: list[int]
    demo: int
    #: target ids by PID
    ids: dict[int, int]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("narrow")
    with contextlib.ExitStack() as stack:
        spawn = stack.enter_context(contextlib.closing(Spawner()))
        servers = stack.enter_context(contextlib.closing(Servers()))
        master, workers, url = gunicorn(spawn, tmp, "aiohttp.GunicornWebWorker")
        demo = spawn.target("aiohttp_app")
        pids = [master, *workers, demo.pid]
        server = servers(
            tmp / "narrow.db", "--window", "1", *(a for p in pids for a in ("--pid", str(p)))
        )
        assert wait_until(lambda: len(server.targets()) == len(pids), timeout=30), server.targets()
        for _ in range(FREEZES):  # the demo's loop and a worker's, each blocked in time.sleep
            for base in (demo.url, url):
                with urllib.request.urlopen(base + "/freeze?how=sleep&ms=700", timeout=30) as r:
                    r.read()
        assert wait_until(lambda: len(server.json("/api/stalls")["stalls"]) >= FREEZES, timeout=20)
        time.sleep(2)  # the last windows written
        ids = {t["pid"]: t["id"] for t in server.targets()}
        yield Run(server, master, workers, demo.pid, ids)


def watched(page: Page) -> tuple[list[str], list[str]]:
    """The API's answers of 400 or more, and the URLs of every /api/profile asked, from now on."""
    failed: list[str] = []
    profiles: list[str] = []

    def answered(response: Response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    def asked(request: Request) -> None:
        if "/api/profile?" in request.url:
            profiles.append(request.url)

    page.on("response", answered)
    page.on("request", asked)
    return failed, profiles


def pumped(page: Page, check: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Waits until ``check()``, letting the page run meanwhile (its events are delivered while
    Playwright waits on it, not while Python sleeps)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        page.wait_for_timeout(200)
    return True


def test_the_page_asks_for_no_profile_the_api_says_is_absent(browser: Browser, run: Run) -> None:
    """The Frameworks view finds where each loop blocks in the [blocked] stacks of the targets
    /api/stats says blocked: the workers' and the demo's, never the master's (it only waits on
    its workers; a pre-fork master is left out of its framework's shares). Live, the panel loads
    again every 5 s: three loads, not one 404."""
    stats = run.server.json("/api/stats")
    rows = {row["pid"]: row for row in stats["targets"]}
    assert rows[run.master]["role"] == "master" and rows[run.master]["blocked_share"] == 0.0
    assert rows[run.demo]["blocked_share"] > 0
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    failed, profiles = watched(page)
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    loads: list[str] = []
    page.on("request", lambda r: loads.append(r.url) if "/api/stats?" in r.url else None)
    page.goto(f"{run.server.url}/?view=frameworks")
    assert pumped(page, lambda: len(loads) >= 3), loads
    page.wait_for_function("() => document.querySelector('#frameworks').dataset.loading === '0'")
    assert failed == [] and not [line for line in console if line.startswith("error")], (
        failed,
        console,
    )
    blocked = [url for url in profiles if "state=blocked" in url]
    asked = {int(url.split("target=")[1].split("&")[0]) for url in blocked}
    assert run.ids[run.master] not in asked and run.ids[run.demo] in asked, (asked, run.ids)
    assert all("threads=loop" in url for url in blocked), blocked
    # what it asked is what it shows: the demo's and the worker's time.sleep
    sites = page.locator('.fw-card[data-framework="aiohttp"] .sites li').first.inner_text()
    assert sites.startswith("freeze_sleep (targets/handlers.py:"), sites
    page.close()


#: Every button of the top bar whose label's lines are more than one: [label, lines] (the
#: lines of its text, by where each piece of it sits; a swatch or a dot is no line).
WRAPPED = """() => [...document.querySelectorAll('.topbar button')].map(b => {
    const walk = document.createTreeWalker(b, NodeFilter.SHOW_TEXT);
    const lines = new Set();
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
        if (!node.textContent.trim()) continue;
        const range = document.createRange();
        range.selectNodeContents(node);
        for (const r of range.getClientRects()) {
            if (r.width > 0) lines.add(Math.round(r.top + r.height / 2));
        }
    }
    return [b.textContent.trim(), lines.size];
}).filter(([, lines]) => lines !== 1)"""
#: Every visible table: [id, its width, its panel's inner width, its scroll container's width
#: (null without one), rows].
TABLES = """() => [...document.querySelectorAll('table.grid')].filter(t => t.offsetParent)
  .map(t => {
    const wrap = t.closest('.table-wrap');
    const scrolls = wrap && ['auto', 'scroll'].includes(getComputedStyle(wrap).overflowX);
    const panel = t.closest('.panel');
    const inner = panel.clientWidth - parseFloat(getComputedStyle(panel).paddingLeft)
        - parseFloat(getComputedStyle(panel).paddingRight);
    return [t.id, t.scrollWidth, Math.round(inner), scrolls ? wrap.clientWidth : null,
            t.querySelectorAll('tbody tr').length];
})"""


#: No panel of the view shown is loading.
BUSY = """() => ![...document.querySelectorAll('[data-loading="1"]')].some(e => e.offsetParent)"""


def loaded(page: Page, *panels: str) -> None:
    for panel in panels:
        page.wait_for_function(
            "sel => document.querySelector(sel).dataset.loading === '0'", arg=panel
        )


def test_at_1024_px_no_button_wraps_and_the_tables_fit(browser: Browser, run: Run) -> None:
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    failed, _ = watched(page)
    page.goto(f"{run.server.url}/?target={run.ids[run.demo]}")
    loaded(page, "#flame", "#stalls", "#requests")
    assert page.evaluate(WRAPPED) == []
    width = page.evaluate("() => [document.querySelector('.topbar').scrollWidth, innerWidth]")
    assert width[0] <= width[1], width  # nothing of the bar off the window either
    tables: dict[str, Any] = {row[0]: row[1:] for row in page.evaluate(TABLES)}
    # the stalls and the slow requests of the demo, each column within the panel: the
    # Callback column was cut at the panel's edge
    for name in ("stalls", "requests"):
        wide, inner, scroller, count = tables[name]
        assert count > 0 and wide <= inner and (scroller is None or wide <= scroller), (
            name,
            tables[name],
        )
    callback = page.locator("#stalls tbody tr").first.locator("td").nth(4).inner_text()
    assert callback.startswith("RequestHandler._handle_request"), callback
    page.screenshot(path=str(REPORTS / "ui-1024-flamegraph.png"), full_page=True)
    for view in ("tasks", "frameworks", "compare"):
        page.locator(f'.tabs button[data-view="{view}"]').click()
        page.wait_for_timeout(500)
        page.wait_for_function(BUSY)
        assert page.evaluate(WRAPPED) == [], view
        for name, (wide, inner, scroller, _) in ((r[0], r[1:]) for r in page.evaluate(TABLES)):
            # within its panel, or scrolling within a container of its own there
            assert wide <= inner or (scroller is not None and scroller <= inner), (view, name)
    page.screenshot(path=str(REPORTS / "ui-1024-frameworks.png"), full_page=True)
    assert failed == [], failed
    page.close()


def test_gil_holders_of_no_tenth_of_a_percent_are_counted_not_listed(
    browser: Browser, run: Run
) -> None:
    """The rule on a stats document of one loop that waited for the GIL 40% of its samples,
    held by four threads: two listed, two of under 0.05% of its waits said in a last row; and
    all four under it: the table says that much, not that nobody held it."""
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    page.goto(f"{run.server.url}/?view=frameworks")
    loaded(page, "#frameworks")
    rendered = page.evaluate(
        """async () => {
            const { renderGilHolders } = await import("./js/frameworks.js");
            const table = document.createElement("table"), summary = document.createElement("p");
            const holders = (shares) => shares.map((share, i) => ({ thread: `t${i}`,
                site: `work (app.py:${i + 1})`, share }));
            const doc = (shares) => ({ targets: [{ pid: 7, framework: "aiohttp",
                loop: "asyncio", gil_share: 0.4, gil_holders: holders(shares) }] });
            const rows = () => [...table.querySelectorAll("tbody tr")].map(
                tr => [tr.dataset.thread || null, tr.dataset.hidden || null, tr.innerText]);
            renderGilHolders(table, summary, doc([0.9, 0.0996, 0.0004, 0.0001]), null);
            const some = rows();
            renderGilHolders(table, summary, doc([0.0003, 0.0002]), null);
            return { some, none: rows(), summary: summary.textContent };
        }"""
    )
    some = rendered["some"]
    assert [row[0] for row in some] == ["t0", "t1", None], some
    assert "90.0%" in some[0][2] and "10.0%" in some[1][2]
    assert some[2][1] == "2" and "2 more holders under 0.05% of the loop's waits" in some[2][2]
    none = rendered["none"]
    assert len(none) == 1 and none[0][1] == "2", none
    assert rendered["summary"] == "PID 7: the loop waited for the GIL in 40.0% of its samples"
    page.close()
