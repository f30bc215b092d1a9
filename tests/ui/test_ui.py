"""The web UI end to end: Debian's Chromium, driven by Playwright, against a real ``sidecar serve``
sampling the demo aiohttp and Tornado services under wrk load.

One server, one browser and one load for the module; each test opens its own page. Screenshots of
the main views land in tests/reports/ui-*.png.
"""

from __future__ import annotations

import json
import math
import re
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from sidecar.rules.frames import STATES
from tests.support.charts import PLOT_BOTTOM, PLOT_TOP, bucket_x, hover
from tests.support.helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    HARD_CONNECTIONS,
    REPORTS,
    LoadDriver,
    Serve,
    Spawner,
    stop_process,
    wait_until,
)

#: Enough for every test to find load on both targets (the module takes well under this).
LOAD_SECONDS = 240
#: The shortest fixed range the tests look at, in seconds.
MIN_WINDOW = 16

#: The Tasks chart.
TASKS_CHART = "#tasks-timeline"

#: The aiohttp handler the tests look for; it runs briefly between awaits.
HANDLER = "hard_handler (targets/aiohttp_app.py:"


@dataclass
class UI:
    """The running stack: a sidecar serving the UI, its targets, and a browser."""

    base: str
    browser: Browser
    aiohttp: dict[str, Any]
    tornado: dict[str, Any]
    started: float

    def api(self, path: str) -> Any:
        return get_json(self.base + path)

    def folded(self, target: int, span: str = "") -> str:
        try:
            with urllib.request.urlopen(
                f"{self.base}/api/profile?target={target}&format=folded{span}", timeout=30
            ) as response:
                return str(response.read().decode())
        except urllib.error.HTTPError:
            return ""

    def window(self) -> tuple[int, int]:
        """A fixed range from the first samples to a few seconds ago (windows that are final),
        at least MIN_WINDOW seconds long, in which busy samples caught the aiohttp handler."""
        time.sleep(max(0.0, self.started + MIN_WINDOW + 3 - time.time()))
        for _ in range(20):
            start, end = math.floor(self.started), math.floor(time.time()) - 3
            # a window is written a moment after it ends: wait until the range stops growing
            previous = -1
            for _ in range(40):
                buckets = self.api(f"/api/timeline?from={start}&to={end}")["buckets"]
                total = sum(b["busy"] + b["idle"] + b["blocked"] for b in buckets)
                if total == previous:
                    break
                previous = total
                time.sleep(0.5)
            span = f"&from={start}&to={end}"
            if HANDLER in self.folded(self.aiohttp["id"], span):
                break
            time.sleep(1.0)
        return start, end

    def page(self) -> Page:
        context = self.browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.errors = errors  # type: ignore[attr-defined]
        return page

    def open(self, path: str, loaded: str) -> Page:
        """A new page at ``path`` of this sidecar, once the element ``loaded`` has loaded."""
        page = self.page()
        page.goto(self.base + path)
        wait_loaded(page, loaded)
        return page


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UI]:
    if not Path(CHROMIUM).exists():
        raise RuntimeError("chromium is not installed (.ci/run installs it with apt-get)")
    spawner = Spawner()
    load = LoadDriver()
    server: Serve | None = None
    playwright = sync_playwright().start()
    try:
        aio = spawner.target("aiohttp_app", "--uvloop")
        tor = spawner.target("tornado_app")
        load.start(aio.url + "/hard", seconds=LOAD_SECONDS, connections=HARD_CONNECTIONS)
        load.start(tor.url + "/hard", seconds=LOAD_SECONDS, connections=4)
        load.start(tor.url + "/blocking", seconds=LOAD_SECONDS, connections=1)
        db = tmp_path_factory.mktemp("ui") / "sidecar.db"
        server = Serve(db, "--window", "1", "--pid", str(aio.pid), "--pid", str(tor.pid))
        base = server.url
        started = time.time()

        def targets() -> dict[str, dict[str, Any]]:
            with urllib.request.urlopen(base + "/api/targets", timeout=10) as response:
                return {t["framework"]: t for t in json.loads(response.read())}

        assert wait_until(lambda: {"aiohttp", "tornado"} <= set(targets()), timeout=20)
        found = targets()
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        stack = UI(base, browser, found["aiohttp"], found["tornado"], started)
        # the handlers run briefly between awaits: wait until busy samples caught them
        assert wait_until(
            lambda: HANDLER in stack.folded(found["aiohttp"]["id"]),
            timeout=90,
        )
        assert wait_until(lambda: "[blocked]" in stack.folded(found["tornado"]["id"]), timeout=30)
        yield stack
        browser.close()
    finally:
        playwright.stop()
        load.close()
        if server is not None:
            stop_process(server.popen, signal.SIGTERM, timeout=30)
        spawner.close()


