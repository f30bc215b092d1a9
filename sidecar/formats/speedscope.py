"""speedscope out and in: a Profile as one sampled profile of speedscope's file format, weighted
by counts (https://www.speedscope.app/file-format-schema.json), and such a file read back
(``read_speedscope``: its sampled profiles, every field checked before it is used)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from sidecar import __version__
from sidecar.errors import ProfileFormatError
from sidecar.formats.svg_counts import SEMICOLON_STANDIN
from sidecar.profile import Profile, check_total, count_of
from sidecar.rules.frames import exact_frame, format_frame, state_of


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
                frame = exact_frame(text)
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


def read_speedscope(data: bytes, source: str = "input") -> Profile:
    """A speedscope file (sidecar's or another profiler's) as a Profile: the stacks of its
    sampled profiles, weighted; one line (``ProfileFormatError``) for anything else."""

    def bad(what: str) -> ProfileFormatError:
        return ProfileFormatError(f"{source}: not a speedscope profile: {what}")

    try:
        doc = json.loads(data.decode("utf-8-sig"))
    except (ValueError, RecursionError) as err:  # also bad UTF-8, numbers too long
        raise bad(f"not JSON ({str(err)[:80]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), list):
        raise bad("no 'profiles' list")
    shared = doc.get("shared")
    frames = shared.get("frames") if isinstance(shared, dict) else None
    if not isinstance(frames, list):
        raise bad("no 'shared.frames' list")
    names = [_frame(frame, index, bad) for index, frame in enumerate(frames)]
    profile = Profile()
    skipped = 0
    for number, one in enumerate(doc["profiles"]):
        if not isinstance(one, dict) or one.get("type") != "sampled":
            skipped += 1
            continue
        samples, weights = one.get("samples"), one.get("weights")
        if not isinstance(samples, list) or not isinstance(weights, list):
            raise bad(f"profile {number} has no 'samples' and 'weights' lists")
        if len(samples) != len(weights):
            raise bad(f"profile {number} has {len(samples):,} samples, {len(weights):,} weights")
        for stack, weight in zip(samples, weights, strict=True):
            if not isinstance(stack, list) or not all(
                type(i) is int and 0 <= i < len(names) for i in stack
            ):
                raise bad(f"profile {number} has a sample naming no listed frame")
            count = _count(weight, bad, source)
            profile.add(";".join(names[i] for i in stack) or "(no frames)", count)
    check_total(profile.total, source)
    if not profile.stacks:
        raise bad("no sampled profile with samples (evented profiles are not read)")
    if skipped:
        profile.notes.append(f"{skipped:,} profiles that are not sampled ones were left out")
    profile.marked = any(state_of(s) != "busy" for s in profile.stacks)
    return profile


def _frame(frame: object, index: int, bad: Callable[[str], ProfileFormatError]) -> str:
    """A frame of the file as folded text: ``name (file:line)``, or its name alone."""
    if not isinstance(frame, dict) or not isinstance(frame.get("name"), str):
        raise bad(f"frame {index} has no name")
    file, line = frame.get("file", ""), frame.get("line", 0)
    if not isinstance(file, str) or type(line) is not int:
        raise bad(f"frame {index} has a file or line that is not one")
    return format_frame(frame["name"].replace(";", SEMICOLON_STANDIN), file, line)


def _count(weight: object, bad: Callable[[str], ProfileFormatError], source: str) -> int:
    """A weight as a sample count: a whole number, at most ``MAX_SAMPLES``."""
    if type(weight) is float and math.isfinite(weight) and weight.is_integer():
        weight = int(weight)
    if type(weight) is not int or weight < 0:
        raise bad(f"a weight of {str(weight)[:40]} is not a whole number of samples")
    return count_of(str(weight), f"{source}: a weight")
