"""The Profile: folded stacks with counts and what is known about where they came from.

Folded text is the interchange format: one line per unique stack, frames root first joined by
``;``, then a space and the sample count. Frames read ``function (file:line)``. Off-CPU samples
end in a synthetic leaf, ``[idle]`` or ``[blocked]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from sidecar.errors import ProfileFormatError
from sidecar.rules.frames import state_of

_COUNT = re.compile(r"^(?P<stack>.*\S)\s+(?P<count>\d[\d,_]*)$")


@dataclass
class Target:
    """What is known about the sampled process."""

    pid: int | None = None
    cmdline: str = ""
    python_version: str = ""
    start_time: int | None = None


@dataclass
class Profile:
    """Folded stacks with counts, plus where and when they were sampled."""

    stacks: dict[str, int] = field(default_factory=dict)
    target: Target = field(default_factory=Target)
    start: float | None = None
    end: float | None = None
    rate_hz: float | None = None
    #: True when off-CPU samples carry [idle]/[blocked] leaves (sidecar's own recordings).
    marked: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.stacks.values())

    def add(self, stack: str, count: int) -> None:
        if count > 0:
            self.stacks[stack] = self.stacks.get(stack, 0) + count

    def folded_lines(self) -> list[str]:
        """Folded lines sorted by stack, the form renderers and files use."""
        return [f"{stack} {count}" for stack, count in sorted(self.stacks.items())]

    def to_folded(self) -> str:
        return "".join(line + "\n" for line in self.folded_lines())


def parse_folded(text: str, source: str = "input") -> Profile:
    """Reads folded text; blank lines and ``#`` comments are skipped, counts may repeat a stack."""
    profile = Profile()
    bad: list[int] = []
    for number, line in enumerate(_lines(text), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _COUNT.match(stripped)
        if match is None:
            bad.append(number)
            continue
        profile.add(match["stack"], int(match["count"].replace(",", "").replace("_", "")))
    if bad:
        where = ", ".join(str(n) for n in bad[:5]) + (" ..." if len(bad) > 5 else "")
        raise ProfileFormatError(
            f"{source}: line {where} is not folded text ('frame;frame;... COUNT')"
        )
    if not profile.stacks:
        raise ProfileFormatError(f"{source}: no stacks found")
    profile.marked = any(state_of(s) != "busy" for s in profile.stacks)
    return profile


def _lines(text: str) -> Iterator[str]:
    yield from text.splitlines()
