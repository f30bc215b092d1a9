"""Which processes to sample (``Selection``, ``scan``) and what each is: framework, event
loop, Python version, command line and identity.

Everything here reads /proc only (no ptrace, no signals), each file through ``read_proc``, so it
is cheap and safe to call for every process a sidecar sees:

- **framework**: aiohttp, tornado or unknown. The frames of a profile tell which server runs
  (``aiohttp/web_protocol.py`` vs ``tornado/web.py``); without frames, the extension modules in
  /proc/PID/maps do (aiohttp's ``_http_parser``/``_websocket`` .so, tornado's ``speedups`` .so).
- **loop**: uvloop when its extension module is mapped, else asyncio. A profile whose loop runs
  through asyncio's ``_run_once`` says asyncio even when uvloop is merely imported.
- **identity**: PID plus start time (field 22 of /proc/PID/stat), so a reused PID is never
  taken for the process that had it before.
What frames say of a process (its framework, its loop, its role) is ``classify.process``'s.

- **role** in a pre-fork server (gunicorn's arbiter and its workers, Tornado's
  ``fork_processes``): a process forked from another without exec (same executable, same
  command line) is a ``worker``, the process it was forked from the ``master``; a lone process
  has none. A master's loop (gunicorn runs one for its control socket) serves no requests.
  multiprocessing forks the same way, so the frames of a profile settle it (``settle_role``):
  a master is one only where it waits for its workers as a pre-fork server does, and a process
  pool's child is no worker; the service that owns a pool is a lone process, not a master.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sidecar import _native
from sidecar.classify.process import (
    ProcessInfo,
    refine,
)
from sidecar.errors import TargetError, TargetGone, denied

#: Extension modules that give a framework away in /proc/PID/maps (path fragments).
_MAPS_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("aiohttp", re.compile(r"/aiohttp/(_http_parser|_http_writer|_websocket)[^/\s]*")),
    ("tornado", re.compile(r"/tornado/speedups[^/\s]*\.so")),
)
_UVLOOP_SO = re.compile(r"/uvloop/loop[^/\s]*\.so")
_VERSION_SO = re.compile(r"(?:libpython|/python)(\d)\.(\d+)|\.cpython-(\d)(\d+)-")


def read_proc(pid: int, name: str) -> str:
    """``/proc/PID/NAME`` as text. The one rule for reading /proc: a process that is gone
    raises TargetGone, a read not allowed raises PermissionDenied naming the fix, any other
    failure raises TargetError."""
    path = f"/proc/{pid}/{name}"
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError) as err:
        raise TargetGone(f"no process with PID {pid}") from err
    except PermissionError as err:
        raise denied(
            pid,
            f"cannot read {path}: run as the same user, as root or with "
            "CAP_SYS_PTRACE (in Kubernetes: shareProcessNamespace and SYS_PTRACE)",
        ) from err
    except OSError as err:
        raise TargetError(f"cannot read {path}: {err.strerror}") from err


def read_proc_or_empty(pid: int, name: str) -> str:
    """``read_proc``, empty when it cannot be read: for what a scan only looks at."""
    try:
        return read_proc(pid, name)
    except TargetError:
        return ""


def exe_path(pid: int) -> str:
    """The path of the program ``pid`` runs, empty when unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def exe_name(pid: int) -> str:
    """The file name of the program ``pid`` runs, empty when unreadable."""
    return os.path.basename(exe_path(pid))


def start_time(pid: int) -> int:
    """Field 22 of /proc/PID/stat (clock ticks after boot); raises TargetGone without it."""
    started = _native.process_start_time(pid)
    if started is None:
        raise TargetGone(f"no process with PID {pid}")
    return started


def read_cmdline(pid: int) -> str:
    """The command line, arguments joined by spaces; empty when unreadable."""
    return read_proc_or_empty(pid, "cmdline").rstrip("\0").replace("\0", " ")


def looks_like_python(pid: int) -> bool:
    """A Python interpreter by name (comm, argv[0], exe) or by a mapped libpython."""
    argv0 = read_proc_or_empty(pid, "cmdline").split("\0", 1)[0]
    names = [read_proc_or_empty(pid, "comm").strip(), os.path.basename(argv0), exe_name(pid)]
    if any(re.match(r"python(\d+(\.\d+)?)?$", name) for name in names):
        return True
    return "libpython" in read_proc_or_empty(pid, "maps")


def program(pid: int) -> tuple[str, int]:
    """What ``pid`` runs: its command line and the address of its code (field 26 of
    /proc/PID/stat; 0 when unreadable). exec changes them; PID and start time stay."""
    stat = read_proc_or_empty(pid, "stat")
    fields = stat[stat.rfind(")") + 2 :].split()
    code = int(fields[23]) if len(fields) > 23 and fields[23].isdigit() else 0
    return read_cmdline(pid), code


def framework_from_maps(maps: str) -> str:
    """aiohttp or tornado from their extension modules; tornado wins when both are mapped
    (a Tornado server that uses aiohttp's client is more common than the reverse)."""
    found = [name for name, pattern in _MAPS_MARKERS if pattern.search(maps)]
    if "tornado" in found:
        return "tornado"
    return found[0] if found else "unknown"


