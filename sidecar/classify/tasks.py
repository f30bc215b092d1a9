"""Task stacks sorted as the store keeps them: by state and by kind (request or background)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sidecar.rules.tasks import STATES, is_request, split_leaf, task_kind


def task_rows(stacks: list[tuple[str, int]], strict: bool = False) -> list[tuple[str, str, int]]:
    """A window's task stacks as the store keeps them: (stack without its leaf, state,
    task-samples); a stack without a state's leaf (never from the native scan) is left out,
    or with ``strict`` a ``ValueError``."""
    rows: list[tuple[str, str, int]] = []
    for stack, count in stacks:
        try:
            body, state = split_leaf(stack)
        except ValueError:
            if strict:
                raise
            continue
        rows.append((body, state, count))
    return rows


def in_flight(rows: list[tuple[str, str, int]], scans: int) -> dict[tuple[str, str], float]:
    """Tasks in flight of a window's task rows (``task_rows``) over its scans, per (state,
    ``request`` or ``background``)."""
    out = {(state, kind): 0.0 for state in STATES for kind in ("request", "background")}
    for stack, state, count in rows:
        out[(state, task_kind(stack))] += count / scans
    return out


@dataclass(frozen=True)
class InFlight:
    """Tasks in flight over a range: pooled means ((task-samples + unread) / scans) of all,
    per state and of requests' tasks, the highest mean of one window, and the mean of the
    tasks past the scans' bound, not read (in ``mean`` and ``max``, in no state)."""

    scans: int
    mean: float
    max: float
    states: dict[str, float]
    requests: float
    unread: float = 0.0

    @property
    def background(self) -> float:
        return max(0.0, self.mean - self.unread - self.requests)

    @property
    def sampled(self) -> float:
        """The share of the tasks in flight that the scans read (1 when they read all)."""
        return (self.mean - self.unread) / self.mean if self.mean > 0 else 1.0

    @classmethod
    def of(cls, stacks: Mapping[str, int], scans: int, peak: float, unread: int = 0) -> InFlight:
        """Pooled over ``scans`` scans of these task stacks (a recording's), which found
        ``unread`` tasks past their bound in all."""
        return cls.of_rows(task_rows(list(stacks.items()), strict=True), scans, peak, unread)

    @classmethod
    def of_rows(
        cls, rows: Iterable[tuple[str, str, int]], scans: int, peak: float, unread: int = 0
    ) -> InFlight:
        """Pooled over ``scans`` scans of these task rows (``task_rows``), which found
        ``unread`` tasks past their bound in all."""
        states = dict.fromkeys(STATES, 0.0)
        requests = 0
        for body, state, count in rows:
            states[state] += count
            requests += count if is_request(body) else 0
        per = 1 / scans if scans else 0.0
        means = {state: total * per for state, total in states.items()}
        rest = unread * per
        return cls(scans, sum(means.values()) + rest, peak, means, requests * per, rest)