def shot(page: Page, name: str) -> Path:
    path = REPORTS / f"ui-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def wait_loaded(page: Page, selector: str) -> None:
    page.wait_for_function(
        "sel => { const el = document.querySelector(sel);"
        " return el && el.dataset.loading === '0'; }",
        arg=selector,
    )


def show_requests(page: Page) -> None:
    """Picks Requests in the Tasks view and waits until the view has loaded them."""
    page.locator('#tasks-filter button[data-tasks="requests"]').click()
    page.wait_for_function(
        "() => new URLSearchParams(location.search).get('tasks') === 'requests'"
        " && document.querySelector('#view-tasks').dataset.loading === '0'"
    )


def flame_state(page: Page) -> dict[str, Any]:
    data: dict[str, Any] = page.eval_on_selector("#flame", "el => ({...el.dataset})")
    return data


def query(page: Page) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(page.url).query).items()}


def test_targets_list_shows_aiohttp_and_tornado(ui: UI) -> None:
    page = ui.page()
    page.goto(f"{ui.base}/?range=300")
    for framework, loop, info in (
        ("aiohttp", "uvloop", ui.aiohttp),
        ("tornado", "asyncio", ui.tornado),
    ):
        item = page.locator(f'.target[data-framework="{framework}"]')
        item.wait_for()
        text = item.inner_text()
        assert framework in text and loop in text
        assert f"PID {info['pid']}" in text
        assert "alive" in text and "ticks" in text
        assert f"targets.{framework}_app" in text  # the command
    page.locator(f'.target[data-id="{ui.tornado["id"]}"]').click()
    assert query(page)["target"] == str(ui.tornado["id"])
    page.wait_for_function(
        "id => document.querySelector('#flame').dataset.target === String(id)"
        " && document.querySelector('#flame').dataset.loading === '0'",
        arg=ui.tornado["id"],
    )
    assert int(flame_state(page)["frames"]) > 10
    assert page.locator("#timeline").get_attribute("data-buckets") not in (None, "0")
    shot(page, "flamegraph")
    page.screenshot(path=str(REPORTS / "ui-overview.png"))  # the first screen, for the README
    assert not page.errors  # type: ignore[attr-defined]


def test_selecting_a_range_changes_the_flamegraph(ui: UI) -> None:
    start, end = ui.window()
    page = ui.open(f"/?target={ui.aiohttp['id']}&from={start}&to={end}", "#flame")
    whole = flame_state(page)
    assert (whole["from"], whole["to"]) == (str(start), str(end))
    assert int(whole["samples"]) > 0

    box = page.locator("#timeline canvas").bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.35, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.75, y, steps=6)
    page.mouse.up()
    page.wait_for_function(
        "from => { const d = document.querySelector('#flame').dataset;"
        " return d.loading === '0' && d.from !== from; }",
        arg=whole["from"],
    )
    part = flame_state(page)
    sel_from, sel_to = (float(v) for v in query(page)["sel"].split("~"))
    assert start < sel_from < sel_to < end
    assert (float(part["from"]), float(part["to"])) == (sel_from, sel_to)
    assert 0 < int(part["samples"]) < int(whole["samples"])
    assert "Selected" in page.locator("#selection-label").inner_text()
    shot(page, "selection")

    page.locator("#clear-selection").click()
    page.wait_for_function(
        "to => { const d = document.querySelector('#flame').dataset;"
        " return d.loading === '0' && d.to === to; }",
        arg=whole["to"],
    )
    assert flame_state(page)["samples"] == whole["samples"]
    assert "sel" not in query(page)
    assert not page.errors  # type: ignore[attr-defined]


