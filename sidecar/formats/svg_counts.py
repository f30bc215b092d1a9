"""What a flamegraph SVG's frames keep of a profile, and what they lose: sidecar's SVGs carry
their folded stacks, embedded; the rest is noted.

A flamegraph leaves out frames narrower than its minimum width, so its frames alone cannot give
back every stack: the time of a frame too narrow to draw reads as no state (``[pruned]``). The
SVGs sidecar writes keep the profile exactly: its folded text, XML-escaped, in one
``<metadata id="sidecar-folded">`` before the end of the document, where a browser shows
nothing. Reading one back, the native reader hands over that element's text (the first such
element only, read by the same rules as the rest of the document); it is parsed as folded text
is and used only when it agrees with the drawn frames: the same total, and every drawn frame
as wide as the embedded stacks through it. An SVG edited by hand, or carrying text that is not
folded stacks, is read from its frames, and a note says why.

The notes (``exact_notes``, ``profile_notes``, ``pruning_note``) say what reading frames into
stacks could not keep: titles off their sample ranges, scaled counts, names with ';', and frames
too narrow to draw.

A renderer leaves out frames narrower than its minimum width (inferno: 0.1% of the graph;
flamegraph.pl: 0.1 px). Where the SVG has inferno's exact sample ranges, the width they leave
uncovered after the start of their parent's first drawn callee is known to be theirs (inferno
lays a frame's own samples out first: its stack sorts before its callees'): it reads as a
``[pruned]`` leaf, no state, and the note says how much. Frames laid out before the first drawn
callee cannot be told from the parent's own time; the note says when some probably were.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from sidecar.errors import ProfileFormatError
from sidecar.profile import Profile, parse_folded
from sidecar.rules.frames import PRUNED_LEAF, is_pruned

#: The ``id`` of the element that holds the folded stacks (``native/src/formats/svgread``).
EMBEDDED_ID = "sidecar-folded"


def _escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as XML character data writes them (xml.sax.saxutils' escape,
    without the import of urllib, http and email it brings)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def embed(svg: str, folded: str) -> str:
    """The SVG document with the folded stacks ``folded`` embedded before its end."""
    at = svg.rfind("</svg>")
    if at < 0:
        raise ValueError("not an SVG document: no </svg>")
    head = f'<metadata id="{EMBEDDED_ID}" data-format="folded">\n'
    return "".join((svg[:at], head, _escape(folded), "</metadata>\n", svg[at:]))


def with_embedded(text: str | None, drawn: Profile, source: str) -> Profile:
    """The profile of an SVG: its embedded stacks where it has them and they agree with the
    drawn frames (``drawn``, as read from them), else the drawn one, noted."""
    if text is None:
        return drawn
    try:
        embedded = parse_folded(text, source=f"{source}: its embedded stacks")
    except ProfileFormatError as err:
        drawn.notes.append(f"{_why(str(err), source)}; read from the drawn frames")
        return drawn
    disagreement = _disagreement(embedded.stacks, drawn.stacks)
    if disagreement:
        drawn.notes.append(
            f"its embedded stacks ({EMBEDDED_ID}) disagree with its frames ({disagreement}): "
            "an edited SVG? read from the drawn frames"
        )
        return drawn
    return embedded


def _why(message: str, source: str) -> str:
    return message.removeprefix(f"{source}: ")


def _disagreement(embedded: Mapping[str, int], drawn: Mapping[str, int]) -> str:
    """'' when every drawn frame holds what the embedded stacks put through it, else what
    differs first."""
    if embedded == drawn:  # every frame drawn (--min-width 0): the same stacks
        return ""
    whole = sum(embedded.values()), sum(drawn.values())
    if whole[0] != whole[1]:
        return f"{whole[0]:,} samples against {whole[1]:,}"
    # the drawn frames that end a drawn stack; a [pruned] leaf's width is its parent's
    frames = {_drawn_frame(stack) for stack in drawn} - {""}
    widths = _through(drawn, frames), _through(embedded, frames)
    for frame in sorted(frames):
        if widths[0][frame] != widths[1][frame]:
            return f"{frame[:80]!r}: {widths[1][frame]:,} samples against {widths[0][frame]:,}"
    return ""


def _drawn_frame(stack: str) -> str:
    if not is_pruned(stack):
        return stack
    return stack[: -len(PRUNED_LEAF)].removesuffix(";")


def _through(stacks: Mapping[str, int], frames: Iterable[str]) -> dict[str, int]:
    """Samples of ``stacks`` through each of ``frames`` (the frame or one of its callees):
    the stacks' call tree, each node the frames from the root to it, its width its stacks'
    and its callees'."""
    nodes: dict[tuple[int, str], int] = {}  # (caller's node, frame) -> node; 0 is the root
    callers, widths = [0], [0]
    for stack, count in stacks.items():
        path = _drawn_frame(stack)
        if not path:
            continue
        node = 0
        for part in path.split(";"):
            found = nodes.get((node, part))
            if found is None:
                found = nodes[node, part] = len(widths)
                callers.append(node)
                widths.append(0)
            node = found
        widths[node] += count
    for node in range(len(widths) - 1, 0, -1):  # callees come after their callers
        widths[callers[node]] += widths[node]
    out = {}
    for frame in frames:
        node = 0
        for part in frame.split(";"):
            node = nodes.get((node, part), -1)
            if node < 0:
                break
        out[frame] = widths[node] if node > 0 else 0
    return out


