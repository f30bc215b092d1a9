"""Profiles out: flamegraph SVG (inferno, in the native module), folded text, speedscope JSON
(pprof, a binary format, is in ``sidecar.formats.pprof``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sidecar import __version__
from sidecar._native import render_svg as _render_svg
from sidecar.errors import NoSamples, UsageError
from sidecar.profile import Profile
from sidecar.rules.frames import parse_frame

TEXT_FORMATS = ("svg", "folded", "speedscope")
FORMATS = (*TEXT_FORMATS, "pprof")
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


def speedscope(profile: Profile, name: str = "sidecar profile") -> dict[str, Any]:
    """The profile as a speedscope file: one sampled profile weighted by counts."""
    frames: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    samples: list[list[int]] = []
    weights: list[int] = []
    for stack, count in sorted(profile.stacks.items()):
        row: list[int] = []
        for text in stack.split(";"):
            if text not in index:
                frame = parse_frame(text)
                entry: dict[str, Any] = {"name": frame.name}
                if frame.file:
                    entry["file"] = frame.file
                    entry["line"] = frame.line
                index[text] = len(frames)
                frames.append(entry)
            row.append(index[text])
        samples.append(row)
        weights.append(count)
    return {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "sampled",
                "name": name,
                "unit": "none",
                "startValue": 0,
                "endValue": sum(weights),
                "samples": samples,
                "weights": weights,
            }
        ],
        "name": name,
        "activeProfileIndex": 0,
        "exporter": f"sidecar {__version__}",
    }


def export(profile: Profile, fmt: str, options: RenderOptions | None = None) -> str:
    """The profile as text in one of TEXT_FORMATS."""
    if not profile.stacks:
        raise NoSamples("nothing to write: the profile has no stacks")
    if fmt == "folded":
        return profile.to_folded()
    if fmt == "speedscope":
        title = options.title if options else "sidecar profile"
        return json.dumps(speedscope(profile, title), separators=(",", ":")) + "\n"
    if fmt == "svg":
        return render_svg(profile.folded_lines(), options)
    raise UsageError(f"unknown text format {fmt!r}; choose one of {', '.join(TEXT_FORMATS)}")
