"""speedscope out: a Profile as one sampled profile of speedscope's file format, weighted by
counts (https://www.speedscope.app/file-format-schema.json)."""

from __future__ import annotations

from typing import Any

from sidecar import __version__
from sidecar.profile import Profile
from sidecar.rules.frames import parse_frame


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
