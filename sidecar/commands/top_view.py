"""The text of ``sidecar top``'s screen, laid out for a width and a height: the same lines on
the terminal (``commands.top`` draws them with textual) and in ``--snapshots``.

From the top: who is sampled and over which span; the loop's four shares, each with its
history one character a second; who held the GIL while the loop waited; the asyncio tasks in
flight; the stalls; the functions table; the keys. Nothing here reads or draws anything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sidecar import defaults
from sidecar.analyze.requests import summary_line as slow_line
from sidecar.analyze.stalls import summary_line
from sidecar.analyze.top import SORTS, FunctionRow, View, sort_rows
from sidecar.rules.frames import STATES
from sidecar.rules.tasks import STATES as TASK_STATES

#: One character per second of history, from a share of 0 to a share of 1.
BARS = "▁▂▃▄▅▆▇█"
#: The functions table's columns, in the order of the keys 1 to 4 (as py-spy's ``top``).
COLUMNS = ("%Own", "%Total", "OwnTime", "TotalTime")
WIDTHS = (6, 7, 8, 10)
#: The last stalls listed under their summary.
STALL_LINES = 2
#: The keys, in the footer; ``p`` only where there is more than one process to show.
KEYS = ("1-4 sort", "w span", "p process", "h help", "q quit")
#: The help, in place of everything under the title; each line within 79 characters.
HELP = [
    "keys",
    "  1  sort by %Own: the loop's busy samples in the function itself, over the span",
    "  2  sort by %Total: in the function or what it called (above the loop's entry)",
    "  3  sort by OwnTime: seconds of samples in the function since top started",
    "  4  sort by TotalTime: seconds in it or what it called since top started",
    "     the same key again reverses the order",
    "  w  span: the last 5, 10, 30 or 60 seconds",
    "  p  process: all that serve requests, or one after another",
    "  h  this help, and back (? too); ↑ ↓ scroll it where it does not fit",
    "  q  quit (Ctrl-C too); the target is never stopped",
    "",
    "states of the loop's samples",
    "  busy     on a CPU",
    "  idle     waiting for I/O in the loop's poll",
    "  blocked  off CPU anywhere else: the loop serves nobody meanwhile",
    "  gil      waiting for the GIL another thread holds",
    "  cpu_wait runnable, waiting for a CPU (a CPU limit, busy cores)",
]


@dataclass(frozen=True)
class Frame:
    """What the screen says besides the view: who is sampled, the sort, what is shown."""

    title: str
    rate_hz: float
    sort: str = "own"
    ascending: bool = False
    help: bool = False
    #: a stall still in progress: when it began (unix seconds), None when none is
    stalled_since: float | None = None
    stall_ms: float = 100.0
    slow_ms: float = defaults.SLOW_MS
    #: why the tasks are not scanned, when they are not
    tasks_note: str = ""
    #: a line of its own under the title (a target that exited, a sampler's trouble)
    note: str = ""
    #: more than one process watched (``--subprocesses``): the key ``p`` picks one
    processes: bool = False
    #: the first line of the help shown, where the help does not fit the height
    help_offset: int = 0


def cut(text: str, width: int) -> str:
    """``text`` within ``width`` characters, ``…`` where it was cut."""
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


def cut_function(name: str, width: int) -> str:
    """``function (file)`` within ``width``: the file's path cut from its start first."""
    if len(name) <= width or not name.endswith(")") or " (" not in name:
        return cut(name, width)
    function, file = name[:-1].rsplit(" (", 1)
    room = width - len(function) - 4  # " (…" and ")"
    if room < 8:
        return cut(name, width)
    return f"{function} (…{file[-room:]})"


def sparkline(shares: list[float], width: int) -> str:
    """The last ``width`` shares, one bar each, right-aligned."""
    bars = [BARS[min(len(BARS) - 1, int(share * len(BARS)))] for share in shares[-width:]]
    return "".join(bars).rjust(width)


def _pct(share: float) -> str:
    return f"{100 * share:5.1f}%"


def state_lines(view: View, width: int) -> list[str]:
    analysis = view.analysis
    lines = []
    room = max(0, width - 17)
    for state in STATES:
        share = analysis.share(state)
        history = sparkline(view.history[state], room) if room >= 4 else ""
        lines.append(f"{state:<8} {_pct(share)}  {history}".rstrip())
    return lines


def gil_line(view: View) -> str:
    top = view.analysis.top_holders(1)
    if not view.analysis.states["gil"]:
        return "GIL: the loop did not wait for it"
    if not top:
        return f"GIL: the loop waited {_pct(view.analysis.share('gil')).strip()}, holder not seen"
    thread, site, _, share = top[0]
    where = f" at {site}" if site else ""
    return f"GIL held by {thread!r}{where} ({share:.0%} of the loop's waits)"


