"""The UI, in real Chromium, of a loop starved of the GIL (``targets/gil.py``: a thread named
``holder`` spins in pure Python beside it), of one collecting garbage, and of one at its
container's CPU limit (a loop computing between its awaits, in a cgroup v1 limited to 0.2 CPU):
the timeline's gil and cpu_wait series, the GIL and CPU wait filters of the flamegraph, the
legend, the loop's gil, cpu_wait and gc shares, and the table of who held the GIL while the loop
waited, each as the API has it. One server samples the three for the module. A module of its own:
the spinning thread takes a core, which the other UI tests' load should not have to share."""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, sync_playwright

from tests.support import cgroups
from tests.support.charts import PLOT_BOTTOM, PLOT_TOP, bucket_x, hover
from tests.support.helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PYTHON,
    REPORTS,
    Serve,
    Servers,
    Spawner,
    wait_until,
)

#: Seconds of 1 s windows the range holds.
SECONDS = 8

#: A loop whose one task computes 60 ms of CPU time between its awaits: in a group at 0.2 CPU,
#: each step waits for a CPU most of the time it takes.
THROTTLED = """
import asyncio, time

def crunch(ms):
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass

async def main():
    while True:
        crunch(60)
        await asyncio.sleep(0)

asyncio.run(main())
"""

#: The timeline's legend of the loop's states.
LEGEND = "#timeline-title + .legend"


@dataclass
class Run:
    """The targets sampled over a fixed range of final windows."""

    server: Serve
    #: PIDs of the starved loop, the collector and (None without a cgroup) the throttled loop
    starved: int
    collector: int
    throttled: int | None
    #: target ids by PID
    ids: dict[int, int]
    start: int
    end: int
    #: why there is no throttled loop ("" when there is)
    no_cgroup: str

    @property
    def span(self) -> str:
        return f"from={self.start}&to={self.end}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        raise RuntimeError("chromium is not installed (.ci/run installs it with apt-get)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with contextlib.ExitStack() as stack:
        spawn = stack.enter_context(contextlib.closing(Spawner()))
        servers = stack.enter_context(contextlib.closing(Servers()))
        starved = spawn.target("gil", "--holder", "spin")
        collector = spawn.target("gil", "--gc")
        pids = [starved.pid, collector.pid]
        throttled, no_cgroup = None, ""
        try:
            group = stack.enter_context(cgroups.limited_group())
        except cgroups.Unavailable as err:
            no_cgroup = str(err)
        else:
            throttled = spawn.command(str(PYTHON), "-c", THROTTLED).pid
            (group / "cgroup.procs").write_text(f"{throttled}\n")
            pids.append(throttled)
        start = math.floor(time.time())
        db = tmp_path_factory.mktemp("gil") / "gil.db"
        server = servers(db, "--window", "1", *(arg for pid in pids for arg in ("--pid", str(pid))))
        assert wait_until(lambda: len(server.targets()) == len(pids), timeout=20), server.targets()
        time.sleep(SECONDS + 2)
        end = math.floor(time.time()) - 2
        ids = {t["pid"]: t["id"] for t in server.targets()}
        yield Run(server, starved.pid, collector.pid, throttled, ids, start, end, no_cgroup)


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


def pick_state(page: Page, state: str) -> None:
    """Clicks the state filter's button of ``state`` and waits until the flamegraph has it."""
    page.locator(f'#state-filter button[data-state="{state}"]').click()
    page.wait_for_function(
        "state => new URLSearchParams(location.search).get('state') === state"
        " && document.querySelector('#flame').dataset.loading === '0'",
        arg=state,
    )


def words(element: Locator) -> str:
    """An element's text as one line of words."""
    return " ".join(element.inner_text().split())


def samples(folded: bytes) -> int:
    return sum(int(row.rpartition(" ")[2]) for row in folded.decode().splitlines())