def loop_from_maps(maps: str) -> str:
    return "uvloop" if _UVLOOP_SO.search(maps) else "asyncio"


def python_version_from_maps(maps: str) -> str:
    """``3.11`` from libpython3.11.so, a python3.11 executable or a .cpython-311- module."""
    for match in _VERSION_SO.finditer(maps):
        major, minor = (match[1], match[2]) if match[1] else (match[3], match[4])
        return f"{major}.{minor}"
    return ""


def describe(pid: int, stacks: Mapping[str, int] | None = None) -> ProcessInfo:
    """The process ``pid``; frames of a profile of it (folded stacks), when given, refine the
    framework and loop. Raises TargetGone or PermissionDenied."""
    started = start_time(pid)
    maps = read_proc(pid, "maps")
    cmdline = read_cmdline(pid)
    if _native.process_start_time(pid) != started:
        raise TargetGone(f"PID {pid} exited while it was described")
    framework = framework_from_maps(maps)
    info = ProcessInfo(
        pid=pid,
        start_time=started,
        cmdline=cmdline,
        python_version=python_version_from_maps(maps) or _version_from_exe(pid),
        framework=framework,
        loop=loop_from_maps(maps),
        framework_source="maps" if framework != "unknown" else "",
        role=prefork_role(pid),
    )
    return refine(info, stacks) if stacks else info


def framework_and_loop(pid: int) -> tuple[str, str]:
    """(framework, loop) of ``pid`` from its maps alone: the cheap form a scanner calls."""
    info = describe(pid)
    return info.framework, info.loop


#: gunicorn with setproctitle installed titles its arbiter ``gunicorn: master [APP]`` and each
#: worker ``gunicorn: worker [APP]``: one program for the roles, told apart by the rest.
_GUNICORN_TITLE = re.compile(r"^gunicorn: (?:master|worker) (?=\[(.*)\]$)")


def group_of(cmdline: str) -> str:
    """What groups a process with the others of its program: its command line, a gunicorn
    title without its role word."""
    return _GUNICORN_TITLE.sub("gunicorn: ", cmdline)


def gunicorn_title(cmdline: str) -> str | None:
    """NAME of a gunicorn title ``gunicorn: master [NAME]`` (its ``--name``, else the app)."""
    match = _GUNICORN_TITLE.match(cmdline)
    return match[1] if match else None


def _program(pid: int) -> tuple[str, str] | None:
    """(executable, group of the command line) of ``pid``; None when gone or unreadable."""
    exe, cmdline = exe_path(pid), read_cmdline(pid)
    return (exe, group_of(cmdline)) if exe and cmdline else None


def _parent(pid: int) -> int:
    """The parent's PID (field 4 of /proc/PID/stat), 0 when unreadable."""
    stat = read_proc_or_empty(pid, "stat")
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (/proc/PID/task/TID/children)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        children = read_proc_or_empty(pid, f"task/{tid}/children").split()
        found += [int(child) for child in children if child.isdigit()]
    return found


def prefork_role(pid: int) -> str | None:
    """``worker`` when ``pid`` was forked without exec from its parent (same executable and
    command line), ``master`` when a child of it was, None otherwise or when unreadable. What
    /proc suggests: ``settle_role`` decides with the frames."""
    own = _program(pid)
    if own is None:
        return None
    parent = _parent(pid)
    if parent > 1 and _program(parent) == own:
        return "worker"
    if any(_program(child) == own for child in _children(pid)):
        return "master"
    return None


def prefork_group(pid: int) -> list[int]:
    """The processes of ``pid``'s pre-fork group, as ``prefork_role`` tells them apart: its
    master (``pid`` itself or the parent it was forked from without exec) first, then the
    master's children that run its program, by PID; ``[pid]`` for a lone process."""
    own = _program(pid)
    if own is None:
        return [pid]
    master = pid
    parent = _parent(pid)
    if parent > 1 and _program(parent) == own:
        master = parent
    workers = sorted(child for child in _children(master) if _program(child) == own)
    return [master, *workers] if workers else [pid]


def _version_from_exe(pid: int) -> str:
    match = re.match(r"python(\d)\.(\d+)", exe_name(pid))
    return f"{match[1]}.{match[2]}" if match else ""


@dataclass(frozen=True)
class Selection:
    """Which processes to sample."""

    pids: frozenset[int] = frozenset()
    match: re.Pattern[str] | None = None

    def wants(self, pid: int, cmdline: str) -> bool:
        if self.pids and pid not in self.pids:
            return False
        return self.match is None or self.match.search(cmdline) is not None


def scan(selection: Selection) -> list[int]:
    """PIDs of Python processes this sidecar should sample."""
    mine = os.getpid()  # never the sidecar itself
    found: list[int] = []
    # with --pid, only those are looked at, not every process in sight
    candidates = selection.pids or (int(e) for e in os.listdir("/proc") if e.isdigit())
    for pid in candidates:
        if pid == mine:
            continue
        cmdline = read_cmdline(pid)
        if not cmdline or not selection.wants(pid, cmdline):
            continue
        if looks_like_python(pid):
            found.append(pid)
    return sorted(found)
