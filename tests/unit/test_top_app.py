"""``sidecar top``'s terminal as textual draws it (the app driven by textual's pilot at a set
size, its screen read back from what it composed): the footer names only keys that do
something, and the whole help reads at 80x24, or scrolls where the terminal is shorter."""

from __future__ import annotations

import asyncio

from sidecar.analyze.top import Rolling
from sidecar.commands.top import Feed
from sidecar.commands.top_app import TopApp
from sidecar.commands.top_view import HELP, Frame, screen
from tests.unit.test_top import RATE, add, info, window

ONE = "1-4 sort · w span · h help · q quit"


def fed() -> Feed:
    """A feed of twelve seconds of one aiohttp loop, as its sampler's windows come."""
    feed = Feed([], RATE, 100.0)
    for second in range(12):
        add(feed.rolling, window(1000.0 + second, 30, 50, 20), 7, info(7))
    return feed


def drawn(feed: Feed, size: tuple[int, int], keys: list[list[str]]) -> list[list[str]]:
    """The screen's rows after each group of ``keys``, as textual composed them, up to the
    last that is not blank."""
    shots: list[list[str]] = []

    async def drive() -> None:
        app = TopApp(feed)
        async with app.run_test(size=size) as pilot:
            for group in keys:
                await pilot.press(*group)
                await pilot.pause()
                strips = app.screen._compositor.render_strips()
                rows = [strip.text.rstrip() for strip in strips]
                assert len(rows) == size[1]
                while rows and not rows[-1]:
                    rows.pop()
                shots.append(rows)
            await pilot.press("q")

    asyncio.run(drive())
    return shots


def test_the_footer_names_p_only_where_there_are_processes_to_pick() -> None:
    rolling = Rolling(RATE)
    add(rolling, window(1000.0, 30, 70), 7, info(7))
    view = rolling.view(10)
    alone = screen(view, Frame(title="PID 7", rate_hz=RATE), 80, 24)
    assert alone[-1] == ONE
    group = screen(view, Frame(title="3 processes", rate_hz=RATE, processes=True), 80, 24)
    assert group[-1] == "1-4 sort · w span · p process · h help · q quit"
    helped = screen(view, Frame(title="PID 7", rate_hz=RATE, help=True), 80, 24)
    assert not any(line.startswith("  p ") for line in helped), helped
    grouped = screen(view, Frame(title="3", rate_hz=RATE, help=True, processes=True), 80, 24)
    assert "  p  process: all that serve requests, or one after another" in grouped


def test_the_whole_help_reads_at_80_by_24() -> None:
    (table, helped, back) = drawn(fed(), (80, 24), [[], ["h"], ["h"]])
    assert table[-1] == ONE and "p process" not in "\n".join(table)
    shown = [line for line in HELP if not line.startswith("  p ")]
    assert len(helped) == 1 + len(shown) + 1  # the title, the help, the footer
    # every line of the help, whole (nothing cut by a "…"), in order, under the title
    assert helped[1 : 1 + len(shown)] == [line.rstrip() for line in shown], helped
    assert "  cpu_wait runnable, waiting for a CPU (a CPU limit, busy cores)" in helped
    assert helped[-1] == "h back · q quit"
    assert all(len(line) <= 80 and "…" not in line for line in helped[1:])
    assert back[-1] == ONE and "%Own▼" in "\n".join(back)


def test_a_shorter_terminal_scrolls_the_help_to_its_end_and_back() -> None:
    shown = [line.rstrip() for line in HELP if not line.startswith("  p ")]
    first, moved, end, top = drawn(
        fed(), (80, 10), [["h"], ["down"], ["pagedown", "pagedown", "down"], ["pageup"] * 3]
    )
    room = 10 - 2
    assert first[1 : 1 + room] == shown[:room]
    assert first[-1] == f"↑ ↓ scroll (lines 1-{room} of {len(shown)}) · h back · q quit"
    assert moved[1 : 1 + room] == shown[1 : 1 + room]
    # scrolled past its end, it stops at the last line
    assert end[1 : 1 + room] == shown[-room:], end
    assert end[-1].startswith(f"↑ ↓ scroll (lines {len(shown) - room + 1}-{len(shown)} of")
    assert top[1 : 1 + room] == shown[:room]
