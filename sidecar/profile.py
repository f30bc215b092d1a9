"""The Profile: folded stacks with counts and what is known about where they came from.

Folded text is the interchange format: one line per unique stack, frames root first joined by
``;``, then a space and the sample count. Frames read ``function (file:line)``. Off-CPU samples
end in a synthetic leaf, ``[idle]`` or ``[blocked]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from sidecar.errors import ProfileFormatError
from sidecar.rules.frames import state_of

_COUNT = re.compile(r"^(?P<stack>.*\S)\s+(?P<count>\d[\d,_]*)$")

#: The most samples a profile holds, in one count or all together: shares are exact as floats
#: up to it, and no reader (folded text, SVG) or writer (render, diff) counts past it.
MAX_SAMPLES = 2**53 - 1


def count_of(text: str, where: str) -> int:
    """A sample count written in decimal digits (``,`` or ``_`` between them allowed), at most
    ``MAX_SAMPLES``; past it, a ``ProfileFormatError`` that names ``where`` (``x.folded: line
    3``) and the count (or how many digits it has), never an overflow or a traceback."""
    digits = text.replace(",", "").replace("_", "").lstrip("0") or "0"
    if not digits.isdigit():
        raise ProfileFormatError(f"{where}: {text[:40]!r} is not a sample count")
    if len(digits) > len(str(MAX_SAMPLES)) or int(digits) > MAX_SAMPLES:
        shown = f"{len(digits):,} digits" if len(digits) > 24 else f"{int(digits):,}"
        raise ProfileFormatError(
            f"{where}: a count of {shown} is past the most a profile counts ({MAX_SAMPLES:,})"
        )
    return int(digits)


def check_total(total: int, source: str) -> None:
    """Refuses a profile whose counts add up past ``MAX_SAMPLES``."""
    if total > MAX_SAMPLES:
        raise ProfileFormatError(
            f"{source}: its counts add up to {total:,}, past the most a profile counts "
            f"({MAX_SAMPLES:,})"
        )


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
    return parse_folded_lines(_lines(text), source)


def parse_folded_lines(lines: Iterable[str], source: str = "input") -> Profile:
    """``parse_folded`` of the text's lines (``str.splitlines``'), read one by one."""
    profile = Profile()
    stacks = profile.stacks
    for stack, count in folded_counts(lines, source):
        stacks[stack] = stacks.get(stack, 0) + count
    profile.marked = any(state_of(s) != "busy" for s in stacks)
    return profile


def folded_counts(lines: Iterable[str], source: str = "input") -> Iterator[tuple[str, int]]:
    """The stack and count of each line of folded text whose count is above 0, in order (a
    stack may come again: its counts add up); once all are read, a ``ProfileFormatError`` for
    lines that are not folded text, counts past ``MAX_SAMPLES`` together, or no stack."""
    bad: list[int] = []
    total = 0
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped or stripped[0] == "#":
            continue
        # most lines: one space, then plain digits (what _COUNT reads them as, quicker)
        stack, _, digits = stripped.rpartition(" ")
        if stack and digits.isdigit() and digits.isascii() and not stack[-1].isspace():
            if len(digits) > _PLAIN_DIGITS:
                count = count_of(digits, f"{source}: line {number}")
            else:
                count = int(digits)
        else:
            match = _COUNT.match(stripped)
            if match is None:
                bad.append(number)
                continue
            stack = match["stack"]
            count = count_of(match["count"], f"{source}: line {number}")
        if count > 0:
            total += count
            yield stack, count
    check_total(total, source)
    if bad:
        where = ", ".join(str(n) for n in bad[:5]) + (" ..." if len(bad) > 5 else "")
        raise ProfileFormatError(
            f"{source}: line {where} is not folded text ('frame;frame;... COUNT')"
        )
    if not total:
        raise ProfileFormatError(f"{source}: no stacks found")


#: Counts of up to this many digits are below ``MAX_SAMPLES``: no need to check them.
_PLAIN_DIGITS = len(str(MAX_SAMPLES)) - 1
#: Characters of text split into lines at once.
_CHUNK = 1 << 20


def _lines(text: str) -> Iterator[str]:
    """``text.splitlines()``, a piece at a time (each cut after a newline): never a list of
    all its lines at once."""
    start = 0
    while start < len(text):
        cut = text.find("\n", start + _CHUNK)
        end = len(text) if cut < 0 else cut + 1
        yield from text[start:end].splitlines()
        start = end


def decoded_lines(blocks: Iterable[bytes]) -> Iterator[str]:
    """The lines of UTF-8 text given in blocks of bytes (undecodable bytes as U+FFFD), as
    ``b"".join(blocks).decode("utf-8", errors="replace").splitlines()`` gives them, a piece at
    a time (each cut after a newline): never the whole text nor a list of all its lines."""
    pending: list[bytes] = []
    for block in blocks:
        cut = block.rfind(b"\n") + 1
        if not cut:
            pending.append(block)
            continue
        pending.append(block[:cut])
        yield from b"".join(pending).decode("utf-8", errors="replace").splitlines()
        pending = [block[cut:]]
    yield from b"".join(pending).decode("utf-8", errors="replace").splitlines()


def blocks_of(data: bytes) -> Iterator[bytes]:
    """``data`` in blocks of ``_CHUNK`` bytes."""
    size = _CHUNK
    for start in range(0, len(data), size):
        yield data[start : start + size]
