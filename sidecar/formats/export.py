"""Profiles out, one table of formats: what ``record`` writes, what ``/api/profile`` serves, and
each format's one implementation (``render``: flamegraph SVG; folded text, the interchange
format; ``speedscope``; ``pprof``, which the Pyroscope push sends too).

A format turns a Profile into bytes. pprof alone can say more than the folded stacks do: given
the samples (``pprof.Sample``: each with its state and its thread's name), it labels each one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sidecar.errors import NoSamples, UsageError
from sidecar.formats import pprof
from sidecar.formats.render import RenderOptions, render_svg
from sidecar.formats.speedscope import speedscope
from sidecar.profile import Profile

#: (profile, how it looks (None: the defaults), its samples where known) → the file's bytes
Writer = Callable[[Profile, "RenderOptions | None", "Sequence[pprof.Sample] | None"], bytes]


@dataclass(frozen=True)
class Format:
    """One output format."""

    name: str
    #: a file's suffix, as ``record`` names its output
    suffix: str
    media_type: str
    write: Writer
    #: what the API answers beside it (a download's name)
    headers: tuple[tuple[str, str], ...] = ()
    #: it labels each sample with its state and thread: worth giving it the samples
    labelled: bool = False


Samples = Sequence[pprof.Sample] | None


def _svg(profile: Profile, options: RenderOptions | None, _: Samples) -> bytes:
    return render_svg(profile.folded_lines(), options).encode("utf-8")


def _folded(profile: Profile, _: RenderOptions | None, __: Samples) -> bytes:
    return profile.to_folded().encode("utf-8")


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
        Format("svg", ".svg", "image/svg+xml", _svg),
        Format("folded", ".txt", "text/plain; charset=utf-8", _folded),
        Format("speedscope", ".json", "application/json", _speedscope),
        Format(
            "pprof",
            ".pb.gz",
            pprof.MEDIA_TYPE,
            _pprof,
            (("Content-Disposition", 'attachment; filename="profile.pb.gz"'),),
            labelled=True,
        ),
    )
}
NAMES = tuple(FORMATS)


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
