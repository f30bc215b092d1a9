"""``sidecar top``'s terminal: a textual app that draws the screen's lines (``top_view``) once
a second and on a key or a resize, in one Static (a text redrawn costs textual a tenth of
what a table widget refilled does). Imported by the live view only: textual's import takes
about a tenth of a second more than the rest of the CLI."""

from __future__ import annotations

import asyncio
import signal
from typing import ClassVar, Protocol

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static


class Feed(Protocol):
    """What the app draws and what its keys change (``commands.top.Feed``)."""

    help: bool

    def poll(self) -> None: ...
    def lines(self, width: int, height: int) -> list[str]: ...
    def sort_by(self, column: int) -> None: ...
    def next_span(self) -> None: ...
    def next_process(self) -> None: ...
    def scroll_help(self, lines: int) -> None: ...


class TopApp(App[int]):
    """The live view of a ``Feed``."""

    CSS = "Screen { overflow: hidden; } #screen { width: 100%; height: 100%; }"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "leave", "quit", priority=True),
        Binding("ctrl+c", "leave", "quit", priority=True),
        *(Binding(str(n), f"sort({n})", f"sort by column {n}") for n in range(1, 5)),
        Binding("w", "span", "span"),
        Binding("p", "process", "process"),
        Binding("h", "help", "help"),
        Binding("question_mark", "help", "help"),
        Binding("up,k", "scroll_help(-1)", "scroll the help up"),
        Binding("down,j", "scroll_help(1)", "scroll the help down"),
        Binding("pageup", "scroll_help(-10)", "scroll the help a page up"),
        Binding("pagedown,space", "scroll_help(10)", "scroll the help a page down"),
    ]

    def __init__(self, feed: Feed) -> None:
        super().__init__()
        self.feed = feed

    def compose(self) -> ComposeResult:
        yield Static(id="screen", markup=False)

    def on_mount(self) -> None:
        # SIGTERM, and SIGINT sent from outside (the terminal's Ctrl-C is a key here), quit
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.action_leave)
        self.set_interval(1.0, self.tick)
        self.draw()

    def tick(self) -> None:
        self.feed.poll()
        self.draw()

    def draw(self) -> None:
        width, height = self.size.width or 80, self.size.height or 24
        lines = self.feed.lines(width, height)
        text = Text("\n".join(lines), no_wrap=True, overflow="crop")
        text.stylize("reverse", 0, len(lines[0]))
        self.query_one("#screen", Static).update(text)

    def on_resize(self) -> None:
        self.draw()

    def action_leave(self) -> None:
        self.exit(0)

    def action_sort(self, column: int) -> None:
        self.feed.sort_by(column)
        self.draw()

    def action_span(self) -> None:
        self.feed.next_span()
        self.draw()

    def action_process(self) -> None:
        self.feed.next_process()
        self.draw()

    def action_help(self) -> None:
        self.feed.help = not self.feed.help
        self.draw()

    def action_scroll_help(self, lines: int) -> None:
        self.feed.scroll_help(lines)
        self.draw()