def test_search_finds_the_handler_and_functions_link_to_the_flamegraph(ui: UI) -> None:
    start, end = ui.window()
    page = ui.open(f"/?target={ui.aiohttp['id']}&from={start}&to={end}", "#flame")
    page.locator("#search").fill("hard_handler")
    status = page.locator("#search-status")
    page.wait_for_function(
        "() => Number(document.querySelector('#search-status').dataset.matches) > 0"
    )
    assert "of samples" in status.inner_text()
    assert 0 < float(status.get_attribute("data-share") or 0) < 1
    assert query(page)["q"] == "hard_handler"
    shot(page, "search")

    page.locator("#search").fill("no_such_function_anywhere")
    page.wait_for_function("() => document.querySelector('#search-status').dataset.matches === '0'")
    assert "no match" in status.inner_text()
    page.locator("#search").fill("")

    # the functions table: sort by total, pick the handler, see it highlighted
    page.locator('#functions th button[data-sort="total"]').click()
    assert page.locator('#functions th[aria-sort="descending"]').inner_text().strip() == "Total"
    row = page.locator('#functions button.fn[data-key^="hard_handler ("]')
    row.click()
    assert query(page)["fn"].startswith("hard_handler (")
    page.wait_for_function(
        "() => Number(document.querySelector('#search-status').dataset.matches) > 0"
    )
    assert "highlight: hard_handler" in status.inner_text()
    assert page.locator('#functions tr[aria-selected="true"]').count() == 1
    # and its callers and callees under the table
    assert page.locator("#sandwich-name").inner_text().startswith("hard_handler (")
    # drawn on the next frame after the pick: wait for it rather than read the first draw. The
    # handler's callers down to the script's module: every sample has its root
    page.wait_for_function("() => Number(document.querySelector('#callers').dataset.frames) > 3")
    callers = page.eval_on_selector("#callers", "el => ({...el.dataset})")
    assert int(callers["frames"]) > 3 and 0 < int(callers["samples"]) < int(
        flame_state(page)["samples"]
    )

    # keyboard: into the flamegraph, up towards the leaves, Enter zooms, Escape resets
    page.locator("#flame canvas").focus()
    for _ in range(3):
        page.keyboard.press("ArrowUp")
    page.keyboard.press("Enter")
    zoomed = flame_state(page)["zoom"]
    path = query(page)["zoom"].split(";")
    assert zoomed and path[-1] == zoomed
    # the crumbs: all, then the zoomed frame's path (its last six), names without the file
    crumbs = page.locator("#crumbs button").all_inner_texts()
    assert crumbs == ["all", *(frame_name(frame) for frame in path[-6:])], (crumbs, path)
    page.keyboard.press("Escape")
    assert flame_state(page)["zoom"] == ""

    # downloads come from the API for the same range and filters
    for button, starts in (("svg", b"<?xml"), ("folded", b""), ("speedscope", b"{")):
        page.locator(".downloads summary").click()
        with page.expect_download() as info:
            page.locator(f'.downloads button[data-format="{button}"]').click()
        body = Path(info.value.path()).read_bytes()
        assert body.startswith(starts) and len(body) > 100, button
        if button == "folded":
            assert b"hard_handler (targets/aiohttp_app.py:" in body
    assert not page.errors  # type: ignore[attr-defined]


def test_frameworks_panel_matches_api_stats(ui: UI) -> None:
    start, end = ui.window()
    page = ui.open(f"/?view=frameworks&from={start}&to={end}", "#frameworks")
    stats = ui.api(f"/api/stats?from={start}&to={end}")
    assert {"aiohttp", "tornado"} <= set(stats["frameworks"])
    for name, expected in stats["frameworks"].items():
        card = page.locator(f'.fw-card[data-framework="{name}"]')
        for state in ("idle", "busy", "blocked", "gil", "gc"):
            shown = card.locator(f'[data-share="{state}"]').inner_text()
            # the API's share shown to one decimal (JS rounds halves up, Python to even)
            assert shown.endswith("%"), shown
            percent = expected[f"{state}_share"] * 100
            assert abs(float(shown[:-1]) - percent) <= 0.05 + 1e-9, (name, state, shown)
        assert float(card.get_attribute("data-idle-share") or -1) == expected["idle_share"]
        depth = expected["depth"]
        assert card.locator('[data-depth="max"]').inner_text() == str(depth["max"])
        assert card.locator('[data-depth="p95"]').inner_text() == str(depth["p95"])
    # the loop stalls in the Tornado target's time.sleep: its top blocking call site
    sites = page.locator('.fw-card[data-framework="tornado"] .sites li')
    assert "blocking_sleep" in sites.first.inner_text()
    assert page.locator("#fw-targets tbody tr").count() == len(stats["targets"])
    shot(page, "frameworks")
    assert not page.errors  # type: ignore[attr-defined]


