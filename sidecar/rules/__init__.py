"""The rules every stage reads stacks by, each defined once, and the document of them that
``GET /api/rules`` serves so that the web UI reads frames as the analysis does.

- ``frames``: the frame grammar ``function (file:line)``, the synthetic leaves of off-CPU
  samples (``[idle]``, ``[blocked]``) and the states they mark;
- ``loops``: the frames that enter an event loop and the frames of its idle wait;
- ``layers``: the layer a frame's file belongs to (the framework's modules, the event loop's,
  the standard library's, anything else the application's);
- ``processes``: the frames that tell a process's server framework, an asyncio loop from
  uvloop, a pre-fork master and a process pool's child;
- ``tasks``: the leaves of task stacks and the roots that tell a request's task from a
  background one.

The native core writes the same leaves; a test holds the two to the same text.
"""

from __future__ import annotations

from typing import Any

from sidecar.rules.frames import FRAME as FRAME_PATTERN
from sidecar.rules.frames import GC_FRAME, LEAVES
from sidecar.rules.layers import FRAMEWORK_MODULES, LIBDIR_PREFIX, LOOP_MODULES, SITE_PREFIX, STDLIB
from sidecar.rules.tasks import REQUEST_ROOTS, TASK_LEAVES


def _javascript(pattern: str) -> str:
    """A Python regular expression in JavaScript's syntax (named groups are ``(?<name>``)."""
    return pattern.replace("(?P<", "(?<")


def document() -> dict[str, Any]:
    """The leaves, the frame grammar and the layer tables, as ``GET /api/rules`` serves them."""
    return {
        "leaves": dict(LEAVES),
        "gc_frame": GC_FRAME,
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
