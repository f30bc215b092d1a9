"""Sample counts of one window (or one hour) of one process, packed into one compressed blob.

A window holds a few hundred (stack, thread, state) → count entries; as rows, each would repeat
its window, process and keys. Packed, the entries are sorted by stack and stored column by
column (stack ids as deltas, thread ids through a small table of the window's threads), then
deflated: a window takes a fifth of the room its rows took, and is read back in one piece.

Layout (version 1), little-endian, inside zlib::

    u8 version, u32 entries n, u32 threads k
    k x u64  thread ids, ascending
    n x u64  stack id minus the previous entry's (entries sorted by stack, thread, state)
    n x u32  index of the entry's thread in the thread table
    n x u8   state code
    n x u64  count
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator, Mapping
from itertools import accumulate

from sidecar.errors import SidecarError

VERSION = 1
HEADER = struct.Struct("<BII")
LEVEL = 6

#: (stack id, thread id, state code): what a window's packed counts count
EntryKey = tuple[int, int, int]
#: each entry's count
Entries = dict[EntryKey, int]


class CountsError(SidecarError):
    """A packed counts blob is damaged or of an unknown version."""


def _column(typecode: str, values: Iterable[int]) -> bytes:
    column = array(typecode, values)
    if sys.byteorder == "big":
        column.byteswap()
    return column.tobytes()


def _read(typecode: str, data: bytes, offset: int, count: int) -> tuple[array[int], int]:
    column = array(typecode)
    end = offset + count * column.itemsize
    if end > len(data):
        raise CountsError("packed counts are truncated")
    column.frombytes(data[offset:end])
    if sys.byteorder == "big":
        column.byteswap()
    return column, end


def pack(counts: Mapping[EntryKey, int]) -> bytes:
    """The blob of a window's counts (entries with a zero count are left out)."""
    keys = sorted(key for key, count in counts.items() if count)
    threads = sorted({thread for _, thread, _ in keys})
    index = {thread: position for position, thread in enumerate(threads)}
    previous = 0
    deltas = []
    for stack, _, _ in keys:
        deltas.append(stack - previous)
        previous = stack
    body = b"".join(
        (
            HEADER.pack(VERSION, len(keys), len(threads)),
            _column("Q", threads),
            _column("Q", deltas),
            _column("I", (index[thread] for _, thread, _ in keys)),
            _column("B", (state for _, _, state in keys)),
            _column("Q", (counts[key] for key in keys)),
        )
    )
    return zlib.compress(body, LEVEL)


def unpack(blob: bytes) -> Iterator[tuple[int, int, int, int]]:
    """The entries of a blob: (stack id, thread id, state code, count), sorted by stack."""
    try:
        data = zlib.decompress(blob)
    except zlib.error as err:
        raise CountsError(f"packed counts cannot be inflated: {err}") from err
    if len(data) < HEADER.size:
        raise CountsError("packed counts are truncated")
    version, entries, thread_count = HEADER.unpack_from(data)
    if version != VERSION:
        raise CountsError(f"packed counts of unknown version {version}")
    offset = HEADER.size
    threads, offset = _read("Q", data, offset, thread_count)
    deltas, offset = _read("Q", data, offset, entries)
    indexes, offset = _read("I", data, offset, entries)
    states, offset = _read("B", data, offset, entries)
    counts, offset = _read("Q", data, offset, entries)
    if offset != len(data) or (indexes and max(indexes) >= thread_count):
        raise CountsError("packed counts are inconsistent")
    thread_ids = [threads[i] for i in indexes]
    return zip(accumulate(deltas), thread_ids, states, counts, strict=True)


def unpack_dict(blob: bytes) -> Entries:
    return {(stack, thread, state): count for stack, thread, state, count in unpack(blob)}


def merge(blobs: Iterable[bytes | None]) -> bytes:
    """One blob with the summed counts of several (None for none)."""
    total: Entries = {}
    for blob in blobs:
        if blob is None:
            continue
        for stack, thread, state, count in unpack(blob):
            key = (stack, thread, state)
            total[key] = total.get(key, 0) + count
    return pack(total)


def stack_ids(blob: bytes) -> set[int]:
    return {stack for stack, _, _, _ in unpack(blob)}
