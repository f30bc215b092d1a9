"""The rules the web UI needs to read stacks as the analysis does, in one document.

Each rule is defined once in the analysis: the synthetic leaves of off-CPU samples
(``sidecar.profile``), the frame grammar ``function (file:line)`` (``parse_frame``), and the
layer a frame's file belongs to (``sidecar.analyze.module_of`` / ``layer_of_file``: the
framework's modules, the event loop's, the standard library's, anything else the
application); the leaves of task stacks and the roots that tell a request's task from a
background one (``sidecar.tasks``). ``GET /api/rules`` serves this document, and the UI reads
frames by it instead of keeping copies of the tables.
"""

from __future__ import annotations

from typing import Any

from sidecar.analyze import FRAMEWORK_MODULES, LIBDIR_PREFIX, LOOP_MODULES, SITE_PREFIX, STDLIB
from sidecar.profile import _FRAME as FRAME_PATTERN  # parse_frame's pattern
from sidecar.profile import BLOCKED_LEAF, IDLE_LEAF
from sidecar.tasks import REQUEST_ROOTS, TASK_LEAVES


def _javascript(pattern: str) -> str:
    """A Python regular expression in JavaScript's syntax (named groups are ``(?<name>``)."""
    return pattern.replace("(?P<", "(?<")


def document() -> dict[str, Any]:
    """The leaves, the frame grammar and the layer tables, as ``GET /api/rules`` serves them."""
    return {
        "leaves": {"idle": IDLE_LEAF, "blocked": BLOCKED_LEAF},
        "tasks": {"leaves": list(TASK_LEAVES), "request_roots": list(REQUEST_ROOTS)},
        "frame": _javascript(FRAME_PATTERN.pattern),
        "module": {
            "site": _javascript(SITE_PREFIX.pattern),
            "libdir": _javascript(LIBDIR_PREFIX.pattern),
        },
        "layers": {
            "framework": sorted(FRAMEWORK_MODULES),
            "event_loop": sorted(LOOP_MODULES),
            "stdlib": sorted(STDLIB),
        },
    }