def test_the_gil_filter_timeline_shares_and_holders_show(browser: Browser, run: Run) -> None:
    server, span, start, end = run.server, run.span, run.start, run.end
    hog = run.ids[run.starved]
    line = server.settled(f"/api/timeline?target={hog}&{span}")
    stats = server.settled(f"/api/stats?{span}")
    by_pid = {t["pid"]: t for t in stats["targets"]}
    assert by_pid[run.starved]["gil_share"] > 0.5, by_pid

    # the flamegraph of the starved target: the GIL filter keeps the loop's waits for the GIL
    page = open_page(browser, f"{server.url}/?target={hog}&{span}", "#flame")
    legend = page.locator(LEGEND).inner_text()
    assert "gil" in legend and "waiting for the GIL" in legend
    pick_state(page, "gil")
    # the page shows the event-loop threads unless asked for all (the holder waits at times too)
    folded = server.request(f"/api/profile?target={hog}&{span}&state=gil&threads=loop")[1]
    assert page.eval_on_selector("#flame", "el => el.dataset.samples") == str(samples(folded))
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

    # the frameworks view: gil and gc shares, and who held the GIL, of every target
    page = open_page(browser, f"{server.url}/?view=frameworks&{span}", "#frameworks")
    expected = stats["frameworks"]["unknown"]
    card = page.locator('.fw-card[data-framework="unknown"]')
    assert float(card.get_attribute("data-gil-share") or -1) == expected["gil_share"]
    shown = card.locator('[data-share="gil"]').inner_text()
    assert abs(float(shown[:-1]) - 100 * expected["gil_share"]) <= 0.05 + 1e-9, shown
    shown = card.locator('[data-share="gc"]').inner_text()
    assert abs(float(shown[:-1]) - 100 * expected["gc_share"]) <= 0.05 + 1e-9, shown
    rows = page.locator("#gil-holders tbody tr[data-share]")
    held = by_pid[run.starved]["gil_holders"]
    # the collector's loop never waited, nor did the throttled one (it has no other thread);
    # holders of under 0.05% of the waits are counted in a last row, not listed
    listed = [h for h in held if f"{100 * h['share']:.1f}" != "0.0"]
    assert rows.count() == len(listed) and listed, held
    hidden = page.locator("#gil-holders tbody tr[data-hidden]")
    assert hidden.count() == (1 if len(held) > len(listed) else 0), held
    first = rows.first
    assert first.get_attribute("data-pid") == str(run.starved)
    assert first.get_attribute("data-thread") == "holder" == held[0]["thread"]
    assert first.get_attribute("data-site") == held[0]["site"]
    assert held[0]["site"].startswith("spin (targets/gil.py:")
    assert "spin" in first.inner_text() and "holder" in first.inner_text()
    assert float(first.get_attribute("data-share") or -1) == held[0]["share"]
    summary = page.locator("#gil-summary").inner_text()
    assert f"PID {run.starved}: the loop waited for the GIL" in summary
    page.screenshot(path=str(REPORTS / "ui-gil-frameworks.png"), full_page=True)
    assert not page.errors  # type: ignore[attr-defined]

    # with the collector picked, its loop never waited: the table says so
    page = open_page(
        browser,
        f"{server.url}/?view=frameworks&target={run.ids[run.collector]}&{span}",
        "#frameworks",
    )
    assert "never waited for the GIL" in page.locator("#gil-holders").inner_text()
    assert not page.errors  # type: ignore[attr-defined]


def rgb(page: Page, x: float, y: float) -> tuple[int, int, int]:
    """The colour the timeline's canvas drew at (x, y), in CSS pixels."""
    pixel = page.eval_on_selector(
        "#timeline canvas",
        "(el, [x, y]) => { const r = el.width / el.clientWidth;"
        " return [...el.getContext('2d').getImageData(Math.round(x * r), Math.round(y * r), 1, 1)"
        ".data].slice(0, 3); }",
        [x, y],
    )
    return (int(pixel[0]), int(pixel[1]), int(pixel[2]))


def nice_ceil(value: float) -> float:
    """The chart's top, as timeline.js rounds it (niceCeil)."""
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 1.2, 1.6, 2, 3, 4, 5, 6, 8, 10) if m * power >= value)


