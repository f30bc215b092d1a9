"""Profiles out and back in, one table of formats: what ``record`` writes, what ``/api/profile``
serves, what ``stats``, ``diff`` and ``render`` read (``inputs`` tells a file's format by its
content), and each format's one implementation, writer and reader (``render`` and ``svg``:
flamegraph SVG; folded text, the interchange format; ``speedscope``; ``pprof``, which the
Pyroscope push sends too).

A format turns a Profile into bytes and bytes into a Profile. pprof alone can say more than the
folded stacks do: given the samples (``pprof.Sample``: each with its state and its thread's
name), it labels each one. The SVGs carry their folded stacks (``svg_counts``), so that every
format reads back the stacks it was written from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sidecar.errors import NoSamples, UsageError
from sidecar.formats import NAMES, pprof
from sidecar.formats.render import RenderOptions, render_svg
from sidecar.formats.speedscope import read_speedscope, speedscope
from sidecar.formats.svg import read_svg
from sidecar.formats.svg_counts import embed
from sidecar.formats.svg_states import paint_states
from sidecar.profile import Profile, blocks_of, decoded_lines, parse_folded_lines

#: (profile, how it looks (None: the defaults), its samples where known) → the file's bytes
Writer = Callable[[Profile, "RenderOptions | None", "Sequence[pprof.Sample] | None"], bytes]
#: (a file's bytes, the name errors give it) → its profile; ``ProfileFormatError`` (one line)
Reader = Callable[[bytes, str], Profile]


@dataclass(frozen=True)
class Format:
    """One output format."""

    name: str
    #: a file's suffix, as ``record`` names its output
    suffix: str
    media_type: str
    write: Writer
    read: Reader
    #: what the API answers beside it (a download's name)
    headers: tuple[tuple[str, str], ...] = ()
    #: it labels each sample with its state and thread: worth giving it the samples
    labelled: bool = False


Samples = Sequence[pprof.Sample] | None


def _svg(profile: Profile, options: RenderOptions | None, _: Samples) -> bytes:
    lines = profile.folded_lines()
    drawn = paint_states(render_svg(lines, options))
    folded = "\n".join(lines) + "\n"  # profile.to_folded(), its lines sorted once
    del lines
    return embed(drawn, folded).encode("utf-8")


def _folded(profile: Profile, _: RenderOptions | None, __: Samples) -> bytes:
    return profile.to_folded().encode("utf-8")


def _read_folded(data: bytes, source: str) -> Profile:
    return parse_folded_lines(decoded_lines(blocks_of(data)), source=source)


def _speedscope(profile: Profile, options: RenderOptions | None, _: Samples) -> bytes:
    name = options.title if options else "sidecar profile"
    return (json.dumps(speedscope(profile, name), separators=(",", ":")) + "\n").encode()


def _pprof(profile: Profile, options: RenderOptions | None, samples: Samples) -> bytes:
    comments = [options.title] if options else []
    if samples is None:
        return pprof.encode_profile(profile, comments=comments)
    return pprof.encode(
        samples, rate_hz=profile.rate_hz, start=profile.start, end=profile.end, comments=comments
    )


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("svg", ".svg", "image/svg+xml", _svg, read_svg),
        Format("folded", ".txt", "text/plain; charset=utf-8", _folded, _read_folded),
        Format("speedscope", ".json", "application/json", _speedscope, read_speedscope),
        Format(
            "pprof",
            ".pb.gz",
            pprof.MEDIA_TYPE,
            _pprof,
            pprof.read_pprof,
            (("Content-Disposition", 'attachment; filename="profile.pb.gz"'),),
            labelled=True,
        ),
    )
}


def format_named(name: str) -> Format:
    """The format called ``name``; a ``UsageError`` naming the others if none is."""
    try:
        return FORMATS[name]
    except KeyError:
        raise UsageError(f"unknown format {name!r}; choose one of {', '.join(NAMES)}") from None


def export(
    profile: Profile,
    fmt: str,
    options: RenderOptions | None = None,
    samples: Sequence[pprof.Sample] | None = None,
) -> bytes:
    """The profile in format ``fmt`` (one of ``NAMES``); ``samples``: its samples with their
    labels, for a format that keeps them (pprof)."""
    chosen = format_named(fmt)
    if not profile.stacks:
        raise NoSamples("nothing to write: the profile has no stacks")
    return chosen.write(profile, options, samples)
