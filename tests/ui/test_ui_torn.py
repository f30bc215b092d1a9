"""The targets list of the UI, in real Chromium, says when a target's samples are missing: a
module of its own, so that no other test's load takes the CPU the torn reads need (a target
descheduled as it is read cannot tear the read)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.support.helpers import CHROMIUM, CHROMIUM_ARGS, REPORTS, Serve, Spawner, wait_until


def test_a_target_whose_reads_tear_says_samples_are_missing_until_they_stand(
    spawn: Spawner, serve: Callable[..., Serve], tmp_path: Path
) -> None:
    """``targets/chunks.py`` changes its 100-700-frame stack faster than a read for 10 s
    (about a third of the ticks here read no sample), then sleeps. While its last 1,000 ticks
    tore so, ``/api/targets`` has the sentence serve's log has (``torn``) and its entry in the
    targets list shows it, naming ``--blocking``; once its reads stand, neither does."""
    target = spawn.target("chunks", "--seconds", "10", "--settle", "0", "--rest", "60")
    server = serve("--rate", "200", pids=(target.pid,), db=tmp_path / "torn.db")

    def torn() -> str | None:
        rows = [t for t in server.targets() if t["pid"] == target.pid]
        return rows[0]["torn"] if rows else None

    assert wait_until(lambda: torn() is not None, timeout=30), server.log_text()[-2000:]
    said = torn()
    assert said and "read no sample" in said and "--blocking" in said, said
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(server.url + "/")
        entry = page.locator(f'.target[data-id]:has-text("PID {target.pid}")')
        note = entry.locator(".t-torn")
        note.wait_for()
        text = note.inner_text()
        assert text.startswith("Samples missing:") and "--blocking" in text, text
        page.screenshot(path=str(REPORTS / "ui-torn.png"))
        assert wait_until(lambda: torn() is None, timeout=30), server.log_text()[-2000:]
        page.reload()
        entry.wait_for()
        assert entry.locator(".t-torn").count() == 0
        assert not errors, errors
        browser.close()
