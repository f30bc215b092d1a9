"""Profiles in: any format sidecar writes (``export.FORMATS``: folded text, a flamegraph SVG,
speedscope JSON, gzipped pprof), told apart by content, never by file name, and read by that
format's one reader."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import BinaryIO

from sidecar.errors import ProfileFormatError, SidecarError
from sidecar.formats.export import FORMATS
from sidecar.formats.svg import MAX_SVG_BYTES
from sidecar.profile import Profile, decoded_lines, folded_counts, parse_folded_lines

#: Inputs above this size are refused before they are read.
MAX_INPUT_BYTES = MAX_SVG_BYTES

_BOM = b"\xef\xbb\xbf"
_GZIP = b"\x1f\x8b"
#: What a profile file can be, as errors say it.
EXPECTED = "folded stacks, a flamegraph SVG, speedscope JSON or a gzipped pprof file"
_FOLDED_LINE = re.compile(rb"^.*\S\s+\d[\d,_]*$")


def load_profile(path: str) -> Profile:
    """Reads a profile file (``-`` is stdin) in any format sidecar writes; a file of folded
    text a piece at a time, never whole (``parse_folded_lines``)."""
    if path != "-":
        try:
            with open(path, "rb") as handle:
                _check_size(path, os.fstat(handle.fileno()).st_size)
                head = handle.read(_HEAD)
                if sniff(head) == "folded":
                    return parse_folded_lines(decoded_lines(_blocks(path, handle, head)), path)
        except OSError as err:
            raise SidecarError(f"cannot read {path}: {err.strerror}") from err
    data = read_input(path)
    return parse_profile(data, source=path)


def folded_file(path: str) -> Callable[[], Iterator[tuple[str, int]]] | None:
    """For a file of folded text, what reads its stacks and counts (``folded_counts``: a stack
    may come again) a piece at a time, from its start at each call, without a Profile; None
    for stdin or a file in another format."""
    if path == "-":
        return None
    try:
        with open(path, "rb") as handle:
            _check_size(path, os.fstat(handle.fileno()).st_size)
            if sniff(handle.read(_HEAD)) != "folded":
                return None
    except OSError as err:
        raise SidecarError(f"cannot read {path}: {err.strerror}") from err

    def counts() -> Iterator[tuple[str, int]]:
        try:
            with open(path, "rb") as handle:
                _check_size(path, os.fstat(handle.fileno()).st_size)
                yield from folded_counts(decoded_lines(_blocks(path, handle, b"")), path)
        except OSError as err:
            raise SidecarError(f"cannot read {path}: {err.strerror}") from err

    return counts


#: What ``sniff`` reads of a file; how much more is read at once.
_HEAD = 4096
_BLOCK = 1 << 20


def _blocks(path: str, handle: BinaryIO, head: bytes) -> Iterator[bytes]:
    """A file's bytes in blocks (``head``, read already, first), at most ``MAX_INPUT_BYTES``."""
    read = len(head)
    yield head
    while block := handle.read(_BLOCK):
        read += len(block)
        if read > MAX_INPUT_BYTES:
            _check_size(path, None)
        yield block


def _check_size(path: str, size: int | None, limit: int = MAX_INPUT_BYTES) -> None:
    """Refuses an input above ``limit`` bytes: of ``size``, or None once more was read."""
    mb = limit // (1024 * 1024)
    if size is None:
        raise ProfileFormatError(f"{path}: refused: more than the {mb} MB limit for an input")
    if size > limit:
        raise ProfileFormatError(
            f"{path}: refused: {size / (1024 * 1024):,.0f} MB is above the "
            f"{mb} MB limit for an input"
        )


def read_input(path: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of an input, refusing by its size before reading when the size is known."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as handle:
                _check_size(path, os.fstat(handle.fileno()).st_size, limit)
                data = handle.read(limit + 1)
    except OSError as err:
        raise SidecarError(f"cannot read {path}: {err.strerror}") from err
    if len(data) > limit:
        _check_size(path, None, limit)
    return data


def sniff(data: bytes) -> str:
    """The format of a file's bytes: a name of ``export.FORMATS`` (``svg`` for XML, ``pprof``
    for gzip, ``speedscope`` for JSON, ``folded`` for other text), else ``empty`` or
    ``binary``. Folded text may start with ``<`` (``<module>``), ``{`` or ``[``: a first line that
    is whole and ends in a count is folded text."""
    if data.startswith(_GZIP):
        return "pprof"
    head = data[:4096].removeprefix(_BOM).lstrip()
    if not head:
        return "empty"
    if b"\0" in head:
        return "binary"
    first, newline, _ = head.partition(b"\n")
    first = first.rstrip()
    whole = bool(newline) or len(head) < 4096
    counted = whole and _FOLDED_LINE.match(first) is not None
    if head.startswith((b"{", b"[")):  # JSON, unless a folded line (frames like "[native]")
        return "folded" if counted else "speedscope"
    if head.startswith((b"<?xml", b"<!")):
        return "svg"
    if head.startswith(b"<"):
        if counted and b"</" not in first and not first.endswith(b">"):
            return "folded"
        return "svg"
    return "folded"


def parse_profile(data: bytes, source: str = "input") -> Profile:
    """A profile from the bytes of a file, in whichever format it is."""
    kind = sniff(data)
    if kind == "empty":
        raise ProfileFormatError(f"{source}: empty; expected {EXPECTED}")
    if kind == "binary":
        raise ProfileFormatError(f"{source}: binary data, not a profile; expected {EXPECTED}")
    return FORMATS[kind].read(data, source)


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
    from concurrent.futures import ThreadPoolExecutor  # for large inputs only

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
