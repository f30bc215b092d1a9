"""pprof out, read back by a plain decoder of ``profile.proto`` written here: each sample's
stack, ``state`` label (``gil`` among them, with its ``[gil]`` leaf) and ``[gc]`` frames, of a
profile file and of the windows pushed to Pyroscope (``go tool pprof`` reads real recordings
in tests/live/test_pprof.py)."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

from sidecar.formats import pprof
from sidecar.profile import Profile
from sidecar.serve.push.series import profiles
from tests.support.batches import window_batch

LOOP = "main (app.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:600)"
HANDLER = f"{LOOP};handler (app.py:20)"
CRUNCH = "Thread.run (threading.py:1010);crunch (app.py:7)"


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as ints, the rest as bytes."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(data, at)
            yield number, data[at : at + size]
            at += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            yield number, data[at : at + width]
            at += width
        else:
            raise AssertionError(f"wire type {wire}")


def _ints(value: int | bytes) -> list[int]:
    """A repeated integer field's values, packed or not."""
    if isinstance(value, int):
        return [value]
    out, at = [], 0
    while at < len(value):
        number, at = _varint(value, at)
        out.append(number)
    return out


def _message(value: int | bytes) -> list[tuple[int, int | bytes]]:
    assert isinstance(value, bytes)
    return list(_fields(value))


def decode(blob: bytes) -> list[tuple[str, dict[str, str], list[int]]]:
    """Each sample of a gzipped profile.proto as (folded stack root first, string labels,
    values)."""
    fields = list(_fields(gzip.decompress(blob)))
    strings = [v.decode() for n, v in fields if n == 6 and isinstance(v, bytes)]
    functions: dict[int, tuple[str, str]] = {}
    for number, value in fields:
        if number == 5:
            parts = dict(_message(value))
            functions[int(parts[1])] = (
                strings[int(parts.get(2, 0))],
                strings[int(parts.get(4, 0))],
            )
    locations: dict[int, str] = {}
    for number, value in fields:
        if number == 4:
            parts = _message(value)
            ident = next(int(v) for n, v in parts if n == 1)
            line = dict(_message(next(v for n, v in parts if n == 4)))
            name, file = functions[int(line[1])]
            locations[ident] = f"{name} ({file}:{line.get(2, 0)})" if file else name
    samples = []
    for number, value in fields:
        if number != 2:
            continue
        ids: list[int] = []
        values: list[int] = []
        labels: dict[str, str] = {}
        for part, inner in _message(value):
            if part == 1:
                ids += _ints(inner)
            elif part == 2:
                values += _ints(inner)
            elif part == 3:
                label = dict(_message(inner))
                labels[strings[int(label[1])]] = strings[int(label[2])]
        stack = ";".join(locations[i] for i in reversed(ids))  # pprof: leaf first
        samples.append((stack, labels, values))
    return samples


def test_a_profile_file_keeps_gil_leaves_and_gc_frames() -> None:
    """Each sample's state label is its leaf's state, gil too; the [gil] leaf and a [gc]
    frame on top of a busy stack are frames of their own, and every count is kept."""
    profile = Profile(rate_hz=100.0)
    written = {
        f"{HANDLER};[gil]": 7,
        f"{HANDLER};[gc]": 3,
        HANDLER: 5,
        f"{LOOP};select (selectors.py:468);[idle]": 2,
    }
    for stack, count in written.items():
        profile.add(stack, count)
    read = decode(pprof.encode_profile(profile))
    assert {stack: values[0] for stack, _, values in read} == written
    assert {stack: labels["state"] for stack, labels, _ in read} == {
        f"{HANDLER};[gil]": "gil",
        f"{HANDLER};[gc]": "busy",
        HANDLER: "busy",
        f"{LOOP};select (selectors.py:468);[idle]": "idle",
    }
    # the wall time each stands for: 10 ms a sample at 100 Hz
    assert all(values[1] == values[0] * 10_000_000 for _, _, values in read)


def test_a_pushed_window_labels_gil_samples_and_keeps_gc_frames() -> None:
    """A window of a starved loop as Pyroscope gets it: ``wall`` has every sample, the loop's
    wait for the GIL ending in [gil] with state gil and its thread's name; ``process_cpu`` only
    the busy ones, the collector's [gc] frame among them."""
    rows = [
        (HANDLER, 11, "gil", 6),
        (HANDLER, 11, "busy", 1),
        (f"{HANDLER};[gc]", 11, "busy", 1),
        (CRUNCH, 12, "busy", 9),
    ]
    names = {11: "MainThread", 12: "cruncher"}
    batch = window_batch((4242, 1), 1000, 10, 9, rows, names)
    made = dict(profiles(batch, rate_hz=100.0))
    wall = {
        (stack, labels["state"], labels["thread_name"]): v[0]
        for stack, labels, v in decode(made["wall"])
    }
    assert wall == {
        (f"{HANDLER};[gil]", "gil", "MainThread"): 6 * 10_000_000,
        (HANDLER, "busy", "MainThread"): 10_000_000,
        (f"{HANDLER};[gc]", "busy", "MainThread"): 10_000_000,
        (CRUNCH, "busy", "cruncher"): 9 * 10_000_000,
    }
    cpu = {stack: labels["state"] for stack, labels, _ in decode(made["process_cpu"])}
    assert cpu == {HANDLER: "busy", f"{HANDLER};[gc]": "busy", CRUNCH: "busy"}
