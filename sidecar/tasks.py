"""The asyncio tasks of a live process: one snapshot read by the native task scan, and the
tree ``sidecar tasks`` prints (each task with its name, state and await chain; a task that
another awaits under it).
"""

from __future__ import annotations

from sidecar import _native
from sidecar.errors import native_errors

STATES = ("running", "ready", "waiting")
#: The leaves of task stacks, one per state.
TASK_LEAVES = tuple(f"[{state}]" for state in STATES)
#: The root coroutines of request tasks, as frames begin (``function (file:``): aiohttp runs
#: each request's handler in a task of ``RequestHandler._handle_request`` (awaited by the
#: connection's ``RequestHandler.start`` task, whose chain comes first in a folded stack),
#: Tornado each request in a task of ``RequestHandler._execute``. Every other task is
#: background. ``GET /api/rules`` serves this table to the UI.
REQUEST_ROOTS = (
    "RequestHandler._handle_request (aiohttp/web_protocol.py:",
    "RequestHandler._execute (tornado/web.py:",
)


def is_request(stack: str) -> bool:
    """The folded task stack is a request's: one of its frames is a request task's root."""
    return any(frame.startswith(root) for frame in stack.split(";") for root in REQUEST_ROOTS)


def task_leaf(state: str) -> str:
    """The leaf of a task stack in ``state`` (``running`` → ``[running]``)."""
    return f"[{state}]"


def task_kind(stack: str) -> str:
    """``request`` or ``background``, as ``is_request`` tells."""
    return "request" if is_request(stack) else "background"


def task_rows(stacks: list[tuple[str, int]]) -> list[tuple[str, str, int]]:
    """A window's task stacks as the store keeps them: (stack without its leaf, state,
    task-samples); a stack without a state's leaf (never from the native scan) is left out."""
    rows: list[tuple[str, str, int]] = []
    for stack, count in stacks:
        try:
            body, state = split_leaf(stack)
        except ValueError:
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


def split_leaf(stack: str) -> tuple[str, str]:
    """(the stack without its leaf, the state its leaf names); a stack without a state's leaf
    is a ``ValueError``."""
    body, _, leaf = stack.rpartition(";")
    if leaf not in TASK_LEAVES or not body:
        raise ValueError(f"not a task stack (no [running], [ready] or [waiting] leaf): {stack}")
    return body, leaf[1:-1]


#: Scans a snapshot takes at most to find one where no task changed as it was read.
SNAPSHOT_TRIES = 3


def snapshot(pid: int) -> _native.TaskScan:
    """The tasks of ``pid`` (CPython 3.11+) as one scan read them; native errors become domain
    errors. A task that runs while it is read may tear (it is left out and counted): the scan
    is taken again, up to ``SNAPSHOT_TRIES`` times, and the one that lost fewest is kept."""
    with native_errors():
        best = _native.scan_tasks(pid)
        for _ in range(SNAPSHOT_TRIES - 1):
            if not best["torn"]:
                break
            again = _native.scan_tasks(pid)
            if again["torn"] < best["torn"]:
                best = again
        return best


def _header(task: _native.TaskRow, by_id: dict[int, _native.TaskRow]) -> str:
    text = f"{task['name']!r} [{task['state']}]"
    awaited = by_id.get(task["awaits"]) if task["awaits"] is not None else None
    if awaited is not None:
        return f"{text} awaits task {awaited['name']!r}"
    if task["future"] is not None:
        return f"{text} awaits a {task['future']}"
    return text


def _order(task: _native.TaskRow) -> tuple[str, int]:
    return task["name"], task["id"]


def tree_lines(scan: _native.TaskScan) -> list[str]:
    """The scan as a tree: a task, its await chain (outermost coroutine first) indented under
    it, and under that chain the tasks it awaits (the task it awaits, the tasks of its
    ``gather`` or its ``TaskGroup``); tasks that no task of the scan awaits are the roots."""
    tasks = scan["tasks"]
    by_id = {task["id"]: task for task in tasks}
    children: dict[int, list[_native.TaskRow]] = {}
    for task in sorted(tasks, key=_order):
        parent = task["awaited_by"]
        if parent is not None and parent in by_id and parent != task["id"]:
            children.setdefault(parent, []).append(task)
    shown: set[int] = set()
    lines: list[str] = []

    def show(task: _native.TaskRow, indent: str, branch: str, last: bool) -> None:
        shown.add(task["id"])
        lines.append(f"{indent}{branch}{_header(task, by_id)}")
        inner = indent + ("│  " if branch and not last else " " * len(branch))
        for frame in task["frames"]:
            lines.append(f"{inner}    {frame}")
        # a child already shown closes a loop of tasks awaiting each other (a torn scan)
        mine = [child for child in children.get(task["id"], []) if child["id"] not in shown]
        for i, child in enumerate(mine):
            final = i == len(mine) - 1
            show(child, inner + "    ", "└─ " if final else "├─ ", final)

    for task in sorted(tasks, key=_order):
        parent = task["awaited_by"]
        if parent is None or parent not in by_id or parent == task["id"]:
            show(task, "", "", True)
    # tasks that await each other in a loop (a scan torn between them) have no root
    for task in sorted(tasks, key=_order):
        if task["id"] not in shown:
            show(task, "", "", True)
    return lines


def summary_line(pid: int, scan: _native.TaskScan) -> str:
    counts = {state: 0 for state in STATES}
    for task in scan["tasks"]:
        counts[task["state"]] += 1
    states = " · ".join(f"{state} {counts[state]}" for state in STATES)
    line = f"PID {pid} · Python {scan['python_version']} · {len(scan['tasks'])} tasks: {states}"
    if scan["torn"]:
        line += f" · {scan['torn']} changed as they were read, left out"
    if scan["unread"]:
        line += f" · {scan['unread']} more not read (the scan's bound)"
    return line