def tasks_line(view: View, note: str) -> str:
    flight = view.tasks
    if flight is None:
        return f"tasks: {note or 'no task scan yet'}"
    states = " · ".join(f"{state} {flight.states[state]:.1f}" for state in TASK_STATES)
    return f"tasks in flight {flight.mean:.1f}: {states} · requests {flight.requests:.1f}" + (
        f" · unread {flight.unread:.1f}" if flight.unread else ""
    )


def stall_lines(view: View, frame: Frame, now: float) -> list[str]:
    if view.analysis.no_loop_thread and view.analysis.samples:
        return ["stalls: no event loop seen"]
    head = summary_line(view.stalls, frame.stall_ms)
    if frame.stalled_since is not None:
        head += f" · stalled now for {max(0.0, now - frame.stalled_since):.1f} s"
    lines = [head]
    for stall in view.stalls[:STALL_LINES]:
        when = time.strftime("%H:%M:%S", time.localtime(stall.start))
        where = f"GIL held by {stall.holder!r} at {stall.site}" if stall.holder else stall.site
        lines.append(f"  {when} {stall.duration_s:5.2f} s {stall.state:<7} {where}")
    return lines


def table_lines(rows: list[FunctionRow], frame: Frame, width: int, height: int) -> list[str]:
    arrow = "▲" if frame.ascending else "▼"
    heads = [
        (name + (arrow if SORTS[i] == frame.sort else "")).rjust(WIDTHS[i])
        for i, name in enumerate(COLUMNS)
    ]
    room = max(10, width - sum(WIDTHS) - len(WIDTHS) - 1)
    lines = [" ".join(heads) + "  Function (file)"]
    for row in sort_rows(rows, frame.sort, frame.ascending)[: max(0, height - 1)]:
        cells = (
            _pct(row.own).rjust(WIDTHS[0]),
            _pct(row.total).rjust(WIDTHS[1]),
            f"{row.own_s:.2f}s".rjust(WIDTHS[2]),
            f"{row.total_s:.2f}s".rjust(WIDTHS[3]),
        )
        lines.append(" ".join(cells) + "  " + cut_function(row.name, room))
    if len(lines) == 1:
        lines.append("  (no busy sample of the loop in the span)")
    return lines


def keys_line(frame: Frame) -> str:
    """The footer: the keys that do something on this screen."""
    if frame.help:
        return "h back · q quit"
    return " · ".join(key for key in KEYS if frame.processes or not key.startswith("p "))


def help_lines(frame: Frame) -> list[str]:
    """The help of the keys this screen has (``p`` with more than one process)."""
    return [line for line in HELP if frame.processes or not line.startswith("  p ")]


def help_room(frame: Frame, height: int) -> tuple[int, int]:
    """The lines of help shown in ``height`` (the title and the footer take one each), and
    the most the help scrolls by."""
    room = max(1, height - 2)
    return room, max(0, len(help_lines(frame)) - room)


def _help_screen(title: str, frame: Frame, height: int) -> list[str]:
    lines = help_lines(frame)
    room, most = help_room(frame, height)
    top = min(max(0, frame.help_offset), most)
    footer = keys_line(frame)
    if most:
        shown = f"lines {top + 1}-{top + room} of {len(lines)}"
        footer = f"↑ ↓ scroll ({shown}) · {footer}"
    return [title, *lines[top : top + room], footer]


def screen(view: View, frame: Frame, width: int = 80, height: int = 24) -> list[str]:
    """The screen's lines, each within ``width``, ``height`` lines at most (the functions
    table takes what the rest leaves; the help takes all under the title)."""
    analysis = view.analysis
    sampled = f"{view.covered_s:.0f} of the last {view.span_s:g} s"
    who = f"{frame.title} · {analysis.framework} on {analysis.loop}"
    title = f"{who} · {analysis.covers}, {sampled} at {frame.rate_hz:g} Hz"
    if frame.help:
        return [cut(line, width) for line in _help_screen(title, frame, height)[:height]]
    lines = [title]
    if frame.note:
        lines.append(frame.note)
    lines += state_lines(view, width)
    lines.append(gil_line(view))
    lines.append(tasks_line(view, frame.tasks_note))
    if view.tasks is not None:
        lines.append(slow_line(view.slow_requests, frame.slow_ms))
    lines += stall_lines(view, frame, time.time())
    lines.append("")
    lines += table_lines(view.functions, frame, width, height - len(lines) - 1)
    lines.append(keys_line(frame))
    return [cut(line, width) for line in lines[:height]]
