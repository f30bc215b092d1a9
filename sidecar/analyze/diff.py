"""Two profiles compared: what grew, what shrank, and a differential flamegraph of it.

Frames are compared as shares of each profile's total, so recordings of different lengths
compare fairly. Frame names lose what differs between runs without being code (thread ids,
addresses) before anything is matched. The differential graph is inferno's: two-count folded
lines ``stack before after``; frame width is the *after* count, red grew, blue shrank.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

from sidecar import _native
from sidecar.analyze.threads import analyze
from sidecar.errors import ProfileFormatError
from sidecar.formats.render import RenderOptions, render_svg
from sidecar.profile import Profile
from sidecar.rules.frames import FRAME as FRAME_PATTERN
from sidecar.rules.frames import OFF_CPU_LEAVES, STATES

_HEX = re.compile(r"0x[0-9a-fA-F]+")
_THREAD = re.compile(r"thread \((?P<inner>.*)\)", re.DOTALL)
_THREAD_ID = re.compile(r"\s*\b\d{3,}\b\s*$")
_NAME_NUMBER = re.compile(r"(?<=[A-Za-z])[-_]\d+(?:_\d+)*\b")
_PROCESS = re.compile(r"^process \d+:")
#: A caller whose change is this much one callee's is left out of the total-share table.
PASS_THROUGH = 0.9
#: How many of those callers a row names.
VIA_MAX = 3


def normalize_frame(text: str) -> str:
    """A frame without run-specific parts: addresses, thread ids, worker numbers, pids."""
    if "0x" not in text and not text.startswith(("thread (", "process ")):
        return text  # nothing below would change it
    thread = _THREAD.fullmatch(text)
    if thread is not None:
        inner = _HEX.sub("", thread["inner"])
        inner = _THREAD_ID.sub("", inner)
        inner = _NAME_NUMBER.sub("", inner).strip()
        return f"thread ({inner})" if inner else "thread"
    text = _PROCESS.sub("process:", text)
    return _HEX.sub("0x?", text) if "0x" in text else text


def _normalized(profile: Profile) -> tuple[Profile, list[str]]:
    """A copy of the profile with every frame name normalized (stacks that become equal merge),
    and the distinct frames of the result."""
    out = Profile(
        target=profile.target,
        start=profile.start,
        end=profile.end,
        rate_hz=profile.rate_hz,
        marked=profile.marked,
        notes=list(profile.notes),
    )
    cache = {text: normalize_frame(text) for text in _native.frame_names(profile.stacks)}
    if all(name == text for text, name in cache.items()):
        out.stacks = profile.stacks  # the same stacks: shared, not copied (neither changes)
        return out, list(cache)
    for stack, count in profile.stacks.items():
        out.add(";".join([cache[text] for text in stack.split(";")]), count)
    return out, list(dict.fromkeys(cache.values()))


def function_of(frame: str) -> str:
    """The table's key for a frame: ``function (file)``, without the line that changes per run.

    What ``parse_frame`` splits, without making a Frame (this runs once per distinct frame).
    """
    match = FRAME_PATTERN.match(frame)
    if match is None or not match["file"]:
        return frame
    return f"{match['name']} ({match['file']})"


#: Totals from here on are not exact as floats: profiles that large are not compared.
_EXACT = 2**53


@dataclass(frozen=True)
class Change:
    """A frame's share of all samples before and after (0..1)."""

    frame: str
    before: float
    after: float
    #: Callers that passed this change on whole, nearest first (total-share table only).
    via: tuple[str, ...] = ()

    @property
    def delta(self) -> float:
        return self.after - self.before


@dataclass
class Shares:
    """Per function: self share and total share; per state its share (busy, idle, blocked,
    gil: a stack's leaf says which; blocked and gil stacks lose their leaf, idle ones count
    in no function)."""

    self_: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)
    states: dict[str, float] = field(default_factory=dict)


@dataclass
class Diff:
    """The comparison of two profiles."""

    before: Profile
    after: Profile
    #: Two-count folded lines ``stack before after``, sorted by stack.
    lines: list[str]
    #: What the before counts were multiplied by (--normalize), else None.
    scale: float | None
    self_changes: list[Change]
    total_changes: list[Change]
    state_changes: list[Change]
    verdict: str
    #: Whose shares ``state_changes`` are, as ``stats`` says it (``Analysis.covers``).
    states_of: str = "all threads (no event loop seen)"

    @property
    def unchanged(self) -> bool:
        return not self.self_changes and not self.total_changes and not self.state_changes


