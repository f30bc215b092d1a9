"""Profiles in: a flamegraph SVG or folded text, told apart by content, never by file name."""

from __future__ import annotations

import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor

from sidecar.errors import ProfileFormatError, SidecarError
from sidecar.formats.svg import MAX_SVG_BYTES, read_svg
from sidecar.profile import Profile, parse_folded

#: Inputs above this size are refused before they are read.
MAX_INPUT_BYTES = MAX_SVG_BYTES

_BOM = b"\xef\xbb\xbf"
_FOLDED_LINE = re.compile(rb"^.*\S\s+\d[\d,_]*$")


def load_profile(path: str) -> Profile:
    """Reads a profile file (``-`` is stdin): flamegraph SVG or folded stacks."""
    data = read_input(path)
    return parse_profile(data, source=path)


def read_input(path: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of an input, refusing by its size before reading when the size is known."""
    mb = limit // (1024 * 1024)
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size > limit:
                    raise ProfileFormatError(
                        f"{path}: refused: {size / (1024 * 1024):,.0f} MB is above the "
                        f"{mb} MB limit for an input"
                    )
                data = handle.read(limit + 1)
    except OSError as err:
        raise SidecarError(f"cannot read {path}: {err.strerror}") from err
    if len(data) > limit:
        raise ProfileFormatError(f"{path}: refused: more than the {mb} MB limit for an input")
    return data


def sniff(data: bytes) -> str:
    """``svg`` for XML, ``folded`` for text, ``empty`` or ``binary`` otherwise."""
    head = data[:4096].removeprefix(_BOM).lstrip()
    if not head:
        return "empty"
    if b"\0" in head:
        return "binary"
    if head.startswith((b"<?xml", b"<!")):
        return "svg"
    if head.startswith(b"<"):
        # Folded stacks may start with a frame like "<module> (app.py:1)": a first line that
        # ends in a count and closes no element is folded text.
        first = head.split(b"\n", 1)[0].rstrip()
        if _FOLDED_LINE.match(first) and b"</" not in first and not first.endswith(b">"):
            return "folded"
        return "svg"
    return "folded"


def parse_profile(data: bytes, source: str = "input") -> Profile:
    """A profile from the bytes of a file, whichever of the two formats it is."""
    kind = sniff(data)
    if kind == "empty":
        raise ProfileFormatError(f"{source}: empty; expected a flamegraph SVG or folded stacks")
    if kind == "binary":
        raise ProfileFormatError(
            f"{source}: binary data, not a profile; expected a flamegraph SVG or folded stacks"
        )
    if kind == "svg":
        return read_svg(data, source)
    text = data.decode("utf-8", errors="replace")
    return parse_folded(text, source=source)


#: Above this many bytes together, two inputs are read at once.
PARALLEL_BYTES = 8 * 1024 * 1024


def load_profiles(first: str, second: str) -> tuple[Profile, Profile]:
    """Reads two profiles; two large ones at once.

    SVGs are read natively with the GIL released, so a thread reads the first while this one
    reads the second.
    """
    sizes = _size(first), _size(second)
    for path, size in zip((first, second), sizes, strict=True):
        if size > MAX_INPUT_BYTES:  # refuse before any work on the other input
            read_input(path)
    if sum(sizes) < PARALLEL_BYTES:
        return load_profile(first), load_profile(second)
    with ThreadPoolExecutor(max_workers=1) as threads:
        pending = threads.submit(load_profile, first)
        try:
            other = load_profile(second)
        except BaseException:
            pending.cancel()
            raise
        return pending.result(), other


def _size(path: str) -> int:
    if path == "-":
        return 0
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
