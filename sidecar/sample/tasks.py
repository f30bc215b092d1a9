"""The asyncio tasks of a live process: one snapshot read by the native task scan, and the
tree ``sidecar tasks`` prints (each task with its name, state and await chain; a task that
another awaits under it).
"""

from __future__ import annotations

from sidecar import _native
from sidecar.errors import native_errors
from sidecar.rules.tasks import STATES

#: Scans a snapshot takes at most to find one where no task changed as it was read.
SNAPSHOT_TRIES = 3


def snapshot(pid: int) -> _native.TaskScan:
    """The tasks of ``pid`` (CPython 3.11+) as one scan read them; native errors become domain
    errors. A task that runs while it is read may tear (it is left out and counted): the scan
    is taken again, up to ``SNAPSHOT_TRIES`` times, and the one that lost fewest is kept."""
    with native_errors(pid):
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


def request_line(request: _native.RequestRow) -> str:
    """What a request's task serves, in one line: method and path, the route the framework
    matched, the trace id and how long it has been in flight."""
    parts = [f"{request['method']} {request['path']}"]
    route = request["route"]
    handler = f" ({request['handler']})" if request["handler"] else ""
    parts.append(f"route {route}{handler}" if route is not None else f"no route yet{handler}")
    if request["trace"] is not None:
        parts.append(f"trace {request['trace']} ({request['trace_header']})")
    if request["age_s"] is not None:
        parts.append(f"{max(request['age_s'], 0.0):.3f} s in flight")
    elif request["framework"] == "aiohttp":
        parts.append("start not kept (aiohttp keeps it for its access log only)")
    return "request: " + " · ".join(parts)


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
        if task["request"] is not None:
            lines.append(f"{inner}    {request_line(task['request'])}")
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
    states = " · ".join(f"{state} {counts[state]:,}" for state in STATES)
    line = f"PID {pid} · Python {scan['python_version']} · {len(scan['tasks']):,} tasks: {states}"
    if requests := sum(task["request"] is not None for task in scan["tasks"]):
        line += f" · {requests:,} request{'s' * (requests != 1)} in flight"
    if scan["torn"]:
        line += f" · {scan['torn']:,} changed as they were read, left out"
    if torn := scan["requests_torn"]:
        line += f" · {torn:,} request{'s' * (torn != 1)} changed as they were read, not shown"
    if scan["unread"]:
        line += f" · {scan['unread']:,} more not read (the scan's bound)"
    return line