def scaled(counts: dict[str, int], target: int) -> dict[str, int]:
    """Counts scaled to add up to exactly ``target`` (largest remainders get the rounding)."""
    total = sum(counts.values())
    if total <= 0:
        return dict(counts)
    exact = {k: v * target / total for k, v in counts.items()}
    out = {k: math.floor(v) for k, v in exact.items()}
    left = target - sum(out.values())
    for key in sorted(exact, key=lambda k: (out[k] - exact[k], k))[:left]:
        out[key] += 1
    return out


def _ranked(before: dict[str, float], after: dict[str, float]) -> list[Change]:
    """The changed frames, largest change (rounded to 12 digits) first, growth before shrink,
    then by name."""
    rows = []
    for name in before.keys() | after.keys():
        old, new = before.get(name, 0.0), after.get(name, 0.0)
        delta = new - old  # Change.delta
        if delta != 0:
            rows.append((-round(abs(delta), 12), -delta, name, old, new))
    rows.sort(key=lambda row: row[:3])
    return [Change(name, old, new) for _, _, name, old, new in rows]


#: Per caller: the callee whose edge share grew most, by how much, and the one that shrank most.
_Carriers = dict[str, tuple[float, str, float, str]]


def compare_shares(
    before: Profile, after: Profile, frames: list[str]
) -> tuple[Shares, Shares, _Carriers]:
    """Both profiles' shares and, per caller, the callees that carried the most change,
    counted natively (native/src/formats/shares.rs); ``frames``: the distinct frames of both
    profiles. Counts must add up to less than 2**53, where shares are exact as floats."""
    for name, profile in (("before", before), ("after", after)):
        if profile.total >= _EXACT:
            raise ProfileFormatError(
                f"{name}: {profile.total:,} samples in all; a comparison counts at most "
                f"{_EXACT - 1:,}"
            )
    keys = {text: function_of(text) for text in frames}
    a, b, carriers = _native.diff_shares(before.stacks, after.stacks, keys)
    return _from_counts(a, before.total), _from_counts(b, after.total), carriers


def _from_counts(
    counts: tuple[dict[str, int], dict[str, int], dict[str, int]], total: int
) -> Shares:
    self_, whole, states = counts
    return Shares(
        self_={k: v / total for k, v in self_.items()},
        total={k: v / total for k, v in whole.items()},
        states={k: v / total for k, v in states.items()},
    )


def _total_changes(before: Shares, after: Shares, carriers: _Carriers) -> list[Change]:
    """Total-share changes where they happen: a caller that passes its change whole to one
    callee is folded into that callee's row, named in its ``via`` (nearest caller first)."""
    ranked = _ranked(before.total, after.total)
    passed: dict[str, str] = {}
    for change in ranked:
        up, up_to, down, down_to = carriers.get(change.frame, (0.0, "", 0.0, ""))
        moved, callee = (up, up_to) if change.delta > 0 else (down, down_to)
        if callee and moved / change.delta >= PASS_THROUGH:
            passed[change.frame] = callee
    callers: dict[str, list[str]] = defaultdict(list)
    for caller, callee in passed.items():
        callers[callee].append(caller)
    by_name = {c.frame: c for c in ranked}
    out = []
    for change in ranked:
        if change.frame in passed:
            continue
        via: list[str] = []
        frame = change.frame
        while callers.get(frame) and len(via) < VIA_MAX:
            frame = max(callers[frame], key=lambda f: (abs(by_name[f].delta), f))
            if frame in via or frame == change.frame:
                break
            via.append(frame)
        out.append(Change(change.frame, change.before, change.after, tuple(via)))
    return out