#: Frames of every layer and leaf, written as each CPython version and installation writes files.
RULE_FRAMES = (
    "handler (/srv/app/handlers.py:12)",
    "_handle_request (/venv/lib/python3.11/site-packages/aiohttp/web_protocol.py:452)",
    "execute (/usr/local/lib/python3.12/dist-packages/tornado/web.py:1790)",
    "_run_once (/usr/lib/python3.11/asyncio/base_events.py:1922)",
    "run (/venv/lib/python3.13/site-packages/uvloop/__init__.py:105)",
    "dumps (/usr/lib/python3.14/json/__init__.py:231)",
    "_call_with_frames_removed (<frozen importlib._bootstrap>:241)",
    "<module> (<string>:1)",
    "main (app.py:3)",
    "run (uvicorn/main.py:577)",
    "[idle]",
    "[blocked]",
    "[gil]",
    "[gc]",
    "a frame without a file",
)


def test_the_ui_reads_frames_by_the_rules_the_api_serves(ui: UI) -> None:
    """The UI keeps no copy of the leaves, the frame grammar or the layer tables: it reads each
    frame as the analysis does (analyze.layer_of_file), from GET /api/rules."""
    from sidecar.rules.frames import GC_FRAME, LEAVES, parse_frame
    from sidecar.rules.layers import layer_of_file

    rules = ui.api("/api/rules")
    assert rules["leaves"] == LEAVES and set(LEAVES) == {"idle", "blocked", "gil", "cpu_wait"}
    assert rules["gc_frame"] == GC_FRAME
    page = ui.open("/", "#flame")
    shown = page.evaluate(
        """async frames => {
            const stacks = await import("./js/stacks.js");
            return frames.map(text => {
                const info = stacks.frameInfo(text);
                return [info.name, info.file, info.line, info.layer];
            });
        }""",
        list(RULE_FRAMES),
    )
    colour = {"framework": "framework", "event_loop": "runtime", None: "runtime"}
    for text, (name, file, line, layer) in zip(RULE_FRAMES, shown, strict=True):
        frame = parse_frame(text)
        assert (name, file, line) == (frame.name, frame.file, frame.line), text
        if text in LEAVES.values():
            expected = next(state for state, leaf in LEAVES.items() if leaf == text)
        elif text == GC_FRAME:
            expected = "gc"
        elif not frame.file:
            expected = "other"
        else:
            expected = colour.get(layer_of_file(frame.file), "app")
        assert layer == expected, text
    assert not page.errors  # type: ignore[attr-defined]


def test_compare_renders_a_differential_flamegraph(ui: UI) -> None:
    start, end = ui.window()
    page = ui.open(f"/?view=compare&target={ui.aiohttp['id']}&from={start}&to={end}", "#diff-flame")
    diff = page.eval_on_selector("#diff-flame", "el => ({...el.dataset})")
    assert diff["kind"] == "diff" and int(diff["frames"]) > 5
    assert "samples" in page.locator("#verdict").inner_text()
    halves = query(page)
    (a_from, a_to), (b_from, b_to) = (halves[half].split("~") for half in ("a", "b"))
    halves_diff = ui.api(
        f"/api/diff?target={ui.aiohttp['id']}&from={a_from}&to={a_to}"
        f"&from_b={b_from}&to_b={b_to}&format=json&threads=loop"
    )
    assert shown_changes(page, "#self-changes") == expected_changes(halves_diff["self_changes"])
    # busy, idle, blocked, gil, cpu_wait
    assert page.locator("#state-changes .state-change").count() == len(STATES)
    assert page.locator("#states-of").inner_text() == "the event loop's threads"
    shot(page, "compare")

    # two targets over the same range: aiohttp before, Tornado after
    page.locator('#compare-mode button[data-mode="targets"]').click()
    page.wait_for_function(
        "() => document.querySelector('#diff-flame').dataset.loading === '0'"
        " && new URLSearchParams(location.search).get('cmp') === 'targets'"
    )
    page.locator("#compare-tb").select_option(str(ui.tornado["id"]))
    page.wait_for_function(
        "() => document.querySelector('#diff-flame').dataset.loading === '0'"
        " && new URLSearchParams(location.search).get('tb') !== null"
    )
    assert query(page)["tb"] == str(ui.tornado["id"])
    targets_diff = ui.api(
        f"/api/diff?target={ui.aiohttp['id']}&from={start}&to={end}"
        f"&target_b={ui.tornado['id']}&from_b={start}&to_b={end}&format=json&threads=loop"
    )
    assert shown_changes(page, "#total-changes") == expected_changes(targets_diff["total_changes"])
    assert shown_changes(page, "#self-changes") == expected_changes(targets_diff["self_changes"])
    assert "tornado/" in page.locator("#self-changes").inner_text()  # what only the after side runs
    assert not page.errors  # type: ignore[attr-defined]


