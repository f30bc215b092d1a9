"""The rules of task stacks: their state leaves and the roots that make a task a request's."""

from __future__ import annotations

import re

from sidecar import _native
from sidecar.rules.frames import parse_frame
from sidecar.rules.layers import layer_of_file

STATES = ("running", "ready", "waiting")

#: The leaves of task stacks, one per state.
TASK_LEAVES = tuple(f"[{state}]" for state in STATES)

#: The root coroutines of request tasks, as frames begin (``function (file:``), by framework:
#: aiohttp runs each request's handler in a task of ``RequestHandler._handle_request`` (awaited
#: by the connection's ``RequestHandler.start`` task, whose chain comes first in a folded
#: stack), Tornado each request in a task of ``RequestHandler._execute``. Every other task is
#: background. Defined in the native core (which reads each such task's request);
#: ``GET /api/rules`` serves this table to the UI.
REQUEST_ROOTS = tuple(root for _framework, root in _native.REQUEST_ROOTS)

#: The route of a request no route matched (yet), in its route frame.
NO_ROUTE: str = _native.NO_ROUTE

#: The first frame of a request's task stacks, which the native scan writes: ``[METHOD ROUTE]``,
#: the route the framework matched (``/users/{id}``, Tornado's rule pattern) or ``NO_ROUTE``.
ROUTE_FRAME = re.compile(r"^\[(?P<method>[A-Za-z0-9_-]+) (?P<route>.+)\]$")


def await_site(body: str) -> tuple[str, str]:
    """(where in the service's code a task waits, the frame just above its leaf) of a task
    stack without its leaf: the innermost frame of the application or the framework, not of
    the event loop or the standard library."""
    frames = body.split(";")
    awaits = frames[-1]
    for text in reversed(frames):
        frame = parse_frame(text)
        if frame.is_code and layer_of_file(frame.file) in ("application", "framework"):
            return text, awaits
    return awaits, awaits


def is_request(stack: str) -> bool:
    """The folded task stack is a request's: one of its frames is a request task's root."""
    return any(frame.startswith(root) for frame in stack.split(";") for root in REQUEST_ROOTS)


def route_of(stack: str) -> str | None:
    """``METHOD ROUTE`` of a request's task stack from its route frame (its first); None for a
    stack without one (a background task's, a request read torn, or a profile written before
    requests were read)."""
    found = ROUTE_FRAME.match(stack.partition(";")[0])
    return f"{found['method']} {found['route']}" if found else None


def task_leaf(state: str) -> str:
    """The leaf of a task stack in ``state`` (``running`` → ``[running]``)."""
    return f"[{state}]"


def task_kind(stack: str) -> str:
    """``request`` or ``background``, as ``is_request`` tells."""
    return "request" if is_request(stack) else "background"


def split_leaf(stack: str) -> tuple[str, str]:
    """(the stack without its leaf, the state its leaf names); a stack without a state's leaf
    is a ``ValueError``."""
    body, _, leaf = stack.rpartition(";")
    if leaf not in TASK_LEAVES or not body:
        raise ValueError(f"not a task stack (no [running], [ready] or [waiting] leaf): {stack}")
    return body, leaf[1:-1]
