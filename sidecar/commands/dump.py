"""``sidecar dump``: every Python thread of a running process, once: its state, whether it
holds the GIL, its stack (innermost frame first, as py-spy prints it), with ``--locals`` each
frame's local variables, with ``--tasks`` the asyncio task tree after the threads (what
``sidecar tasks`` prints: one implementation), with ``--subprocesses`` each process of a
pre-fork group in turn, and with ``--json`` all of it as one document.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from sidecar.commands.habits import add_answers
from sidecar.commands.options import add_blocking, check_blocking
from sidecar.commands.signals import terminate_as_interrupt
from sidecar.defaults import LOCALS_CHARS as DEFAULT_LOCALS_CHARS
from sidecar.errors import SidecarError, TargetError, UsageError

if TYPE_CHECKING:
    from sidecar import _native
    from sidecar.sample.dump import ProcessDump, ThreadDump

HELP = "print every Python thread of a running process once: its state, the GIL, its stack"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "dump",
        help=HELP,
        description=HELP + " (innermost frame first), read from its memory. The target runs "
        "on (--nonblocking, the default): each thread is read again after the dump, and a "
        "thread whose stack changed meanwhile is said to have run on; --blocking stops the "
        "threads for the read (about a millisecond, more with --locals on deep stacks) and "
        "lets them go. Nothing runs "
        "in the target: --locals shows what each frame's variables hold without calling repr.",
    )
    parser.add_argument("-p", "--pid", type=int, required=True, help="process to read")
    parser.add_argument(
        "-l",
        "--locals",
        action="store_true",
        help="each frame's local variables: None, bool, int, float, str and bytes by value, "
        "containers by type and length, other objects by type and address",
    )
    parser.add_argument(
        "--locals-chars",
        type=int,
        default=DEFAULT_LOCALS_CHARS,
        metavar="N",
        help=f"characters of a str or bytes value shown before it is cut (default "
        f"{DEFAULT_LOCALS_CHARS})",
    )
    parser.add_argument(
        "--tasks",
        action="store_true",
        help="the asyncio task tree after the threads (CPython 3.11+), as `sidecar tasks`",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    add_blocking(parser, "stop the target's threads for the read (consistent stacks and locals)")
    parser.add_argument(
        "-s",
        "--subprocesses",
        action="store_true",
        help="each process of PID's pre-fork group (a gunicorn master and its workers), in turn",
    )
    add_answers(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sidecar.discover import prefork_group
    from sidecar.sample.dump import read_dump

    check_blocking(args)
    if args.locals_chars < 1:
        raise UsageError(f"--locals-chars must be 1 or more, not {args.locals_chars}")
    pids = prefork_group(args.pid) if args.subprocesses else [args.pid]
    documents: list[dict[str, Any]] = []
    with terminate_as_interrupt():
        for n, pid in enumerate(pids):
            try:
                dump = read_dump(
                    pid,
                    blocking=args.blocking,
                    locals_chars=args.locals_chars if args.locals else None,
                )
            except SidecarError as err:
                if pid == args.pid:
                    raise
                # a worker of the group that exited or cannot be read: said, and the next one
                print(f"sidecar: PID {pid} of the group not read: {err}", file=sys.stderr)
                continue
            tasks = _tasks(pid) if args.tasks else None
            if args.json:
                documents.append(document(dump, tasks))
                continue
            if n:
                print()
            for line in text_lines(dump, show_locals=args.locals):
                print(line)
            if tasks is not None:
                print()
                print(*_task_lines(pid, tasks), sep="\n")
    if args.json:
        import json  # for --json only

        print(json.dumps(documents if args.subprocesses else documents[0], indent=2))
    return 0


def _tasks(pid: int) -> _native.TaskScan | str:
    """The task scan of ``pid``, or why it could not be read (an older Python, no asyncio)."""
    from sidecar.sample.tasks import snapshot

    try:
        return snapshot(pid)
    except TargetError as err:
        return str(err)


def _task_lines(pid: int, tasks: _native.TaskScan | str) -> list[str]:
    from sidecar.sample.tasks import summary_line, tree_lines

    if isinstance(tasks, str):
        return [f"asyncio tasks: not read: {tasks}"]
    return [f"asyncio tasks of {summary_line(pid, tasks)}", *tree_lines(tasks)]


def thread_header(thread: ThreadDump) -> str:
    name = f' "{thread.name}"' if thread.name else ""
    parts = [f"Thread {thread.tid}{name}", thread.state]
    if thread.holds_gil:
        parts.append("holds the GIL")
    if thread.gc:
        parts.append("collecting garbage")
    if thread.moving:
        parts.append("ran on as it was read: its frames are one read of it")
    return " · ".join(parts)


def text_lines(dump: ProcessDump, *, show_locals: bool) -> list[str]:
    """The dump as py-spy prints one: a header (the process and its command line, its Python,
    how it was read), then each thread and its frames, the main thread first."""
    how = (
        f"threads stopped {dump.pause * 1000:.1f} ms for the read"
        if dump.pause is not None
        else "target not stopped"
    )
    lines = [
        f"Process {dump.pid}: {dump.cmdline}" if dump.cmdline else f"Process {dump.pid}",
        f"Python {dump.python_version} · {how}",
        f"read by {dump.reader}",
    ]
    for thread in dump.threads:
        lines += ["", thread_header(thread)]
        if not thread.frames:
            lines.append("    (no Python frames)")
        for frame in thread.frames:
            lines.append(f"    {frame.where}")
            if not show_locals:
                continue
            if frame.locals_error is not None:
                lines.append(f"        (locals not read: {frame.locals_error})")
            for name, value in frame.locals or ():
                lines.append(f"        {name} = {value}")
    return lines


def document(dump: ProcessDump, tasks: _native.TaskScan | str | None) -> dict[str, Any]:
    """The dump as JSON: ``{pid, cmdline, python_version, reader, reads, pause_s, threads,
    tasks?}``; a frame is ``{function, file, line}`` in a thread's frames and a task's alike."""
    doc: dict[str, Any] = {
        "pid": dump.pid,
        "cmdline": dump.cmdline,
        "python_version": dump.python_version,
        "reader": dump.reader,
        "reads": dump.reads,
        "pause_s": dump.pause,
        "threads": [_thread_document(thread) for thread in dump.threads],
    }
    if isinstance(tasks, str):
        doc["tasks"], doc["tasks_error"] = None, tasks
    elif tasks is not None:
        doc["tasks"] = [_task_document(task) for task in tasks["tasks"]]
    return doc


def _task_document(task: _native.TaskRow) -> dict[str, Any]:
    """A task's row of the scan, its await chain's frames objects as a thread's are (the
    outermost coroutine first, as ``sidecar tasks`` prints them)."""
    from sidecar.rules.frames import parse_frame

    frames = []
    for text in task["frames"]:
        frame = parse_frame(text)
        frames.append({"function": frame.name, "file": frame.file, "line": frame.line})
    return {**task, "frames": frames}


def _thread_document(thread: ThreadDump) -> dict[str, Any]:
    frames: list[dict[str, Any]] = []
    for frame in thread.frames:
        row: dict[str, Any] = {"function": frame.function, "file": frame.file, "line": frame.line}
        if frame.locals is not None:
            row["locals"] = dict(frame.locals)
        if frame.locals_error is not None:
            row["locals_error"] = frame.locals_error
        frames.append(row)
    return {
        "name": thread.name,
        "tid": thread.tid,
        "state": thread.state,
        "holds_gil": thread.holds_gil,
        "gc": thread.gc,
        "moving": thread.moving,
        "frames": frames,
    }
