"""The stats document: what ``sidecar stats --json`` prints and ``GET /api/stats`` serves, made
here for both (the shape docs/http-api.md documents under ``GET /api/stats``).

Per target: its event loop's shares (busy, idle, blocked, gil: the four sum to 1), who held the
GIL while it waited, the collector's share, stack depth, and what only sampling over time knows:
its asyncio tasks (None where they were not scanned) and its stalls (None where their time order
is not known: a profile file); per framework: the shares of its processes that serve requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.analyze.threads import Analysis, by_framework
from sidecar.rules.frames import STATES


@dataclass(frozen=True)
class TargetStats:
    """One target's part of the document."""

    analysis: Analysis
    #: the tasks block (``analyze.tasks.task_block``), None where no scan was made
    tasks: dict[str, Any] | None = None
    #: its stalls as ``Stall.to_json`` gives them, None where their time order is unknown
    stalls: list[dict[str, Any]] | None = None
    #: what the kernel counted over a live sampling (``Recording.kernel_json``), None else
    kernel: dict[str, Any] | None = None


def stats_document(targets: Sequence[TargetStats | Analysis]) -> dict[str, Any]:
    """The document of these targets (an analysis alone: no tasks nor stalls known)."""
    parts = [t if isinstance(t, TargetStats) else TargetStats(t) for t in targets]
    return {
        "targets": [
            {
                "pid": one.analysis.pid,
                "role": one.analysis.role,
                "framework": one.analysis.framework,
                "loop": one.analysis.loop,
                **_shares(one.analysis),
                "tasks": one.tasks,
                "stalls": one.stalls,
                "kernel": one.kernel,
            }
            for one in parts
        ],
        "frameworks": {
            name: _shares(merged)
            for name, merged in by_framework([one.analysis for one in parts]).items()
        },
    }


def _shares(analysis: Analysis) -> dict[str, Any]:
    return {
        "samples": analysis.samples,
        **{f"{state}_share": round(analysis.share(state), 4) for state in STATES},
        "gil_holders": [
            {"thread": thread, "site": site, "share": round(share, 4)}
            for thread, site, _, share in analysis.top_holders()
        ],
        "gc_share": round(analysis.gc_share, 4),
        "depth": analysis.depth.to_json(),
    }