def test_cpu_wait_shows_in_the_legend_filter_timeline_and_shares(
    browser: Browser, run: Run
) -> None:
    """A loop at its CPU limit waits for a CPU most of its samples: the legend names the state
    (and busy as on a CPU), the CPU wait filter keeps exactly those samples, each ending in the
    [cpu_wait] leaf, the timeline draws them in their own colour between busy and the others,
    its tooltip counts them as the API does, the frameworks view gives their share, and Top
    functions counts none of them as any function's self time."""
    if run.throttled is None:
        cgroups.needed(run.no_cgroup)
    server, span, start, end = run.server, run.span, run.start, run.end
    target = run.ids[run.throttled]
    line = server.settled(f"/api/timeline?target={target}&{span}")
    stats = server.settled(f"/api/stats?target={target}&{span}")
    (mine,) = stats["targets"]
    assert mine["cpu_wait_share"] > 0.5, mine
    waited = sum(b["cpu_wait"] for b in line["buckets"])
    assert waited > 0 and line["loop_threads_only"], line

    page = open_page(browser, f"{server.url}/?target={target}&{span}", "#flame")
    legend = page.locator(LEGEND)
    assert words(legend.locator('li[data-state="busy"]')) == "busy · on a CPU"
    assert (
        words(legend.locator('li[data-state="cpu_wait"]'))
        == "cpu_wait · runnable, waiting for a CPU (CPU limit or busy cores)"
    )
    assert [li.get_attribute("data-state") for li in legend.locator("li").all()] == [
        "busy",
        "cpu_wait",
        "blocked",
        "gil",
        "idle",
    ]
    # its swatch is a colour of its own: not busy's, gil's, nor any other state's
    swatches = {
        state: page.eval_on_selector(
            f'{LEGEND} li[data-state="{state}"] .swatch',
            "el => getComputedStyle(el).backgroundImage + getComputedStyle(el).backgroundColor",
        )
        for state in ("busy", "cpu_wait", "blocked", "gil", "idle")
    }
    assert "rgb(126, 87, 194)" in swatches["cpu_wait"], swatches
    assert len(set(swatches.values())) == len(swatches), swatches
    assert "[cpu_wait]" in page.locator(".legend.layers").inner_text()

    # the timeline: its description counts the state, the tooltip gives the bucket's samples
    label = page.eval_on_selector("#timeline canvas", "el => el.getAttribute('aria-label')")
    assert "cpu_wait " in label, label
    bucket = max(line["buckets"], key=lambda b: b["cpu_wait"])
    x = bucket_x(page, "#timeline", bucket["t"] + line["step"] / 2, start, end)
    tip = hover(page, "#timeline", x)
    shown = tip.locator('[data-series="cpu_wait"]')
    assert shown.locator(".swatch.cpu_wait").count() == 1
    assert shown.inner_text().split()[1].replace(",", "") == str(bucket["cpu_wait"]), bucket
    # ... and draws them in violet, right above busy: a pixel mid-way up its cpu_wait part
    keys = ("busy", "cpu_wait", "blocked", "gil", "idle")
    top = nice_ceil(max(sum(b[k] for k in keys) for b in line["buckets"]))
    height = PLOT_BOTTOM - PLOT_TOP
    y = PLOT_BOTTOM - (bucket["busy"] + bucket["cpu_wait"] / 2) / top * height
    assert bucket["cpu_wait"] / top * height > 6, (bucket, top)
    page.mouse.move(0, 0)
    red, green, blue = rgb(page, x, y)
    assert blue > red > green, ((red, green, blue), bucket)

    # each step of the loop is a stall that waited for a CPU most of it: marked in that colour
    stalls = server.json(f"/api/stalls?target={target}&{span}")["stalls"]
    assert any(s["state"] == "cpu_wait" for s in stalls), stalls
    page.wait_for_function("() => document.querySelector('#stalls').dataset.loading === '0'")
    assert page.locator('#timeline .stall-mark[data-state="cpu_wait"]').count() > 0
    assert page.locator('#stalls tbody tr[data-state="cpu_wait"] .swatch.cpu_wait').count() > 0
    # with what the cgroup throttled around each, from serve's readings of its cpu.stat
    starved = [s for s in stalls if s["state"] == "cpu_wait" and s["throttling"]]
    assert starved and all(s["throttling"]["throttled_periods"] > 0 for s in starved), stalls
    row = page.locator('#stalls tbody tr[data-state="cpu_wait"] [data-throttling]').first
    assert re.fullmatch(
        r"the cgroup throttled \d+ of \d+ periods, [\d.]+ s lost, over [\d.]+ s around it",
        row.inner_text(),
    ), row.inner_text()

    # the CPU wait filter keeps the loop's waits for a CPU, every one of them ending in the leaf
    pick_state(page, "cpu_wait")
    path = f"/api/profile?target={target}&{span}&threads=loop&state="
    waits = samples(server.request(path + "cpu_wait")[1])
    assert waits > 0
    assert page.eval_on_selector("#flame", "el => el.dataset.samples") == str(waits)
    assert page.locator('#state-filter button[aria-checked="true"]').inner_text() == "CPU wait"
    page.locator("#search").fill("[cpu_wait]")
    page.wait_for_function(
        "() => Number(document.querySelector('#search-status').dataset.matches) > 0"
    )
    assert float(page.locator("#search-status").get_attribute("data-share") or 0) == 1.0
    page.locator("#search").fill("")
    # no busy sample under the filter: Top functions says so, and counts the waits as no one's
    text = page.locator("#functions").inner_text()
    assert text.startswith("No busy samples in this selection"), text
    assert "[cpu_wait]" in text
    page.screenshot(path=str(REPORTS / "ui-cpu-wait-flamegraph.png"), full_page=True)
    # Off-CPU takes them too: all but busy
    pick_state(page, "offcpu")
    off = samples(server.request(path + "idle,blocked,gil,cpu_wait")[1])
    assert off >= waits
    assert page.eval_on_selector("#flame", "el => el.dataset.samples") == str(off)
    assert not page.errors  # type: ignore[attr-defined]

    # Top functions of all its samples: the busy ones only, no synthetic leaf of any state
    doc = server.json(f"/api/functions?target={target}&{span}&threads=loop")
    assert doc["busy"] == round(mine["busy_share"] * mine["samples"]), (doc["busy"], mine)
    assert not [f for f in doc["functions"] if f["name"].startswith("[")], doc["functions"]
    crunch = next(f for f in doc["functions"] if f["name"] == "crunch")
    assert 0 < crunch["self"] <= doc["busy"], (crunch, doc["busy"])

    # the frameworks view: the loop's share of waits for a CPU, per framework and per target
    page = open_page(
        browser, f"{server.url}/?view=frameworks&target={target}&{span}", "#frameworks"
    )
    everyone = server.settled(f"/api/stats?{span}")
    expected = everyone["frameworks"]["unknown"]["cpu_wait_share"]
    card = page.locator('.fw-card[data-framework="unknown"]')
    assert float(card.get_attribute("data-cpu-wait-share") or -1) == expected
    shown_share = card.locator('[data-share="cpu_wait"]').inner_text()
    assert abs(float(shown_share[:-1]) - 100 * expected) <= 0.05 + 1e-9, shown_share
    assert card.locator(".sharebar .cpu_wait").count() == 1
    head = page.locator("#fw-targets thead th").all_inner_texts()
    row = page.locator("#fw-targets tbody tr").filter(has_text=f"{run.throttled}").first
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == str(run.throttled), cells
    # to a tenth of a percent, rounded as the page rounds (80.25 is 80.3 in JS, 80.2 in Python)
    shown = cells[head.index("CPU wait")]
    assert abs(float(shown[:-1]) - 100 * mine["cpu_wait_share"]) <= 0.05 + 1e-9, (head, cells)
    page.screenshot(path=str(REPORTS / "ui-cpu-wait-frameworks.png"), full_page=True)
    assert not page.errors  # type: ignore[attr-defined]