def verdict(before_total: int, after_total: int, scale: float | None) -> str:
    """One line on how much the totals differ."""
    if before_total == after_total:
        text = f"totals equal: {after_total:,} samples each"
    else:
        change = (after_total - before_total) / before_total if before_total else math.inf
        if abs(change) < 0.05:
            text = (
                f"totals about equal: before {before_total:,}, after {after_total:,} samples "
                f"({change:+.1%})"
            )
        else:
            text = (
                f"totals differ: before {before_total:,}, after {after_total:,} samples "
                f"(after/before = {after_total / before_total:.3g}x); the tables compare shares"
            )
            if scale is None:
                text += ", --normalize scales the graph"
    if scale is not None and before_total != after_total:
        text += f"; before scaled by {scale:.4g} to {after_total:,} samples (--normalize)"
    return text


def diff_profiles(before: Profile, after: Profile, *, normalize: bool = False) -> Diff:
    """Compares two profiles; ``normalize`` scales before's counts to after's total."""
    before, before_frames = _normalized(before)
    after, after_frames = _normalized(after)
    frames = list(dict.fromkeys(before_frames + after_frames))
    a_shares, b_shares, carriers = compare_shares(before, after, frames)
    self_changes = [
        c for c in _ranked(a_shares.self_, b_shares.self_) if c.frame not in OFF_CPU_LEAVES
    ]
    total_changes = _total_changes(a_shares, b_shares, carriers)
    state_changes: list[Change] = []
    states_of = Diff.states_of
    if before.marked and after.marked:
        # the event loop's shares, as stats gives them, where both profiles have one
        loops = analyze(before), analyze(after)
        if not any(a.no_loop_thread for a in loops):
            states_of = loops[0].covers
            shares = [{s: a.share(s) for s in STATES} for a in loops]
        else:
            shares = [a_shares.states, b_shares.states]
        state_changes = [Change(s, shares[0].get(s, 0.0), shares[1].get(s, 0.0)) for s in STATES]
        if any(a.untold for a in loops):  # frames too narrow to draw in an SVG: no state
            state_changes.append(Change("not told", loops[0].untold_share, loops[1].untold_share))
        if all(c.delta == 0 for c in state_changes):
            state_changes = []
    before_counts = before.stacks
    scale: float | None = None
    if normalize and before.total and after.total:
        scale = after.total / before.total
        before_counts = scaled(before.stacks, after.total)
    lines = []
    for stack in sorted(before_counts.keys() | after.stacks.keys()):
        old, new = before_counts.get(stack, 0), after.stacks.get(stack, 0)
        if old or new:
            lines.append(f"{stack} {old} {new}")
    return Diff(
        before=before,
        after=after,
        lines=lines,
        scale=scale,
        self_changes=self_changes,
        total_changes=total_changes,
        state_changes=state_changes,
        verdict=verdict(before.total, after.total, scale),
        states_of=states_of,
    )


def render_diff(diff: Diff, options: RenderOptions | None = None) -> str:
    """The differential flamegraph SVG (width = after, red grew, blue shrank)."""
    return render_svg(diff.lines, options or RenderOptions(title="Differential flame graph"))


def _short(function: str) -> str:
    """``name (file)`` without the file."""
    name, sep, _ = function.rpartition(" (")
    return name if sep and function.endswith(")") else function


def _pct(share: float) -> str:
    return f"{100 * share:6.2f}%"


def report(diff: Diff, top: int = 10) -> list[str]:
    """The change tables and the verdict, as lines of text."""
    out: list[str] = []
    if diff.unchanged:
        out.append("no frame changed its share of the samples")
    for title, changes in (
        ("self share (time in the frame itself)", diff.self_changes),
        ("total share (time in the frame and what it calls)", diff.total_changes),
    ):
        if not changes:
            continue
        out.append(f"largest changes in {title}:")
        out.append("   before    after   change  frame")
        for change in changes[:top]:
            via = "".join(f" <- {_short(f)}" for f in change.via)
            out.append(
                f"  {_pct(change.before)} {_pct(change.after)} "
                f"{100 * change.delta:+7.2f}  {change.frame}{via}"
            )
        out.append("")
    if diff.state_changes:
        states = " · ".join(
            f"{c.frame} {100 * c.before:.1f}% -> {100 * c.after:.1f}% ({100 * c.delta:+.1f})"
            for c in diff.state_changes
        )
        out.append(f"states of the {diff.states_of}: {states}")
    out.append(diff.verdict)
    return out
