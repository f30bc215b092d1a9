"""The rules of task stacks: their state leaves and the roots that make a task a request's."""

from __future__ import annotations

from sidecar import _native

STATES = ("running", "ready", "waiting")

#: The leaves of task stacks, one per state.
TASK_LEAVES = tuple(f"[{state}]" for state in STATES)

#: The root coroutines of request tasks, as frames begin (``function (file:``), by framework:
#: aiohttp runs each request's handler in a task of ``RequestHandler._handle_request`` (awaited
#: by the connection's ``RequestHandler.start`` task, whose chain comes first in a folded
#: stack), Tornado each request in a task of ``RequestHandler._execute``. Every other task is
#: background. Defined in the native core (which reads each such task's request);
#: ``GET /api/rules`` serves this table to the UI.
REQUEST_FRAMEWORKS: dict[str, str] = {root: framework for framework, root in _native.REQUEST_ROOTS}
REQUEST_ROOTS = tuple(REQUEST_FRAMEWORKS)


def is_request(stack: str) -> bool:
    """The folded task stack is a request's: one of its frames is a request task's root."""
    return any(frame.startswith(root) for frame in stack.split(";") for root in REQUEST_ROOTS)


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
