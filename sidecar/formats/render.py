"""Flamegraph SVGs (inferno, in the native module): how one looks, and folded lines drawn as
one. The table of every output format is ``sidecar.formats.export``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sidecar._native import render_svg as _render_svg
from sidecar.errors import NoSamples, UsageError

#: Characters XML forbids even as references (C0 controls but tab, U+FFFE/F, surrogates): a
#: frame or title named with one would make the whole SVG unreadable. Each becomes U+FFFD.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def xml_safe(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


@dataclass(frozen=True)
class RenderOptions:
    """How a flamegraph SVG looks."""

    title: str = "Flame Graph"
    subtitle: str | None = None
    inverted: bool = False
    palette: str = "python"
    min_width: float = 0.1
    count_name: str = "samples"
    width: int | None = None


def render_svg(lines: list[str], options: RenderOptions | None = None) -> str:
    """Folded lines (one or two counts per line) into an SVG document."""
    opts = options or RenderOptions()
    if not lines:
        raise NoSamples("nothing to render: the profile has no stacks")
    try:
        return _render_svg(
            [xml_safe(line) for line in lines],
            title=xml_safe(opts.title),
            subtitle=xml_safe(opts.subtitle) if opts.subtitle is not None else None,
            inverted=opts.inverted,
            palette=opts.palette,
            min_width=opts.min_width,
            count_name=opts.count_name,
            width=opts.width,
        )
    except ValueError as err:
        raise UsageError(str(err)) from err
