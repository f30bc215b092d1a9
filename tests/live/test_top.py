"""``sidecar top`` in a real terminal (tmux, 80x24) against a real aiohttp target under load:
the screen names the target's functions and the loop's state, changes from one second to the
next, sorts on a key, quits on ``q`` with exit 0, and the target keeps serving, never left
stopped. Without a terminal it says so in one line and exits 2; ``--snapshots`` prints plain
text instead. Every wait is bounded; nothing is timed."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.helpers import PYTHON, ROOT, Proc, Spawner, proc_status, sidecar, wait_until

#: The function the load keeps busy (targets/handlers.py, under /cpu).
HOT = "classify_path (targets/handlers.py)"
#: A row of the functions table: four figures, then the function.
ROW = re.compile(r"^\s*([\d.]+)%\s+([\d.]+)%\s+([\d.]+)s\s+([\d.]+)s  (.+)$")


@pytest.fixture
def loaded(spawn: Spawner) -> Iterator[Proc]:
    """An aiohttp target kept busy in /cpu by one client, until the test ends."""
    target = spawn.target("aiohttp_app")
    done = threading.Event()

    def drive() -> None:
        while not done.is_set():
            try:
                target.get("/cpu?repeat=400", timeout=10)
            except (OSError, urllib.error.URLError):
                time.sleep(0.05)

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    yield target
    done.set()
    thread.join(timeout=15)


class Terminal:
    """A tmux session of 80x24 running one command."""

    def __init__(self, name: str, command: str) -> None:
        tmux = shutil.which("tmux")
        assert tmux, "tmux is needed (apt-get install tmux; .ci/run installs it)"
        self.tmux, self.name = tmux, name
        self.run("new-session", "-d", "-s", name, "-x", "80", "-y", "24", command)

    def run(self, *args: str) -> str:
        return subprocess.run(
            [self.tmux, *args], check=True, capture_output=True, text=True, timeout=10
        ).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.name, *keys)

    def wait(self, check: Callable[[str], bool], what: str, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if check(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"the screen never showed {what}:\n{text}")
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run([self.tmux, "kill-session", "-t", self.name], capture_output=True)


def rows(text: str) -> list[tuple[float, float, str]]:
    """(own %, total %, function) of each row of the functions table on the screen."""
    found = []
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            found.append((float(match[1]), float(match[2]), match[5]))
    return found


def test_top_draws_the_loop_and_its_functions_sorts_and_quits(loaded: Proc, tmp_path: Path) -> None:
    code = tmp_path / "code"
    command = f"{shlex.quote(str(PYTHON))} -m sidecar top --pid {loaded.pid}; echo $? > {code}"
    term = Terminal(f"sidecar-top-{loaded.pid}", f"cd {shlex.quote(str(ROOT))} && {command}")
    try:
        first = term.wait(lambda t: HOT in t and "busy" in t, f"{HOT} and the loop's states")
        assert "aiohttp on asyncio · event loop" in first
        for state in ("busy", "idle", "blocked", "gil"):
            assert re.search(rf"^{state}\s+\d+\.\d%", first, re.MULTILINE), first
        assert "%Own▼" in first
        assert all(len(line) <= 80 for line in first.splitlines())
        # one process: no key to pick another
        assert "1-4 sort · w span · h help · q quit" in first and "p process" not in first
        # a second later the figures moved on: the time columns only grow
        term.wait(lambda t: t != first and HOT in t, "a new second")
        term.keys("2")
        by_total = term.wait(lambda t: "%Total▼" in t and len(rows(t)) >= 3, "the sort by %Total")
        totals = [total for _, total, _ in rows(by_total)]
        assert totals == sorted(totals, reverse=True), by_total
        # the whole help, down to its last line, fits the 80x24 terminal
        term.keys("h")
        helped = term.wait(lambda t: "h back · q quit" in t, "the help")
        assert "  cpu_wait runnable, waiting for a CPU (a CPU limit, busy cores)" in helped
        assert "…" not in helped.split("\n", 1)[1] and "scroll (" not in helped, helped
        term.keys("h")
        term.wait(lambda t: "%Total▼" in t, "the table again")
        term.keys("q")
        deadline = time.monotonic() + 10
        while not code.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert code.read_text().strip() == "0", term.screen()
    finally:
        term.close()
    assert proc_status(loaded.pid)["State"][0] in "RS"  # running or asleep, never stopped
    assert loaded.get("/health") == b"ok\n"


def test_top_without_a_terminal_says_so_or_prints_snapshots(loaded: Proc) -> None:
    piped = sidecar("top", "--pid", str(loaded.pid))
    assert piped.returncode == 2 and piped.stdout == ""
    assert piped.stderr.count("\n") == 1 and "not one; --snapshots N" in piped.stderr
    shot = sidecar("top", "--pid", str(loaded.pid), "--snapshots", "1", timeout=30)
    assert shot.returncode == 0, shot.stderr
    assert "event loop" in shot.stdout and re.search(r"^busy\s+\d+\.\d%", shot.stdout, re.M)
    assert all(len(line) <= 80 for line in shot.stdout.splitlines())
    assert loaded.get("/health") == b"ok\n"


def test_top_follows_a_group_whose_master_replaces_a_worker(spawn: Spawner) -> None:
    """``--subprocesses``: a worker killed and forked again by its master is said to have
    exited, and its replacement joins the view."""
    parent = spawn.target("tornado_app", "--processes", "2", "--max-restarts", "1")
    children = lambda: [  # noqa: E731
        int(p) for p in Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
    ]
    assert wait_until(lambda: len(children()) == 2, timeout=30)
    first = children()
    top = subprocess.Popen(
        [str(PYTHON), "-m", "sidecar", "top", "-p", str(parent.pid), "-s", "--snapshots", "8"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert top.stdout is not None
        assert "3 processes" in top.stdout.readline()  # the first snapshot's title
        os.kill(first[0], signal.SIGKILL)
        assert wait_until(lambda: len(set(children()) - set(first)) == 1, timeout=15)
        (replacement,) = set(children()) - set(first)
        out, err = top.communicate(timeout=60)
        assert top.returncode == 0, err
        # the last snapshot: from its title on
        last = out[out.rfind("\n", 0, out.rindex(" processes (serving ones together)")) + 1 :]
        assert last.startswith("3 processes"), out
        assert f"PID {first[0]} exited; PID {replacement} joined" in last, out
        assert "1-4 sort · w span · p process · h help · q quit" in last, last
    finally:
        top.kill()
        for pid in children():
            os.kill(pid, signal.SIGTERM)
