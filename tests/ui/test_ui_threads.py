"""The UI of a first run, in real Chromium: a real aiohttp service with an idle helper thread
(``pretend-service``) sampled by a fresh ``sidecar serve``, so its history is seconds long.
The views show the event-loop threads by default and every thread one click away, each count
saying what it counts as the API counts it; the thread filter lists the threads the range holds;
the live timeline fits the short history; a click on a Top functions row selects its function;
the Frameworks view folds blocking sites under its threshold into "other"."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from tests.support.helpers import REPORTS, Serve, Servers, Spawner, wait_until
from tests.ui import test_ui_gil
from tests.ui.test_ui import flame_state, query, wait_loaded
from tests.ui.test_ui_gil import open_page

#: The module's Chromium: test_ui_gil's fixture.
browser = test_ui_gil.browser


@dataclass
class Run:
    """A service sampled for a few seconds, and a fixed range of final windows of it."""

    server: Serve
    target: int
    first_seen: float
    span: str
    threads: list[dict[str, Any]]

    def samples(self, query: str, span: str | None = None) -> int:
        """Samples of /api/profile over the range (or ``span``) with ``query``."""
        status, body, _ = self.server.request(
            f"/api/profile?target={self.target}&{span or self.span}&format=folded&{query}"
        )
        assert status == 200, body
        return sum(int(row.rpartition(" ")[2]) for row in body.decode().splitlines())


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with contextlib.closing(Spawner()) as spawn, contextlib.closing(Servers()) as servers:
        service = spawn.target("aiohttp_app")
        start = math.floor(time.time())
        db = tmp_path_factory.mktemp("threads") / "sidecar.db"
        server = servers(db, "--window", "1", "--pid", str(service.pid))

        def names() -> set[str]:
            doc = server.json(f"/api/threads?from={start}")
            return {t["name"] for t in doc["threads"]}

        assert wait_until(lambda: {"MainThread", "pretend-service"} <= names(), timeout=20)
        # busy loop samples for Top functions (under the 100 ms of a stall), first: the
        # range ends a whole second before now, so the spin must end well before it does
        service.get("/freeze?how=spin&ms=80", timeout=30)
        for _ in range(3):  # blocking sites for the Frameworks view
            service.get("/freeze?how=sleep&ms=150", timeout=30)
        time.sleep(2.5)
        end = math.floor(time.time()) - 1
        (row,) = server.targets()
        span = f"from={start}&to={end}"
        path = f"/api/threads?target={row['id']}&{span}"
        assert wait_until(lambda: server.json(path) == server.json(path), timeout=10)
        threads = server.json(path)["threads"]
        yield Run(server, row["id"], row["first_seen"], span, threads)


def flame_loaded(page: Page) -> None:
    page.wait_for_function("() => document.querySelector('#flame').dataset.loading === '0'")


def test_the_loop_threads_by_default_all_threads_one_click_away(browser: Browser, run: Run) -> None:
    helper = next(t for t in run.threads if t["name"] == "pretend-service")
    loop, every = run.samples("threads=loop"), run.samples("threads=all")
    assert 0 < loop < every and helper["samples"] > 0 and not helper["loop"]
    page = open_page(browser, f"{run.server.url}/?target={run.target}&{run.span}", "#flame")
    checked = page.locator('#thread-scope button[aria-checked="true"]')
    assert checked.inner_text() == "Event-loop threads"
    # the flamegraph and its summary count the loop thread's samples, and say so
    assert int(flame_state(page)["samples"]) == loop
    assert flame_state(page)["counts"] == "loop-thread samples"
    assert f"{loop:,} loop-thread samples" in page.locator("#flame-summary").inner_text()
    busy = run.samples("threads=loop&state=busy")  # Top functions: the loop's busy samples
    scope = page.locator("#functions-scope").inner_text()
    assert f"shares of {busy:,} busy loop-thread samples" in scope, scope
    assert "pretend-service" not in page.locator("#search").input_value()
    scope = page.locator("#timeline-scope").inner_text()
    assert scope.startswith("loop-thread samples per"), scope

    # the thread filter lists the range's threads, the event loop's first, with their samples
    options = page.eval_on_selector_all(
        "#thread option", "els => els.map(o => [o.value, o.dataset.loop, o.dataset.samples])"
    )
    assert options[0][0] == "" and options[1][:2] == ["MainThread", "true"], options
    assert ["pretend-service", "false", str(helper["samples"])] in options, options

    # one click: every thread, the helper's idle loop included
    page.locator('#thread-scope button[data-threads="all"]').click()
    page.wait_for_function(
        "n => document.querySelector('#flame').dataset.loading === '0'"
        " && document.querySelector('#flame').dataset.samples === String(n)",
        arg=every,
    )
    assert query(page)["threads"] == "all"
    assert f"{every:,} all-thread samples" in page.locator("#flame-summary").inner_text()
    page.wait_for_function(
        "() => document.querySelector('#timeline-scope').innerText.startsWith('all-thread')"
    )
    page.locator("#search").fill("serve_forever")
    page.wait_for_function(
        "() => Number(document.querySelector('#search-status').dataset.matches) > 0"
    )
    page.screenshot(path=str(REPORTS / "ui-threads-all.png"), full_page=True)
    page.locator("#search").fill("")

    # one thread: its samples only
    page.locator("#thread").select_option("pretend-service")
    page.wait_for_function(
        "n => document.querySelector('#flame').dataset.loading === '0'"
        " && document.querySelector('#flame').dataset.samples === String(n)",
        arg=helper["samples"],
    )
    assert query(page)["thread"] == "pretend-service"
    assert flame_state(page)["counts"] == "samples of thread pretend-service"

    # and back to the loop threads: the thread picked is dropped
    page.locator('#thread-scope button[data-threads="loop"]').click()
    page.wait_for_function(
        "n => document.querySelector('#flame').dataset.loading === '0'"
        " && document.querySelector('#flame').dataset.samples === String(n)",
        arg=loop,
    )
    assert "thread" not in query(page) and "threads" not in query(page)
    assert page.locator("#thread").input_value() == ""
    assert not page.errors  # type: ignore[attr-defined]


def test_a_short_history_fills_the_live_timeline(browser: Browser, run: Run) -> None:
    page = open_page(browser, f"{run.server.url}/?target={run.target}", "#flame")
    page.wait_for_function("() => document.querySelector('#timeline').dataset.to")
    shown = page.eval_on_selector("#timeline", "el => [Number(el.dataset.from), el.dataset.to]")
    start, end = shown[0], float(shown[1])
    # the default 15 minutes, fitted: from the first sample (or 30 s back) to now
    assert start <= math.floor(run.first_seen), (shown, run.first_seen)
    assert end - start <= max(30, end - math.floor(run.first_seen)), shown
    label = page.locator("#range-label").inner_text()
    assert label.startswith("last 15 min · live · data since "), label
    assert "ticks" in page.locator(f'.target[data-id="{run.target}"] .t-meta').inner_text()
    page.locator(".timeline-panel").screenshot(path=str(REPORTS / "ui-short-history.png"))
    assert not page.errors  # type: ignore[attr-defined]


def test_a_click_on_a_top_functions_row_selects_it(browser: Browser, run: Run) -> None:
    page = open_page(browser, f"{run.server.url}/?target={run.target}&{run.span}", "#flame")
    hint = page.locator("#functions-hint").inner_text()
    assert hint.startswith("click a row to highlight the function in the flamegraph"), hint
    row = page.locator("#functions tbody tr").first
    key = row.get_attribute("data-key")
    assert key
    row.locator("td.num").first.click()  # its counts, not its name
    assert query(page)["fn"] == key
    page.wait_for_function(
        "() => Number(document.querySelector('#search-status').dataset.matches) > 0"
    )
    assert page.locator('#functions tr[aria-selected="true"]').get_attribute("data-key") == key
    assert page.locator("#sandwich-name").inner_text() == key
    # again: cleared
    page.locator(f'#functions tr[data-key="{key}"] td.num').first.click()
    assert "fn" not in query(page)
    assert page.locator('#functions tr[aria-selected="true"]').count() == 0
    assert not page.errors  # type: ignore[attr-defined]


def test_blocking_sites_under_the_threshold_fold_into_other(browser: Browser, run: Run) -> None:
    page = open_page(browser, f"{run.server.url}/?view=frameworks&{run.span}", "#frameworks")
    card = page.locator('.fw-card[data-framework="aiohttp"]')
    assert 'sites under 3 samples folded into "other"' in card.inner_text()
    first = card.locator(".sites li").first.inner_text()
    assert first.startswith("freeze_sleep"), first  # 3 freezes of 150 ms: well over 3 samples
    # the rule on sites of 40, 3, 2 and 1 samples: two listed, two folded into one row
    rendered = page.evaluate(
        """async () => {
            const { renderFrameworks } = await import("./js/frameworks.js");
            const host = document.createElement("div");
            const sites = new Map([["a (app.py:1)", 40], ["b (app.py:2)", 3],
                                   ["c (app.py:3)", 2], ["d (app.py:4)", 1]]);
            const stats = { frameworks: { aiohttp: { samples: 100, busy_share: 1 } }, targets: [] };
            renderFrameworks(host, stats, { targets: [], sites: new Map([["aiohttp", sites]]) });
            const other = host.querySelector(".sites li.other");
            return {
                rows: [...host.querySelectorAll(".sites li")].map(li => li.innerText),
                other: { ...other.dataset },
            };
        }"""
    )
    rows = rendered["rows"]
    assert len(rows) == 3 and rows[0].startswith("a (app.py:1)") and rows[1].startswith("b ("), rows
    assert rows[2].startswith("other: 2 sites"), rows
    assert rendered["other"] == {"sites": "2", "samples": "3"}
    wait_loaded(page, "#frameworks")
    assert not page.errors  # type: ignore[attr-defined]


def test_compare_counts_the_threads_the_flamegraph_counts(browser: Browser, run: Run) -> None:
    """Compare diffs the event-loop threads' samples by default, as /api/diff?threads=loop
    does, says so, and all threads are one click away there too."""
    start, end = (int(part.split("=")[1]) for part in run.span.split("&"))
    # two halves of where the range has samples: from the first window sampled on
    mid = (max(start, math.floor(run.first_seen)) + end + 1) // 2
    ranges = f"target={run.target}&from={start}&to={mid}&from_b={mid}&to_b={end}"

    def diffed(threads: str) -> dict[str, Any]:
        doc: dict[str, Any] = run.server.json(f"/api/diff?{ranges}&format=json&threads={threads}")
        return doc

    def samples(span: str, threads: str) -> int:
        return run.samples(f"threads={threads}", span)

    assert samples(f"from={start}&to={mid}", "loop") > 0, (start, mid, run.first_seen)
    assert samples(f"from={mid}&to={end}", "loop") > 0, (mid, end)
    loop, every = diffed("loop"), diffed("all")
    assert (loop["threads"], every["threads"]) == ("loop", "all")
    for doc, threads in ((loop, "loop"), (every, "all")):
        assert doc["before_samples"] == samples(f"from={start}&to={mid}", threads), doc
        assert doc["after_samples"] == samples(f"from={mid}&to={end}", threads), doc
    assert loop["after_samples"] < every["after_samples"]
    headers = run.server.request(f"/api/diff?{ranges}&format=folded&threads=loop")[2]
    assert headers["x-sidecar-threads"] == "loop"

    page = open_page(
        browser,
        f"{run.server.url}/?view=compare&target={run.target}&{run.span}"
        f"&a={start}~{mid}&b={mid}~{end}",
        "#diff-flame",
    )
    checked = page.locator('#compare-scope button[aria-checked="true"]')
    assert checked.inner_text() == "Event-loop threads"
    assert page.locator("#compare-counts").inner_text() == "· loop-thread samples"
    assert page.locator("#frames-of").inner_text() == "loop-thread samples"
    diff = page.eval_on_selector("#diff-flame", "el => ({...el.dataset})")
    assert int(diff["samples"]) == loop["after_samples"], diff
    page.locator('#compare-scope button[data-threads="all"]').click()
    page.wait_for_function(
        "n => document.querySelector('#diff-flame').dataset.loading === '0'"
        " && document.querySelector('#diff-flame').dataset.samples === String(n)",
        arg=every["after_samples"],
    )
    assert query(page)["threads"] == "all"
    assert page.locator("#compare-counts").inner_text() == "· all-thread samples"
    assert page.locator("#frames-of").inner_text() == "all-thread samples"
    assert not page.errors  # type: ignore[attr-defined]