#: Folded stacks separate frames with ';', so a ';' inside a frame name is written as this.
SEMICOLON_STANDIN = "\uff1b"
#: inferno's default minimum width, of the graph.
INFERNO_MIN_WIDTH = 0.001


def exact_notes(
    off: int, first_off: str | None, factor: float, declared: str | None, total: int
) -> list[str]:
    """Notes on an inferno graph: titles that disagree with fg:w, --factor, total_samples."""
    notes = []
    if off:
        notes.append(
            f"{off:,} frame titles disagree with their fg:w sample counts "
            f"(first: {first_off!r}); the fg:w counts are used"
        )
    if not math.isclose(factor, 1.0, rel_tol=1e-3):
        notes.append(
            f"the titles show counts scaled by {factor:.6g} (--factor); "
            "the profile keeps the unscaled fg:w counts"
        )
    if declared is not None and declared.isdigit():
        shown = declared if len(declared) <= 24 else f"<{len(declared):,} digits>"
        if len(declared) > 24 or int(declared) != total:
            notes.append(f"total_samples={shown} but the root frame holds {total:,}")
    return notes


def profile_notes(
    graph_notes: list[str], differential: bool, renamed: int, negative: int, pruned: str
) -> list[str]:
    """A profile's notes: the graph's, then what reading its frames into stacks changed."""
    notes = list(graph_notes)
    if differential:
        notes.append("a differential flamegraph: read as its 'after' side (the frame widths)")
    if renamed:
        notes.append(
            f"{renamed:,} frame names contain ';', written as {SEMICOLON_STANDIN!r} "
            "since folded stacks separate frames with ';'"
        )
    if negative:
        notes.append(
            f"the titles' counts are rounded (--factor?): {negative:,} samples of children "
            "exceed their parents' counts and were not given to the parents' self time"
        )
    if pruned:
        notes.append(pruned)
    return notes


def pruning_note(total: int, smallest: int, threshold: float, pruned: int, exact: bool) -> str:
    """A note on frames too narrow to draw: ``pruned`` samples read as ``[pruned]``, and
    whether more were (probably) left out where they cannot be told; else ''."""
    if total <= 0:
        return ""
    narrowest = smallest / total
    likely = (
        smallest >= 2 and 1 / total < threshold and 0.9 * threshold <= narrowest < 2 * threshold
    )
    if not likely and pruned <= 0:
        return ""
    width = (
        f"narrower than the renderer's minimum width (about {threshold * 100:.2g}% of the "
        f"graph, {max(1, math.ceil(threshold * total)):,} samples)"
    )
    if pruned <= 0:
        told = "are probably not in the SVG (the narrowest drawn ones are about that wide)"
    else:
        told = (
            f"are not in the SVG: {pruned:,} samples ({pruned / total:.1%}) were in them, read "
            f"as {PRUNED_LEAF} under their parent frame and counted as no state"
        )
    rest = (
        "; frames left out before their parent's first drawn callee cannot be told from the "
        "parent's own time and stay in it"
        if exact
        else "; below the top level they cannot be placed and count as their parent's own time"
    )
    return f"frames {width} {told}{rest}"
