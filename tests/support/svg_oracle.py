"""The test oracle of the native SVG reader: expat's reading of a flamegraph SVG's frames.

expat (hardened as defusedxml is: any entity declaration refused, no external entity or
parameter entity resolved, nesting bounded) gives what the native reader
(native/src/formats/svgread/) must give for a well-formed document: the root element's name, each
frame's title text and its ``<rect>``'s attributes (``<g>``, then its ``<title>``'s text, then a
``<rect>``), the ``total_samples`` of the first ``<svg id="frames">``, the scripts' text and the
text of the first ``<metadata id="sidecar-folded">`` (the stacks sidecar embeds in its SVGs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn
from xml.parsers import expat

RECT_ATTRIBUTES = ("x", "y", "width", "fg:x", "fg:w")


class OracleRefused(Exception):
    """expat refused the document: not well-formed, an entity declared, or too deep."""


@dataclass
class Scan:
    root: str
    frames: list[tuple[str, dict[str, str]]]
    total_samples: str | None
    script: str
    embedded: str | None = None


_G, _TITLE_MARK, _SCRIPT = object(), object(), object()
_EMBED_OPEN, _EMBED_CLOSE = object(), object()
EMBEDDED_ID = "sidecar-folded"


def scan(data: bytes, max_depth: int) -> Scan:
    """One expat pass over the document; OracleRefused for anything it does not read."""
    parser = expat.ParserCreate()
    parser.buffer_text = True
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    events: list[object] = []
    stack: list[str] = []
    svgs: list[dict[str, str]] = []
    roots: list[str] = []
    embedding: list[int] = []  # the depth of the embedded stacks' element, while open

    def refuse(*_: object) -> NoReturn:
        raise OracleRefused("an entity declaration or an external entity")

    def start(name: str, attrs: dict[str, str]) -> None:
        if not roots:
            roots.append(name)
        stack.append(name)
        if name == "rect":
            events.append(attrs)
        elif name == "g":
            events.append(_G)
        elif name == "title":
            events.append(_TITLE_MARK)
        elif name == "svg":
            svgs.append(attrs)
        elif name == "script":
            events.append(_SCRIPT)
        elif name == "metadata" and attrs.get("id") == EMBEDDED_ID and _EMBED_OPEN not in events:
            events.append(_EMBED_OPEN)
            embedding.append(len(stack))
        if len(stack) > max_depth:
            raise OracleRefused("too deep")

    parser.EntityDeclHandler = refuse
    parser.UnparsedEntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse
    parser.StartElementHandler = start

    def end(name: str) -> None:
        if embedding and embedding[0] == len(stack):
            events.append(_EMBED_CLOSE)
            embedding.clear()
        stack.pop()

    parser.EndElementHandler = end
    parser.CharacterDataHandler = events.append
    try:
        parser.Parse(data, True)
    except expat.ExpatError as err:
        raise OracleRefused(str(err)) from None
    frames, script, embedded = _pair(events)
    total_samples = next((a.get("total_samples") for a in svgs if a.get("id") == "frames"), None)
    return Scan(roots[0], frames, total_samples, script, embedded)


def _pair(
    events: list[object],
) -> tuple[list[tuple[str, dict[str, str]]], str, str | None]:
    """Frames from the event marks: a <g>, then its <title>'s text, then its <rect>; and the
    embedded stacks' text."""
    frames: list[tuple[str, dict[str, str]]] = []
    script: list[str] = []
    embedded: list[str] | None = None
    title: list[str] | None = None
    in_group = False
    in_script = False
    in_embedded = False
    for event in events:
        if event is _EMBED_OPEN:
            embedded, in_embedded = [], True
            in_group, title, in_script = False, None, False
        elif event is _EMBED_CLOSE:
            in_embedded = False
        elif isinstance(event, str) and in_embedded:
            assert embedded is not None
            embedded.append(event)
        elif event is _G and in_embedded:
            pass
        elif isinstance(event, str):
            if title is not None:
                title.append(event)
            elif in_script:
                script.append(event)
        elif event is _G:
            in_group, title, in_script = True, None, False
        elif event is _TITLE_MARK:
            title = [] if in_group else None
            in_script = False
        elif event is _SCRIPT:
            title, in_script = None, True
        elif title is not None and isinstance(event, dict):
            rect = {k: v for k, v in event.items() if k in RECT_ATTRIBUTES}
            frames.append(("".join(title), rect))
            title, in_group = None, False
    return frames, "".join(script), None if embedded is None else "".join(embedded)