#: Rows of a changes table of the compare view: the API's largest changes, at most this many.
CHANGE_ROWS = 25


def frame_name(frame: str) -> str:
    """A folded frame's function name, as the UI shows it: without `` (file:line)``."""
    return re.sub(r" \([^()]*\)$", "", frame)


def shown_changes(page: Page, table: str) -> list[str]:
    """The functions a changes table of the compare view lists, top down, each as the API's
    ``frame`` (``name (file)``) put back together from the name and file the row shows."""
    rows: list[str] = page.eval_on_selector_all(
        f"{table} tbody tr",
        """rows => rows.map(row => {
            const name = row.querySelector(".fn"), file = row.querySelector(".file");
            if (!name) return row.textContent.trim();
            return file ? `${name.textContent} (${file.textContent})` : name.textContent;
        })""",
    )
    return rows


def expected_changes(changes: list[dict[str, Any]]) -> list[str]:
    """What a changes table shows of the API's changes: there are some (a live comparison
    always has), and the table has the largest, in the API's order."""
    assert changes, "the comparison found no change"
    return [change["frame"] for change in changes[:CHANGE_ROWS]]


def test_a_shared_url_restores_the_same_view(ui: UI) -> None:
    start, end = ui.window()
    page = ui.open(f"/?target={ui.tornado['id']}&from={start}&to={end}", "#flame")
    page.locator('#state-filter button[data-state="busy"]').click()
    page.wait_for_function(
        "() => new URLSearchParams(location.search).get('state') === 'busy'"
        " && document.querySelector('#flame').dataset.loading === '0'"
    )
    page.locator("#icicle").click()
    page.locator("#search").fill("get")
    canvas = page.locator("#flame canvas")
    canvas.focus()
    page.keyboard.press("ArrowDown")  # icicle: down goes towards the leaves
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    before = flame_state(page)
    assert before["zoom"]
    status = page.locator("#search-status").inner_text()
    shared = page.url
    assert "token" not in shared

    again = ui.page()
    again.goto(shared)
    wait_loaded(again, "#flame")
    after = flame_state(again)
    for key in ("target", "from", "to", "samples", "frames", "zoom", "kind"):
        assert after[key] == before[key], key
    assert again.locator("#search").input_value() == "get"
    assert again.locator("#search-status").inner_text() == status
    assert again.locator("#icicle").get_attribute("aria-pressed") == "true"
    checked = again.locator('#state-filter button[aria-checked="true"]')
    assert checked.get_attribute("data-state") == "busy"
    pressed = again.locator('.target[aria-pressed="true"]')
    assert pressed.get_attribute("data-id") == str(ui.tornado["id"])
    assert again.url == shared
    assert not again.errors  # type: ignore[attr-defined]


def test_the_flamegraph_prunes_frames_too_narrow_to_see(ui: UI) -> None:
    """20,000 leaves in 1,000 pixels: only frames at least a pixel wide are laid out."""
    page = ui.page()
    page.goto(f"{ui.base}/?range=300")
    page.locator(".target").first.wait_for()
    result = page.evaluate(
        """async () => {
          const { buildTree, parseFolded } = await import("./js/stacks.js");
          const { FlameGraph } = await import("./js/flame.js");
          const lines = [];
          for (let i = 0; i < 20000; i += 1) {
            const handler = `handler_${i % 400} (app.py:${i % 400})`;
            lines.push(`main (app.py:1);${handler};leaf_${i} (lib.py:${i}) ${1 + (i % 7)}`);
          }
          const tree = buildTree(parseFolded(lines.join("\\n")));
          const host = document.createElement("div");
          host.style.width = "1000px";
          document.body.append(host);
          new FlameGraph(host).setTree(tree);
          return { nodes: tree.nodes, ...host.dataset };
        }"""
    )
    assert result["nodes"] > 20_000
    rows = 4  # all, main, handlers, leaves: no row holds more frames than it has pixels
    assert int(result["frames"]) <= rows * 1000
    assert int(result["hidden"]) > 10_000
    assert not page.errors  # type: ignore[attr-defined]


