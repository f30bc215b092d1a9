"""The Top functions table, in real Chromium, of a real aiohttp service on uvloop that mostly
waits: its rows are ``GET /api/functions``' answer, which is the core's analysis
(``sidecar.analyze.threads.analyze``, what ``sidecar stats`` prints) of ``/api/profile``'s
folded stacks for the same selection; an ``[idle]`` sample is nobody's self time (the loop's
``run_app``, under uvloop's idle wait, is not the top self function, as it was when the UI
counted the folded stacks itself); a click on a row highlights its function in the flamegraph.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import Browser

from sidecar.analyze.threads import Analysis, analyze, function_of
from sidecar.profile import parse_folded
from sidecar.rules.frames import IDLE_LEAF, code_frames, parse_frame, state_of
from tests.support.helpers import REPORTS, Serve, Servers, Spawner, wait_until
from tests.ui import test_ui_gil
from tests.ui.test_ui import flame_state, query
from tests.ui.test_ui_gil import open_page

#: The module's Chromium: test_ui_gil's fixture.
browser = test_ui_gil.browser

#: Seconds of requests the service answers; each spins its loop on a CPU for SPIN_MS, then
#: the loop waits PAUSE seconds for the next.
SECONDS = 6
SPIN_MS = 40
PAUSE = 0.2


@dataclass
class Run:
    """The service sampled over a fixed range of final windows."""

    server: Serve
    target: int
    span: str

    def get(self, route: str, selection: str = "") -> bytes:
        path = f"/api/{route}?target={self.target}&{self.span}{selection}"
        status, body, _ = self.server.request(path)
        assert status == 200, body
        return body

    def functions(self, selection: str = "") -> dict[str, Any]:
        return dict(json.loads(self.get("functions", selection)))

    def analysis(self, selection: str = "") -> tuple[Analysis, dict[str, int]]:
        """The core's analysis of /api/profile's folded stacks, and the stacks."""
        profile = parse_folded(self.get("profile", selection + "&format=folded").decode())
        profile.marked = True  # a recording of sidecar's: its off-CPU samples carry leaves
        return analyze(profile), profile.stacks


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with contextlib.closing(Spawner()) as spawn, contextlib.closing(Servers()) as servers:
        service = spawn.target("aiohttp_app", "--uvloop")
        db = tmp_path_factory.mktemp("functions") / "sidecar.db"
        server = servers(db, "--window", "1", "--pid", str(service.pid))
        assert wait_until(lambda: len(server.targets()) == 1, timeout=20)
        start = math.ceil(time.time())
        while time.time() < start + SECONDS:
            service.get(f"/freeze?how=spin&ms={SPIN_MS}", timeout=30)
            time.sleep(PAUSE)
        end = math.floor(time.time()) - 1
        (row,) = server.targets()
        span = f"from={start}&to={end}"
        path = f"/api/timeline?target={row['id']}&{span}&step=1"
        time.sleep(1.5)  # the last window is written a moment after it ends
        assert wait_until(lambda: server.json(path) == server.json(path), timeout=10)
        yield Run(server, row["id"], span)


def rows_of(doc: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {f["key"]: (f["self"], f["total"]) for f in doc["functions"]}


def test_the_table_is_the_cores_analysis_and_idle_is_nobodys_self(
    browser: Browser, run: Run
) -> None:
    doc = run.functions("&threads=loop")  # the UI's default selection
    analysis, stacks = run.analysis("&threads=loop")
    busy = analysis.states["busy"]
    # a loop that mostly waits, and did some work
    assert busy > 0 and analysis.states["idle"] > 2 * busy, analysis.states
    assert doc["busy"] == busy and doc["threads"] == "loop"
    ranked = sorted(analysis.total_samples.items(), key=lambda kv: (-kv[1], kv[0]))[:300]
    assert rows_of(doc) == {key: (analysis.self_samples[key], n) for key, n in ranked}
    assert doc["count"] == len(analysis.total_samples)
    # the table counts the loop threads' busy samples whatever the flamegraph shows
    assert run.functions("&threads=all") == doc

    # the frame under uvloop's [idle] leaf (run_app) gets no self time from it
    under_idle: Counter[str] = Counter()
    for stack, count in stacks.items():
        if state_of(stack) == "idle":
            parts = stack.split(";")
            assert parts[-1] == IDLE_LEAF
            under_idle[function_of(parse_frame(parts[-2]))] += count
    waiter, waits = under_idle.most_common(1)[0]
    assert waiter.startswith("run_app (") and waits > busy, under_idle
    rows = rows_of(doc)
    innermost: Counter[str] = Counter()  # of busy samples: what self time can come from
    for stack, count in stacks.items():
        frames = code_frames(stack)
        if state_of(stack) == "busy" and frames:
            innermost[function_of(frames[-1])] += count
    for key in under_idle:
        assert rows.get(key, (0, 0))[0] <= innermost[key], key
    assert innermost[waiter] < waits  # what the UI's own count gave it: its waits too
    top_self = max(doc["functions"], key=lambda f: f["self"])
    assert top_self["name"] == "freeze_spin", top_self
    assert top_self["layer"] == "application"

    # the UI's table shows exactly those rows, as shares of the busy samples
    page = open_page(browser, f"{run.server.url}/?target={run.target}&{run.span}", "#flame")
    shown = page.eval_on_selector_all(
        "#functions tbody tr[data-key]",
        "trs => trs.map(tr => [tr.dataset.key, Number(tr.dataset.self),"
        " Number(tr.dataset.total), [...tr.querySelectorAll('td.num .muted')]"
        ".map(s => s.textContent)])",
    )
    assert {key: (own, total) for key, own, total, _ in shown} == rows
    assert len(shown) == len(rows)
    for _, own, total, shares in shown:
        assert shares == [f"{100 * own / busy:.1f}%", f"{100 * total / busy:.1f}%"]
    scope = page.locator("#functions-scope").inner_text()
    assert f"shares of {busy:,} busy loop-thread samples" in scope, scope
    assert page.eval_on_selector("#functions", "el => el.dataset.busy") == str(busy)
    # by self, the default order: the spin first, not the loop's idle wait
    first = page.locator("#functions tbody tr[data-key]").first
    assert first.get_attribute("data-key") == top_self["key"]

    # a click on the row highlights it in the flamegraph, and shows its callers and callees
    first.locator("td.num").first.click()
    assert query(page)["fn"] == top_self["key"]
    page.wait_for_function(
        "() => Number(document.querySelector('#search-status').dataset.matches) > 0"
    )
    status = page.locator("#search-status")
    assert "highlight: freeze_spin" in status.inner_text()
    # the flamegraph's frames of that function, in samples of every state: the same key
    under = sum(
        count
        for stack, count in stacks.items()
        if top_self["key"] in {function_of(frame) for frame in code_frames(stack)}
    )
    assert int(flame_state(page)["samples"]) == sum(stacks.values())
    share = float(status.get_attribute("data-share") or 0)
    assert share == pytest.approx(under / sum(stacks.values()), abs=1e-9)
    assert page.locator("#sandwich-name").inner_text() == top_self["key"]
    page.screenshot(path=str(REPORTS / "ui-functions.png"), full_page=True)
    assert not page.errors  # type: ignore[attr-defined]


def test_a_selection_without_busy_samples_says_so(browser: Browser, run: Run) -> None:
    doc = run.functions("&state=idle,blocked,gil")
    assert doc == {"busy": 0, "threads": "loop", "count": 0, "functions": []}
    page = open_page(
        browser, f"{run.server.url}/?target={run.target}&{run.span}&state=offcpu", "#flame"
    )
    assert int(flame_state(page)["samples"]) > 0  # the flamegraph has the waits
    text = page.locator("#functions").inner_text()
    assert text.startswith("No busy samples in this selection"), text
    assert page.locator("#functions tbody tr[data-key]").count() == 0
    assert page.locator("#functions-scope").inner_text() == ""
    assert not page.errors  # type: ignore[attr-defined]
