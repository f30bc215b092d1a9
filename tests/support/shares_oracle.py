"""The counts behind a comparison, written plainly in Python: the oracle the native counting
(``sidecar.analyze.diff.compare_shares``, native/src/formats/shares.rs) is tested against.

Per function: self samples (busy stacks' leaf, a [gc] frame on top included), total samples
(once per stack it is on, not the [idle]/[blocked]/[gil] leaves; idle stacks count in no
function), per caller -> callee edge the samples passed down, and per state its samples;
shares are counts over the profile's total.
Per caller, the carriers: the callee whose edge share grew most and the one that shrank most.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from sidecar.analyze.diff import function_of
from sidecar.profile import Profile
from sidecar.rules.frames import OFF_CPU_LEAVES, state_of

_LEAVES = set(OFF_CPU_LEAVES)

Carriers = dict[str, tuple[float, str, float, str]]


@dataclass
class Counted:
    """Shares per function, per caller -> callee edge and per state."""

    self_: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)
    edges: dict[tuple[str, str], float] = field(default_factory=dict)
    states: dict[str, float] = field(default_factory=dict)


def counted(profile: Profile) -> Counted:
    """The profile's shares, counted in Python."""
    self_: dict[str, int] = defaultdict(int)
    whole: dict[str, int] = defaultdict(int)
    edges: dict[tuple[str, str], int] = defaultdict(int)
    states: dict[str, int] = defaultdict(int)
    for stack, count in profile.stacks.items():
        state = state_of(stack)
        states[state] += count
        if state == "idle":
            continue  # waiting is not code's cost: it shows in the states line, not the tables
        names = [function_of(text) for text in stack.split(";")]
        if state == "busy":
            self_[names[-1]] += count
        else:
            names.pop()  # the [blocked] or [gil] leaf
        for name in set(names) - _LEAVES:
            whole[name] += count
        for pair in set(itertools.pairwise(names)):
            if pair[0] != pair[1]:
                edges[pair] += count
    total = profile.total
    if total <= 0:
        return Counted()
    return Counted(
        self_={k: v / total for k, v in self_.items()},
        total={k: v / total for k, v in whole.items()},
        edges={k: v / total for k, v in edges.items()},
        states={k: v / total for k, v in states.items()},
    )


def carriers(before: Counted, after: Counted) -> Carriers:
    """Per caller: the callee whose edge share grew most and the one that shrank most, ties to
    the smaller name."""
    out: Carriers = {}
    get_before, get_after = before.edges.get, after.edges.get
    for key in before.edges.keys() | after.edges.keys():
        caller, callee = key
        moved = get_after(key, 0.0) - get_before(key, 0.0)
        up, up_to, down, down_to = out.get(caller, (0.0, "", 0.0, ""))
        if moved > up or (moved == up and up_to and callee < up_to):
            up, up_to = moved, callee
        if moved < down or (moved == down and down_to and callee < down_to):
            down, down_to = moved, callee
        out[caller] = (up, up_to, down, down_to)
    return out