def test_with_a_token_the_ui_loads_and_keeps_the_token_out_of_the_url(
    ui: UI, serve: Callable[..., Serve], tmp_path: Path
) -> None:
    """Beyond loopback a token guards the data; the UI itself loads and sends it."""
    token = "ui-token-0123456789abcdef"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    server = serve("--token-file", str(token_file), pids=(ui.aiohttp["pid"],), db=tmp_path / "t.db")
    base = server.url
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + "/api/targets", timeout=10)
        assert refused.value.code == 401
        page = ui.page()
        page.goto(f"{base}/?token={token}")
        page.locator('.target[data-framework="aiohttp"]').wait_for()
        assert "token" not in page.url
        stored = page.evaluate("() => Object.values({...sessionStorage})")
        assert token in stored
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        server.stop()


def test_the_tasks_view_shows_tasks_in_flight_await_chains_and_sites(ui: UI) -> None:
    """The Tasks view of the loaded aiohttp target: its chart draws the API's task timeline,
    its flamegraph the API's task profile (every chain ending in a state's leaf), its table
    the API's top await sites of requests; Requests keeps only the request handlers' tasks."""
    start, end = ui.window()
    target = ui.aiohttp["id"]
    span = f"&from={start}&to={end}"
    page = ui.open(f"/?view=tasks&target={target}{span}", "#view-tasks")
    line = ui.api(f"/api/timeline?target={target}&kind=tasks{span}")
    assert line["buckets"], line
    chart = page.eval_on_selector("#tasks-timeline", "el => el.dataset.buckets")
    assert chart == str(len(line["buckets"]))
    total = sum(int(row.rpartition(" ")[2]) for row in task_folded(ui, target, span).splitlines())
    samples = page.eval_on_selector("#tasks-flame", "el => el.dataset.samples")
    assert samples == str(total) and total > 0
    stats = ui.api(f"/api/stats?target={target}{span}")
    sites = stats["targets"][0]["tasks"]["await_sites"]
    assert sites, stats
    first = page.locator("#await-sites tbody tr").first.locator("code").inner_text()
    assert first == sites[0]["site"]
    shot(page, "tasks")
    show_requests(page)
    requests = task_folded(ui, target, span + "&tasks=requests")
    total = sum(int(row.rpartition(" ")[2]) for row in requests.splitlines())
    assert page.eval_on_selector("#tasks-flame", "el => el.dataset.samples") == str(total)
    assert all("RequestHandler._handle_request" in row for row in requests.splitlines())
    assert not page.errors  # type: ignore[attr-defined]


def task_folded(ui: UI, target: int, span: str) -> str:
    with urllib.request.urlopen(
        f"{ui.base}/api/profile?target={target}&kind=tasks&format=folded{span}", timeout=30
    ) as response:
        return str(response.read().decode())


