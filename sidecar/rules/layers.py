"""The layers a frame's file belongs to: the framework, the event loop, the application.

Standard-library frames belong to whoever called them; generated code (``<...>``) counts with
the standard library.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from functools import lru_cache

from sidecar.rules.frames import Frame

LAYERS = ("framework", "event_loop", "application", "other")

#: Top-level modules per layer. Anything else that is not standard library is the application.
FRAMEWORK_MODULES = frozenset(
    {
        "aiohttp",
        "tornado",
        "multidict",
        "yarl",
        "aiosignal",
        "frozenlist",
        "propcache",
        "aiohappyeyeballs",
    }
)


LOOP_MODULES = frozenset({"asyncio", "uvloop", "selectors", "_asyncio"})

#: The standard library's top-level modules (generated code, ``<...>``, counts with them).
STDLIB = frozenset(sys.stdlib_module_names)

#: What comes before a module's path: an installation's site or dist packages, or the
#: standard library's directory.
SITE_PREFIX = re.compile(r".*/(?:site|dist)-packages/")

LIBDIR_PREFIX = re.compile(r".*/lib/python\d\.\d+/")


@lru_cache(maxsize=16384)
def module_of(file: str) -> str:
    """The top-level module of a frame's file: ``asyncio/base_events.py`` -> ``asyncio``."""
    path = file.replace("\\", "/")
    path = SITE_PREFIX.sub("", path, count=1)
    path = LIBDIR_PREFIX.sub("", path, count=1)
    if path.startswith("<"):
        return path
    head = path.lstrip("/").split("/", 1)[0]
    return head.removesuffix(".py")


@lru_cache(maxsize=16384)
def layer_of_file(file: str) -> str | None:
    """framework, event_loop or application; None for standard library and generated code."""
    module = module_of(file)
    if module in LOOP_MODULES:
        return "event_loop"
    if module in FRAMEWORK_MODULES:
        return "framework"
    if module.startswith("<") or module in STDLIB:
        return None
    return "application"


def layer_of(frames: Sequence[Frame]) -> str:
    """The layer a busy sample is spent in: that of the innermost frame that is not standard
    library (a stdlib call counts for its caller); ``other`` when all frames are stdlib."""
    for frame in reversed(frames):
        if frame.is_code:
            layer = layer_of_file(frame.file)
            if layer is not None:
                return layer
    return "other"
