"""``sidecar dump`` against real targets: the blocking handler and its locals while it blocks,
the thread that holds the GIL, the task tree, the JSON document, each CPython version's
locals, the pre-fork group, and one error line for a process it cannot read. The targets are
never left stopped, and serve on after."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from targets.locals import EXPECTED
from tests.support.helpers import Spawner, one_error_line, proc_status, sidecar, wait_until
from tests.support.procs import PYTHON, ROOT
from tests.support.pythons import interpreter


def call_later(url: str) -> threading.Thread:
    """GETs ``url`` on a thread of its own (a request that holds the target's loop)."""

    def get() -> None:
        with urllib.request.urlopen(url, timeout=60) as response:
            response.read()

    thread = threading.Thread(target=get, daemon=True)
    thread.start()
    return thread


def dump_json(pid: int, *args: str) -> dict[str, Any]:
    result = sidecar("dump", "--pid", str(pid), "--json", *args)
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def thread_named(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found = [t for t in doc["threads"] if t["name"] == name]
    assert len(found) == 1, [t["name"] for t in doc["threads"]]
    return found[0]


def not_stopped(pid: int) -> bool:
    return not proc_status(pid)["State"].startswith(("T", "t"))


def test_a_blocking_handler_its_locals_the_tasks_and_the_json(spawn: Spawner) -> None:
    target = spawn.target("aiohttp_app")
    request = call_later(target.url + "/freeze?how=sleep&ms=4000")
    # the loop's thread is in the handler's sleep once a dump finds it there
    assert wait_until(
        lambda: "freeze_sleep" in sidecar("dump", "--pid", str(target.pid)).stdout, timeout=10
    )
    text = sidecar("dump", "--pid", str(target.pid), "--locals", "--tasks")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    header = next(line for line in lines if '"MainThread"' in line)
    assert header.startswith(f"Thread {target.pid} ") and " · blocked" in header, header
    main = lines.index(header)
    # innermost frame first, with its locals under it: the handler as it blocks
    assert lines[main + 1].startswith("    freeze_sleep (targets/handlers.py:"), lines[main + 1]
    assert lines[main + 2] == "        ms = 4000.0", lines[main : main + 4]
    freeze = next(i for i in range(main, len(lines)) if lines[i].startswith("    freeze ("))
    assert "        how = 'sleep'" in lines[freeze + 1 : freeze + 5]
    # the task tree follows the threads: the request's task runs the handler
    tasks_at = next(i for i, line in enumerate(lines) if line.startswith("asyncio tasks of"))
    assert tasks_at > freeze
    assert any("[running]" in line for line in lines[tasks_at:]), lines[tasks_at:]
    assert any("freeze_handler (targets/aiohttp_app.py:" in line for line in lines[tasks_at:])

    doc = dump_json(target.pid, "--locals", "--tasks")
    assert doc["pid"] == target.pid and doc["pause_s"] is None
    main_thread = thread_named(doc, "MainThread")
    assert main_thread["tid"] == target.pid and main_thread["state"] == "blocked"
    assert main_thread["frames"][0]["function"] == "freeze_sleep"
    assert main_thread["frames"][0]["locals"] == {"ms": "4000.0"}
    assert any(task["state"] == "running" for task in doc["tasks"])
    # a task's frames are objects, as a thread's are: the tree's chain, outermost first
    keys = {"function", "file", "line"}
    for task in doc["tasks"]:
        assert task["frames"] and all(set(frame) == keys for frame in task["frames"]), task
    running = next(task for task in doc["tasks"] if task["state"] == "running")
    chain = [f"{f['function']} ({f['file']}:{f['line']})" for f in running["frames"]]
    assert any(f.startswith("freeze_handler (targets/aiohttp_app.py:") for f in chain), chain
    tree = [line.strip(" │├└─") for line in lines[tasks_at:]]
    assert chain[0] in tree and chain[-1] in tree, (chain, lines[tasks_at:])
    # the document says what the text says: the same frames, in the same order
    shown = [line.strip() for line in lines[main + 1 :] if line.startswith("    ") and
             not line.startswith("        ")]  # fmt: skip
    as_json = [f"{f['function']} ({f['file']}:{f['line']})" for f in main_thread["frames"]]
    assert shown[: len(as_json)] == as_json

    request.join(timeout=30)
    assert not request.is_alive()
    assert not_stopped(target.pid)
    with urllib.request.urlopen(target.url + "/health", timeout=10) as response:
        assert response.status == 200


def test_the_thread_holding_the_gil_and_the_loop_waiting_for_it(spawn: Spawner) -> None:
    """Read with the threads stopped (``--blocking``): the holder's C call keeps the GIL for
    four seconds while the loop waits for it."""
    target = spawn.target("aiohttp_app")
    call_later(target.url + "/freeze?how=gil&ms=4000")

    def held() -> dict[str, Any] | None:
        doc = dump_json(target.pid, "--blocking")
        names = {t["name"] for t in doc["threads"]}
        if "holder" in names and thread_named(doc, "holder")["holds_gil"]:
            return doc
        return None

    assert wait_until(lambda: held() is not None, timeout=10)
    doc = held()
    assert doc is not None
    holder = thread_named(doc, "holder")
    assert holder["state"] == "busy" and holder["frames"][0]["function"] == "hold_gil"
    assert thread_named(doc, "MainThread")["state"] == "gil"
    assert not any(t["holds_gil"] for t in doc["threads"] if t["name"] != "holder")
    assert doc["pause_s"] is not None and doc["pause_s"] < 1.0
    assert not_stopped(target.pid)
    text = sidecar("dump", "--pid", str(target.pid), "--blocking")
    assert text.returncode == 0 and "threads stopped" in text.stdout


@pytest.mark.parametrize("version", ("3.10", "3.12"))
def test_threads_come_in_start_order_under_the_command_line(spawn: Spawner, version: str) -> None:
    """The main thread first, then the others as they started: the target starts worker-4
    first and worker-0 last, which the interpreter's own list (newest first) reverses; through
    sidecar's walker (3.12) and py-spy's reader (3.10) alike. The header names the command."""
    args = ("--threads", "5", "--busy", "0")
    target = spawn.target("threads", *args, python=interpreter(version))
    order = ["MainThread", "worker-4", "worker-3", "worker-2", "worker-1", "worker-0"]
    doc = dump_json(target.pid)
    assert [thread["name"] for thread in doc["threads"]] == order
    assert doc["threads"][0]["tid"] == target.pid
    assert doc["cmdline"].endswith("-m targets.threads --threads 5 --busy 0"), doc["cmdline"]
    text = sidecar("dump", "--pid", str(target.pid))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"Process {target.pid}: {doc['cmdline']}", lines[:3]
    assert lines[1].startswith(f"Python {version}.") and " · target not stopped" in lines[1]
    headers = [line for line in lines if line.startswith("Thread ")]
    assert [line.split('"')[1] for line in headers] == order, headers


@pytest.mark.parametrize("version", ("3.10", "3.11", "3.12", "3.13", "3.14", "3.15"))
def test_each_versions_locals_read_as_python_writes_them(spawn: Spawner, version: str) -> None:
    """3.11-3.15 through the walker, each value as Python's repr writes it; 3.10 through
    py-spy, its own reprs."""
    target = spawn.target("locals", python=interpreter(version))
    doc = dump_json(target.pid, "--locals", "--locals-chars", "20")
    assert doc["python_version"].startswith(version + ".")
    blocker = thread_named(doc, "blocker")
    assert blocker["state"] == "idle"
    frame = blocker["frames"][0]
    assert frame["function"] == "blocked" and frame["file"] == "targets/locals.py"
    values = frame["locals"]
    if version == "3.10":
        assert doc["reader"].startswith("py-spy")
        assert values["count"] == "42" and values["nothing"] == "None"
        return
    assert doc["reader"].startswith("walker")
    assert values.pop("thing").startswith("<Thing at 0x")
    assert values.pop("ready").startswith("<Event at 0x")
    assert values.pop("reads").startswith("<function at 0x")
    expected = {name: shown for name, shown in EXPECTED.items() if name != "thing"}
    assert values == expected


def test_a_prefork_group_one_process_after_another(spawn: Spawner) -> None:
    parent = spawn.target("tornado_app", "--processes", "2")
    children = lambda: [  # noqa: E731
        int(p) for p in Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
    ]
    assert wait_until(lambda: len(children()) == 2, timeout=30)
    try:
        docs = json.loads(
            sidecar("dump", "--pid", str(parent.pid), "--subprocesses", "--json").stdout
        )
        assert [doc["pid"] for doc in docs] == [parent.pid, *sorted(children())]
        assert all(thread_named(doc, "MainThread")["frames"] for doc in docs)
        text = sidecar("dump", "--pid", str(children()[0]), "-s").stdout
        assert text.count("\nProcess ") + text.startswith("Process ") == 3, text
    finally:
        for pid in children():
            os.kill(pid, 15)


def test_what_it_cannot_read_is_one_line(spawn: Spawner, tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    line = one_error_line(sidecar("dump", "--pid", str(gone.pid)))
    assert f"PID {gone.pid}" in line
    popen = spawn.command("sleep", "30")
    time.sleep(0.2)
    line = one_error_line(sidecar("dump", "--pid", str(popen.pid)))
    assert "does not look like a Python process" in line
    both = sidecar("dump", "--pid", str(popen.pid), "--blocking", "--nonblocking")
    assert both.returncode == 2 and "choose one" in both.stderr
    if os.geteuid() != 0:
        return
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is required"
    target = spawn.target("locals")
    result = subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
         "--bounding-set=-all", PYTHON, "-m", "sidecar", "dump", "--pid", str(target.pid)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env=dict(os.environ, HOME=str(tmp_path)),
    )  # fmt: skip
    assert "CAP_SYS_PTRACE" in one_error_line(result)
    assert not_stopped(target.pid)


def test_a_stack_too_deep_for_the_reader_is_said_as_such(spawn: Spawner) -> None:
    """A Python process 6,000 frames deep, past what py-spy's reader (with which the
    interpreter is found) checks: said so, not "does not look like a Python process"."""
    deep = spawn.target("spin", "--depth", "6000", "--sleep")
    line = one_error_line(sidecar("dump", "--pid", str(deep.pid)))
    assert "does not look like a Python process" not in line, line
    assert f"PID {deep.pid}: it runs Python (python3" in line, line
    assert "a stack deeper than 4,096 frames" in line, line
    assert not_stopped(deep.pid)


@pytest.mark.parametrize("version", ["3.10", "3.12"])
def test_a_throttled_spinner_is_dumped_waiting_for_a_cpu(
    limited: Path, spawn: Spawner, version: str
) -> None:
    """A spinner in a cgroup limited to 0.2 CPU runs about 20 ms of each 100 ms period: a
    dump that finds it running and watches it 15 ms more finds it waiting for a CPU about
    two times in three, through sidecar's walker (3.12) and py-spy's reader (3.10) alike.
    Up to eight dumps: all eight missing it would be a chance of 0.35^8, under 1 in 4,000."""
    target = spawn.target("spin", python=interpreter(version))
    (limited / "cgroup.procs").write_text(f"{target.pid}\n")
    time.sleep(0.3)
    states = []
    for _ in range(8):
        (thread,) = dump_json(target.pid)["threads"]
        states.append(thread["state"])
        if "cpu_wait" in states:
            break
    assert "cpu_wait" in states, states
    assert set(states) <= {"busy", "cpu_wait"}, states  # a spinner is never idle
    assert not_stopped(target.pid)