def test_the_tasks_view_stacks_tasks_past_the_scans_bound_on_top(
    ui: UI, spawn: Spawner, serve: Callable[..., Serve], tmp_path: Path
) -> None:
    """1,000 parked tasks scanned with a bound of 200 (``--task-bound``): the Tasks chart
    draws each bucket's unread tasks in grey on top of the tasks read, in the share of the bar
    the API's timeline gives them; the legend names them, and the tooltip gives the bucket's
    unread and in-flight (unread counted) means as the API does. Under Requests they are not
    drawn (of no kind); the aiohttp target's scans read every task: no unread legend nor band."""
    bound = 200
    target = spawn.target("tasks_many", "--tasks", "1000")
    server = serve("--task-bound", str(bound), pids=(target.pid,), db=tmp_path / "u.db")
    base = server.url
    try:
        started = math.floor(time.time())
        assert wait_until(lambda: bool(get_json(base + "/api/targets")), timeout=20)
        (row,) = get_json(base + "/api/targets")
        start, end, line = final_task_timeline(base, row["id"], started, buckets=8)
        bucket = line["buckets"][len(line["buckets"]) // 2]
        read = sum(bucket[state] for state in ("running", "ready", "waiting"))
        assert abs(read - bound) < 1 and bucket["unread"] > 700, bucket
        page = ui.page()
        page.goto(f"{base}/?view=tasks&target={row['id']}&from={start}&to={end}")
        wait_loaded(page, "#view-tasks")
        legend = page.locator("#tasks-unread")
        assert legend.is_visible()
        assert " ".join(legend.inner_text().split()) == "unread (past the scan's bound)"
        x = bucket_x(page, TASKS_CHART, bucket["t"] + line["step"] / 2, start, end)
        colours = column_colours(page, x)
        grey = sum(colour == "grey" for colour in colours)
        drawn = sum(colour != "paper" for colour in colours)
        assert next(c for c in colours if c != "paper") == "grey", colours
        assert abs(grey / drawn - bucket["unread"] / (read + bucket["unread"])) < 0.05, colours
        tip = hover(page, TASKS_CHART, x)
        unread = tip.locator('[data-series="unread"]').inner_text()
        assert abs(float(unread.split()[1]) - bucket["unread"]) <= 0.05, unread
        total = tip.locator("[data-total]").inner_text()
        assert abs(float(total.split()[2]) - (read + bucket["unread"])) <= 0.05, total
        shot(page, "tasks-unread")
        show_requests(page)
        assert legend.is_hidden()
        assert page.eval_on_selector("#tasks-timeline", "el => el.dataset.unread") == "0"
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        server.stop()
    # every task read: no unread band, legend nor tooltip line
    start, end = ui.window()
    target_id = ui.aiohttp["id"]
    line = ui.api(f"/api/timeline?target={target_id}&kind=tasks&from={start}&to={end}")
    assert line["buckets"] and not any(b["unread"] for b in line["buckets"]), line
    page = ui.open(f"/?view=tasks&target={target_id}&from={start}&to={end}", "#view-tasks")
    assert page.locator("#tasks-unread").is_hidden()
    assert page.eval_on_selector("#tasks-timeline", "el => el.dataset.unread") == "0"
    bucket = line["buckets"][len(line["buckets"]) // 2]
    tip = hover(
        page, TASKS_CHART, bucket_x(page, TASKS_CHART, bucket["t"] + line["step"] / 2, start, end)
    )
    assert tip.locator("[data-total]").is_visible()
    assert tip.locator('[data-series="unread"]').count() == 0
    assert not page.errors  # type: ignore[attr-defined]


def final_task_timeline(
    base: str, target: int, start: int, buckets: int
) -> tuple[int, int, dict[str, Any]]:
    """A fixed range from ``start`` to a few seconds ago holding at least ``buckets`` buckets
    of task scans, and its task timeline once its windows are all written."""

    def line(end: int) -> dict[str, Any] | None:
        path = f"/api/timeline?target={target}&kind=tasks&from={start}&to={end}"
        try:
            return dict(get_json(base + path))
        except urllib.error.HTTPError:  # no task scans yet
            return None

    def enough() -> bool:
        found = line(math.floor(time.time()) - 3)
        return found is not None and len(found["buckets"]) >= buckets

    assert wait_until(enough, timeout=40)
    end = math.floor(time.time()) - 3
    previous: dict[str, Any] | None = None
    for _ in range(20):
        current = line(end)
        if current == previous:
            break
        previous = current
        time.sleep(0.5)
    assert previous is not None
    return start, end, previous


def column_colours(page: Page, x: float) -> list[str]:
    """The Tasks chart's plot at ``x``, top to bottom, one word a pixel: ``grey`` (neutral, as
    the unread band is), ``paper`` (the white background or a light grid line) or ``colour``."""
    pixels: list[list[int]] = page.eval_on_selector(
        f"{TASKS_CHART} canvas",
        """(el, [x, top, bottom]) => {
            const dpr = el.width / el.clientWidth;
            const ctx = el.getContext("2d");
            const column = [];
            for (let y = top; y < bottom; y += 1) {
              const d = ctx.getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data;
              column.push([d[0], d[1], d[2]]);
            }
            return column;
        }""",
        [x, PLOT_TOP, PLOT_BOTTOM],
    )
    words = []
    for rgb in pixels:
        neutral = max(rgb) - min(rgb) <= 14
        words.append("colour" if not neutral else "paper" if max(rgb) > 215 else "grey")
    return words
