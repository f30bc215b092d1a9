"""What ``stats`` reports about one target, or a framework's merged targets: ``Analysis``
(states, depths, layers, functions, blocking sites, GIL holders), its depth percentiles and its
ranked rows. ``analyze.threads`` fills it in from a profile."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.classify.threads import holder_group
from sidecar.rules.frames import STATES, Frame
from sidecar.rules.layers import LAYERS


def function_of(frame: Frame) -> str:
    """A function without its line: ``name (file)``."""
    return f"{frame.name} ({frame.file})" if frame.file else frame.name


@dataclass(frozen=True)
class Depth:
    """Python frames per busy loop sample; all None without busy samples."""

    mean: float | None = None
    p50: int | None = None
    p95: int | None = None
    max: int | None = None

    @classmethod
    def from_histogram(cls, histogram: Mapping[int, int]) -> Depth:
        total = sum(histogram.values())
        if not total:
            return cls()
        mean = sum(depth * count for depth, count in histogram.items()) / total
        return cls(
            mean=round(mean, 2),
            p50=_percentile(histogram, total, 50),
            p95=_percentile(histogram, total, 95),
            max=max(depth for depth, count in histogram.items() if count),
        )

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "p50": self.p50, "p95": self.p95, "max": self.max}


def _percentile(histogram: Mapping[int, int], total: int, pct: float) -> int:
    """Nearest-rank percentile of a histogram of integers."""
    rank = max(1, math.ceil(pct / 100 * total))
    seen = 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return value
    return max(histogram)


@dataclass(frozen=True)
class Ranked:
    """A function or call site with its samples and share."""

    name: str
    samples: int
    share: float


@dataclass
class Analysis:
    """Everything ``stats`` reports about one target (or one framework, merged)."""

    pid: int | None = None
    framework: str = "unknown"
    loop: str = "unknown"
    #: ``master`` / ``worker`` in a pre-fork server, None alone (from discovery).
    role: str | None = None
    #: samples of the event-loop thread(s) per state (``STATES``).
    states: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATES, 0))
    #: depth -> busy loop samples with that many Python frames.
    depth_histogram: dict[int, int] = field(default_factory=dict)
    #: the same, counting only the frames above the one that entered the event loop.
    loop_depth_histogram: dict[int, int] = field(default_factory=dict)
    #: busy loop samples per layer (see LAYERS).
    layers: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LAYERS, 0))
    #: busy loop samples per function, as the innermost frame (self) and anywhere (total).
    self_samples: Counter[str] = field(default_factory=Counter)
    total_samples: Counter[str] = field(default_factory=Counter)
    #: blocked loop samples per call site (the frame below the ``[blocked]`` leaf).
    site_samples: Counter[str] = field(default_factory=Counter)
    #: gil loop samples per (name of the thread that held the GIL, where it was); only what
    #: the sampler saw live (a profile file does not keep it).
    gil_holders: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: busy loop samples taken while the thread collected garbage (a ``[gc]`` frame on top).
    gc_samples: int = 0
    #: True when the states come from frames alone (no [idle]/[blocked] leaves).
    estimated: bool = False
    #: the states the profile tells; the others' samples are ``untold``, with no share.
    told: tuple[str, ...] = STATES
    #: samples whose state the profile does not tell: of a state it does not tell, or in frames
    #: too narrow to draw (``pruned``, of them).
    untold: int = 0
    pruned: int = 0
    #: the samples the depth and the top functions are of: busy ones, or those of an
    #: estimated profile outside the loop's poll.
    ranked: int = 0
    #: True when no thread entered an event loop: the shares are those of all threads.
    no_loop_thread: bool = False

    @property
    def samples(self) -> int:
        return sum(self.states.values()) + self.untold

    def is_told(self, state: str) -> bool:
        """Whether the profile tells this state (a share of 0.0 otherwise means nothing)."""
        return state in self.told

    @property
    def untold_share(self) -> float:
        return self.untold / self.samples if self.samples else 0.0

    @property
    def serves(self) -> bool:
        """Whether its loop serves requests, so that it counts in its framework's shares:
        not a pre-fork master, and some thread runs an event loop."""
        return self.role != "master" and not self.no_loop_thread

    @property
    def covers(self) -> str:
        """Which threads the shares are of, as every command says it."""
        return "all threads (no event loop seen)" if self.no_loop_thread else "event loop"

    def share(self, state: str) -> float:
        total = self.samples
        return self.states[state] / total if total else 0.0

    @property
    def depth(self) -> Depth:
        return Depth.from_histogram(self.depth_histogram)

    @property
    def loop_depth(self) -> Depth:
        """Depth above the frame that entered the loop: what the framework and the handlers
        stack per callback, without the process's start-up chain (runpy, main, run_app)."""
        return Depth.from_histogram(self.loop_depth_histogram)

    def layer_share(self, layer: str) -> float:
        total = sum(self.layers.values())
        return self.layers[layer] / total if total else 0.0

    def top_self(self, n: int = 10) -> list[Ranked]:
        """Functions by self time, as shares of busy loop samples."""
        return _ranked(self.self_samples, self.ranked, n)

    def top_total(self, n: int = 10) -> list[Ranked]:
        """Functions by total (inclusive) time, as shares of busy loop samples; frames up to
        the one that entered the loop are left out (they are in every sample)."""
        return _ranked(self.total_samples, self.ranked, n)

    def blocking_sites(self, n: int = 10) -> list[Ranked]:
        """Call sites the loop was blocked in, as shares of blocked loop samples."""
        return _ranked(self.site_samples, self.states["blocked"], n)

    def top_holders(self, n: int = 10) -> list[tuple[str, str, int, float]]:
        """Who held the GIL while the loop waited: (thread name, the threads of a pool as one,
        ``PREFIX_*``; site; samples; share of the loop's gil samples whose holder the sampler
        saw), most first."""
        grouped: Counter[tuple[str, str]] = Counter()
        for (thread, site), count in self.gil_holders.items():
            grouped[holder_group(thread), site] += count
        whole = sum(grouped.values())
        ordered = sorted(grouped.items(), key=lambda item: (-item[1], item[0]))[:n]
        return [(thread, site, count, count / whole) for (thread, site), count in ordered]

    @property
    def gc_share(self) -> float:
        """Loop samples taken while the loop's thread collected garbage, of all loop samples."""
        return self.gc_samples / self.samples if self.samples else 0.0


def _ranked(counts: Counter[str], whole: int, top: int) -> list[Ranked]:
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]
    return [Ranked(name, count, count / whole if whole else 0.0) for name, count in ordered]
