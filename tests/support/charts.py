"""Where the UI's time charts (timeline.js) draw, and how a test points at them: the plot's
margins, the x of an instant, the tooltip where the pointer rests."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Locator, Page

#: The plot's margins in a chart's canvas, in CSS pixels, as timeline.js draws it (150 high).
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 48, 10, 10, 150 - 22


def bucket_x(page: Page, chart: str, t: float, start: int, end: int) -> float:
    """The x of time ``t`` in the canvas of the chart ``chart`` (a selector), as timeline.js
    places it over ``[start, end)``."""
    width: Any = page.eval_on_selector(f"{chart} canvas", "el => el.clientWidth")
    return PLOT_LEFT + (t - start) / (end - start) * (float(width) - PLOT_LEFT - PLOT_RIGHT)


def hover(page: Page, chart: str, x: float) -> Locator:
    """The tooltip of the chart ``chart`` once the pointer rests at ``x`` halfway up its plot."""
    box = page.locator(f"{chart} canvas").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + x, box["y"] + (PLOT_TOP + PLOT_BOTTOM) / 2)
    tip = page.locator(f"{chart} .tooltip")
    tip.wait_for(state="visible")
    return tip
