"""Stacks read frame by frame once: what the rules say of each distinct frame text, kept.

A profile of a million stacks holds far fewer distinct frames. ``Frames`` keeps, per frame
text, what the rules say of it (``Facts``): whether it names code, whether ``code_frames``
leaves it out (a synthetic leaf, a thread's or process's root), whether it enters an event
loop or is the selector's poll (``rules.loops``), its layer (``rules.layers``), its function
(``name (file)``), the server frameworks its file belongs to and the loop it shows
(``rules.processes``). A stack is then split once and each of its frames looked up, and what
the analysis makes of it is what the rules make of its frames one by one. The kept facts are
bounded (``MAX_FRAMES``): past it they are dropped and found again.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from typing import cast

from sidecar.rules.frames import SYNTHETIC_FRAMES, Frame, parse_frame
from sidecar.rules.layers import layer_of_file
from sidecar.rules.loops import LOOP_ENTRIES, SELECTOR_WAITS, is_loop_entry, is_selector_wait
from sidecar.rules.processes import ASYNCIO_LOOP, SERVER_FILES

#: The most frame texts whose facts are kept at once (each about 200 bytes with its text).
MAX_FRAMES = 2**17


@dataclass(frozen=True, slots=True, eq=False)
class Facts:
    """What the rules say of one frame text."""

    #: ``name (file)`` without the line; the name alone for a frame of no code
    function: str
    #: 1 when it has a file (``Frame.is_code``), else 0: a stack's depth is their sum
    code: int
    #: ``code_frames`` leaves it out at the leaf end (a synthetic leaf, ``[gc]``), at the root
    #: end (a thread's or process's root)
    leaf_mark: bool
    root_mark: bool
    #: it enters an event loop (``is_loop_entry``); it is the selector's poll
    entry: bool
    poll: bool
    #: the layer of its file (``layer_of_file``), None for no code or the standard library
    layer: str | None
    #: the server frameworks (``SERVER_FILES``) its file is one of
    frameworks: tuple[str, ...]
    #: the loop it shows (``classify.process.loop_from_frames``): asyncio, uvloop or None
    loop: str | None


#: The function names the tables of loop entries, polls and asyncio's loop match: a frame of
#: another name matches none of their rows.
_TABLED = frozenset(fn for fn, _ in (*LOOP_ENTRIES, *SELECTOR_WAITS, *ASYNCIO_LOOP))


def facts_of(frame: Frame) -> Facts:
    """The facts of one frame, by the rules: all of them its function's (its name and file)."""
    short = frame.name.rsplit(".", 1)[-1]
    tabled = short in _TABLED
    layer, frameworks, uvloop = _file_facts(frame.file)
    loop = None
    if tabled and any(short == fn and frame.file.endswith(sfx) for fn, sfx in ASYNCIO_LOOP):
        loop = "asyncio"
    elif uvloop:
        loop = "uvloop"
    return Facts(
        function=f"{frame.name} ({frame.file})" if frame.file else frame.name,
        code=int(frame.is_code),
        leaf_mark=frame.name in SYNTHETIC_FRAMES and not frame.file,
        root_mark=not frame.is_code and frame.name.startswith(("thread (", "process (")),
        entry=tabled and is_loop_entry(frame),
        poll=tabled and is_selector_wait(frame),
        layer=layer if frame.is_code else None,
        frameworks=frameworks,
        loop=loop,
    )


@lru_cache(maxsize=4096)
def _file_facts(file: str) -> tuple[str | None, tuple[str, ...], bool]:
    """What a frame's file says: its layer, the server frameworks it is one of, whether it is
    uvloop's."""
    path = file.replace("\\", "/")
    frameworks = tuple(
        name
        for name, suffixes in SERVER_FILES.items()
        if any(path.endswith(suffix) for suffix in suffixes)
    )
    return layer_of_file(file), frameworks, path.split("/")[0] == "uvloop"


class Frames:
    """The facts of the frame texts seen so far; a stack's frames as facts (``of``)."""

    def __init__(self, limit: int = MAX_FRAMES) -> None:
        self.limit = limit
        self.facts: dict[str, Facts] = {}
        #: the same facts by function, ``name (file`` (a code frame's text before its line):
        #: a function's lines share them
        self.functions: dict[str, Facts] = {}
        #: whether a frame that enters an event loop was seen (none: no stack has one)
        self.entries = False

    def of(self, stack: str) -> list[Facts]:
        """The facts of the frames ``code_frames(stack)`` gives, root first."""
        if not stack:
            return []
        parts = stack.split(";")
        known = list(map(self.facts.get, parts))
        out = list(map(self._find, parts)) if None in known else cast("list[Facts]", known)
        while out and out[-1].leaf_mark:
            out.pop()
        if out and out[0].root_mark:
            start = 1
            while start < len(out) and out[start].root_mark:
                start += 1
            del out[:start]
        return out

    def _find(self, text: str) -> Facts:
        found = self.facts.get(text)
        if found is not None:
            return found
        if len(self.facts) >= self.limit:
            self.facts, self.functions = {}, {}
        # ``function (file:LINE)`` with the function seen before on another line: the text
        # before its last ':' is what it was then (``FRAME`` splits there), and so are its facts
        colon = text.rfind(":")
        head, line = text[:colon], text[colon + 1 : -1]
        digits = line[1:] if line.startswith("-") else line
        numbered = colon > 0 and text.endswith(")") and digits.isdecimal()
        found = self.functions.get(head) if numbered else None
        if found is None:
            frame = parse_frame(text)
            found = facts_of(frame)
            if frame.is_code:
                found = self.functions.setdefault(head, found)
        self.facts[text] = found
        self.entries |= found.entry
        return found


_ENTRY = attrgetter("entry")


def entry_index(frames: list[Facts]) -> int | None:
    """Index of the innermost frame that entered an event loop (``loop_entry_index``)."""
    entries = list(map(_ENTRY, frames))
    if True not in entries:
        return None
    entries.reverse()
    return len(entries) - 1 - entries.index(True)
