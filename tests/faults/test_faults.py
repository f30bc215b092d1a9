"""Faults around the target: the sidecar killed while it holds the target stopped, stopped
during a write burst, and targets that exit, crash, restart, fork, exec or lose their PID to a
new process while they are sampled. The target is never hurt; samples are never attributed to
the wrong process. Each test adds its rounds and faults to tests/reports/faults.md.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from sidecar.store import ProcessRecord, Store
from sidecar.store.query import Reader
from sidecar.store.schema import MIGRATIONS
from tests.support.faultkit import (
    Entry,
    children,
    integrity,
    left_stopped_or_traced,
    query,
    record,
    thread_states,
    window_ticks,
)
from tests.support.helpers import (
    PYTHON,
    ROOT,
    LoadDriver,
    Proc,
    Servers,
    Spawner,
    free_port,
    wait_until,
)

pytestmark = pytest.mark.faults

ROUNDS = int(os.environ.get("SIDECAR_FAULT_ROUNDS", "50"))


def unhurt(target: Proc) -> None:
    """The target runs on: no thread stopped or traced, and it answers a request."""
    assert wait_until(lambda: not left_stopped_or_traced(target.pid), timeout=2), (
        left_stopped_or_traced(target.pid)
    )
    assert target.get("/health", timeout=5) == b"ok\n"


def kill_while_stopped(killer: subprocess.Popen[str], pids: list[int], timeout: float) -> str:
    """SIGKILLs ``killer`` the moment a thread of ``pids`` is in ptrace stop ("stopped"), or
    at least traced ("traced"), or after ``timeout`` ("attached")."""
    deadline = time.monotonic() + timeout
    seen = "attached"
    while time.monotonic() < deadline and killer.poll() is None:
        states = [st for pid in pids for st in thread_states(pid).values()]
        if any(state == "t" and tracer for state, tracer in states):
            seen = "stopped"
            break
        if any(tracer for _, tracer in states):
            seen = "traced"
    killer.kill()
    killer.wait(timeout=10)
    return seen


def test_sigkill_of_record_blocking_mid_sample_never_leaves_the_target_stopped(
    spawn: Spawner, load: LoadDriver
) -> None:
    """SIGKILL of ``sidecar record --blocking`` at the moment it holds the target in ptrace stop,
    ROUNDS times: every thread runs on untraced, and the service answers after each."""
    target = spawn.target("aiohttp_app")
    load.start(target.url + "/cpu?repeat=20", seconds=120, connections=2)
    entry = Entry("record --blocking killed mid-sample", "never hurt the target", rounds=ROUNDS)
    for _ in range(ROUNDS):
        killer = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "sidecar",
                "record",
                "--pid",
                str(target.pid),
                "--blocking",
                "--rate",
                "1000",
                "--duration",
                "60",
                "-q",
                "-o",
                os.devnull,
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        spawn.procs.append(killer)
        entry.fault(f"SIGKILL while the target was {kill_while_stopped(killer, [target.pid], 10)}")
        unhurt(target)
    assert entry.faults.get("SIGKILL while the target was stopped", 0) >= ROUNDS // 2, entry.faults
    entry.note(
        "kills land when /proc shows a target thread in ptrace stop (state t); after each, "
        "every thread is running or sleeping with TracerPid 0 and GET /health answers"
    )
    record(entry)


def test_sigkill_of_serve_blocking_never_leaves_targets_stopped(
    spawn: Spawner, load: LoadDriver, sidecars: Servers, tmp_path: Path
) -> None:
    aio = spawn.target("aiohttp_app")
    tor = spawn.target("tornado_app")
    load.start(aio.url + "/cpu?repeat=20", seconds=120, connections=2)
    load.start(tor.url + "/hard", seconds=120, connections=2)
    rounds = max(5, ROUNDS // 7)
    entry = Entry("serve --blocking killed mid-sample", "never hurt the target", rounds=rounds)
    db = tmp_path / "blocking.db"
    for _ in range(rounds):
        server = sidecars(
            db, "--blocking", "--rate", "500", "--window", "1", "--pid", str(aio.pid),
            "--pid", str(tor.pid),
        )  # fmt: skip
        seen = kill_while_stopped(server.popen, [aio.pid, tor.pid], 15)
        entry.fault(f"SIGKILL while a target was {seen}")
        unhurt(aio)
        unhurt(tor)
        assert integrity(db) == "ok"
    assert entry.faults.get("SIGKILL while a target was stopped", 0) >= rounds // 2, entry.faults
    record(entry)


def test_sigterm_during_a_write_burst_flushes_everything(
    spawn: Spawner, load: LoadDriver, sidecars: Servers, tmp_path: Path
) -> None:
    """SIGTERM right after a window boundary, when every session hands its window to the
    writer: exit 0, every sample counted before the signal is in the database (the window in
    progress included), and the blocking-mode targets run on."""
    aio = spawn.target("aiohttp_app")
    tor = spawn.target("tornado_app")
    many = spawn.target("threads", "--threads", "50", "--busy", "2")
    fresh = spawn.target("generated", "--threads", "2")  # new stacks to intern all the time
    load.start(aio.url + "/cpu?repeat=20", seconds=120, connections=2)
    load.start(tor.url + "/hard", seconds=120, connections=2)
    rounds = 2
    entry = Entry("serve stopped by SIGTERM in a write burst", "never hurt the target")
    entry.rounds = rounds
    pids = [aio.pid, tor.pid, many.pid, fresh.pid]
    for number in range(rounds):
        db = tmp_path / f"term{number}.db"
        server = sidecars(
            db, "--blocking", "--rate", "200", "--window", "2",
            *(arg for pid in pids for arg in ("--pid", str(pid))),
        )  # fmt: skip
        assert wait_until(lambda db=db: len(window_ticks(db)) >= 4, timeout=30), server.log_text()
        # just past a window boundary: the writer is busy with every session's window
        time.sleep(2 - time.time() % 2 + 0.05 + 0.5 * random.random())
        counted = server.metric("sidecar_sampler_samples_total")
        committed = window_ticks(db)
        signalled = time.time()
        assert server.stop(signal.SIGTERM) == 0, server.log_text()
        entry.fault("SIGTERM during a write burst")
        after = window_ticks(db)
        assert integrity(db) == "ok"
        assert all(after.get(key, 0) >= ticks for key, ticks in committed.items())
        assert sum(after.values()) >= counted  # nothing sampled before the signal is lost
        last = max(window for window, _, _ in after)
        assert last >= int(signalled) // 2 * 2 - 2  # the window in progress was flushed
        assert "Traceback" not in server.log_text()
        unhurt(aio)
        unhurt(tor)
        for pid in (many.pid, fresh.pid):
            assert not left_stopped_or_traced(pid)
    entry.note(
        "after SIGTERM the database holds at least the samples /metrics counted just before "
        "it, and the window in progress"
    )
    record(entry)


# -- target faults --------------------------------------------------------------------------


def stacks_of_process(db: Path, process_id: int) -> dict[str, int]:
    """Folded stacks (no state leaf) the store attributes to one process."""
    reader = Reader(db)
    totals: dict[int, int] = {}
    for *_, stack, _, _, count in reader.entries(process_id):
        totals[stack] = totals.get(stack, 0) + count
    texts = reader.stack_texts(set(totals))
    return {texts[stack]: count for stack, count in totals.items()}


def processes(db: Path) -> dict[int, dict[str, object]]:
    """pid → its process entry (the newest when a PID has several) with its target."""
    rows = query(
        db,
        "SELECT p.id, p.pid, p.start_time, p.alive, p.target_id, t.cmdline, t.group_key "
        "FROM processes p JOIN targets t ON t.id = p.target_id ORDER BY p.id",
    )
    return {
        r[1]: {"id": r[0], "start": r[2], "alive": r[3], "target": r[4], "cmdline": r[5]}
        for r in rows
    }


def test_targets_that_exit_crash_restart_and_fork(
    spawn: Spawner, sidecars: Servers, tmp_path: Path
) -> None:
    db = tmp_path / "life.db"
    server = sidecars(db, "--window", "1", "--match", r"-m targets\.lifecycle ")
    # 5 s each: at least two of serve's scans (every 2 s, then up to 0.5 s to the next check)
    # see them, and one the first scan missed still has seconds sampled (with 3 s, under one
    # was left to it, against the 50 samples asked for below)
    ending = {
        mode: spawn.target("lifecycle", mode, "--after", "5") for mode in ("exit", "segv", "abort")
    }
    parent = spawn.target("lifecycle", "fork", "--workers", "3")
    workers = children(parent.pid)
    assert len(workers) == 3
    restart_args = ("run", "--after", "7001")  # --after only tags the command line here
    first = spawn.target("lifecycle", *restart_args)
    assert wait_until(lambda: len(server.targets()) == 8, timeout=20), server.targets()
    assert wait_until(
        lambda: all(
            (p.popen.poll() is not None) for p in ending.values()
        ),  # they end by themselves
        timeout=15,
    )
    assert {mode: p.popen.returncode for mode, p in ending.items()} == {
        "exit": 0,
        "segv": -signal.SIGSEGV,
        "abort": -signal.SIGABRT,
    }
    assert wait_until(lambda: all(t["samples"] > 0 for t in server.targets()), timeout=10)
    first.popen.kill()
    first.popen.wait()
    second = spawn.target("lifecycle", *restart_args)
    assert wait_until(
        lambda: any(t["pid"] == second.pid and t["alive"] for t in server.targets()), timeout=15
    )
    time.sleep(2)
    assert server.stop() == 0
    log = server.log_text()
    assert "Traceback" not in log and "session loop error" not in log

    seen = processes(db)
    for mode, proc in ending.items():
        entry = seen[proc.pid]
        assert not entry["alive"], mode
        stacks = stacks_of_process(db, int(entry["id"]))  # type: ignore[call-overload]
        total = sum(stacks.values())
        assert total > 50, mode  # what it had is recorded
        # its own stacks only (no worker's); a sample may catch it on its way out
        assert all(s.startswith("_run_module_as_main (<frozen runpy>") for s in stacks), stacks
        assert not any("lifecycle_worker" in s for s in stacks), (mode, stacks)
        working = sum(n for s, n in stacks.items() if "lifecycle_work (targets/lifecycle.py" in s)
        assert working >= 0.95 * total, (mode, stacks)
        assert f"PID {proc.pid} exited" in log
    # forked workers: separate targets of one group, each with its own samples only
    group = [seen[pid] for pid in (parent.pid, *workers)]
    assert len({e["target"] for e in group}) == 4
    assert len({e["cmdline"] for e in group}) == 1
    parent_stacks = stacks_of_process(db, int(group[0]["id"]))  # type: ignore[call-overload]
    assert parent_stacks and not any("lifecycle_worker" in s for s in parent_stacks)
    for entry in group[1:]:
        stacks = stacks_of_process(db, int(entry["id"]))  # type: ignore[call-overload]
        assert stacks and all("lifecycle_worker" in s for s in stacks)
    # the restart: the same logical target, a second process entry
    assert seen[first.pid]["target"] == seen[second.pid]["target"]
    assert seen[first.pid]["id"] != seen[second.pid]["id"] and not seen[first.pid]["alive"]
    assert integrity(db) == "ok"

    entry = Entry("targets exit, crash, restart and fork", "target faults", rounds=1)
    for fault in ("clean exit", "SIGSEGV", "abort (SIGABRT)", "SIGKILL + restart"):
        entry.fault(fault)
    entry.fault("fork of a worker", 3)
    record(entry)


def test_exec_of_another_program_is_a_new_process_entry(
    spawn: Spawner, sidecars: Servers, tmp_path: Path
) -> None:
    """exec keeps PID and start time but runs another program: what the old program had stays
    with it; the new program is sampled as a new process entry of its own target."""
    db = tmp_path / "exec.db"
    target = spawn.target(
        "lifecycle", "exec", "--after", "6", "--", PYTHON, "-m", "targets.spin", "--depth", "4"
    )
    # and one that execs a program that is not Python: its sampling ends, nothing loops
    sleeper = spawn.target("lifecycle", "exec", "--after", "6", "--", "/bin/sleep", "60")
    # by PID (exec keeps it): a command-line pattern could catch other runs' processes
    pids = ["--pid", str(target.pid), "--pid", str(sleeper.pid)]
    server = sidecars(db, "--window", "1", *pids)

    def settled() -> bool:
        found = {(t["pid"], t["cmdline"].split(" -m ")[1][:20]): t for t in server.targets()}
        return (
            len(found) == 3
            and all(t["samples"] > 50 for t in found.values())
            and not found[(sleeper.pid, "targets.lifecycle ex")]["alive"]
        )

    assert wait_until(settled, timeout=90), (server.targets(), server.log_text())
    alive = {t["cmdline"].split(" -m ")[1][:16]: t["alive"] for t in server.targets()}
    assert alive == {"targets.lifecycl": False, "targets.spin --d": True}, server.targets()
    assert server.stop() == 0
    assert "Traceback" not in server.log_text()
    rows = query(
        db,
        "SELECT p.id, p.pid, p.start_time, p.alive, t.cmdline FROM processes p "
        "JOIN targets t ON t.id = p.target_id WHERE p.pid = ? ORDER BY p.id",
        (target.pid,),
    )
    assert [r[1] for r in rows] == [target.pid, target.pid]
    assert rows[0][2] == rows[1][2]  # same start time: only the program differs
    assert "targets.lifecycle exec" in rows[0][4] and "targets.spin" in rows[1][4]
    before = stacks_of_process(db, rows[0][0])
    after = stacks_of_process(db, rows[1][0])
    assert before and all("targets/lifecycle.py" in s for s in before)
    assert after and all("targets/spin.py" in s for s in after)
    assert all("targets/lifecycle.py" not in s for s in after)
    entry = Entry("target execs another program", "target faults", rounds=1)
    entry.fault("exec into another Python program")
    entry.fault("exec into a program that is not Python")
    record(entry)


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setarch"),
    reason="needs root, unshare and setarch (util-linux) to force a PID reuse",
)
def test_a_reused_pid_is_a_new_process_and_never_gets_the_old_ones_samples(
    tmp_path: Path,
) -> None:
    """In a fresh PID namespace, B is started on the PID of A (killed), both without ASLR, and
    the sidecar samples at 1 Hz: A's sampler would read B without an error. Each process gets
    only its own stacks."""
    db = tmp_path / "reuse.db"
    result = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            PYTHON,
            str(ROOT / "tests" / "support" / "pid_reuse.py"),
            str(db),
            str(free_port()),
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    (a_pid, a_start), (b_pid, b_start) = outcome["a"], outcome["b"]
    assert a_pid == b_pid and a_start != b_start and outcome["sidecar_exit"] == 0
    rows = query(db, "SELECT id, pid, start_time FROM processes ORDER BY id")
    assert [(r[1], r[2]) for r in rows] == [(a_pid, a_start), (b_pid, b_start)]
    a_stacks = stacks_of_process(db, rows[0][0])
    b_stacks = stacks_of_process(db, rows[1][0])
    assert a_stacks and all("deeper (targets/spin.py" in s for s in a_stacks), a_stacks
    assert b_stacks and all("rückwärts_tiefer (targets/spin.py" in s for s in b_stacks), b_stacks
    entry = Entry("a PID reused by a new process", "target faults", rounds=1)
    entry.fault("PID reuse forced with ns_last_pid, no ASLR")
    record(entry)


def test_store_keeps_one_entry_per_program_and_migrates_old_databases(tmp_path: Path) -> None:
    """The store side of exec: same PID and start time, another command line → another entry
    of another target; a database of the previous schema keeps its processes."""
    old = tmp_path / "v2.db"
    conn = sqlite3.connect(old)
    for number, script in enumerate(MIGRATIONS[:2]):
        assert isinstance(script, str)
        conn.executescript(f"BEGIN;{script};PRAGMA user_version = {number + 1};COMMIT;")
    conn.execute("INSERT INTO targets VALUES (1, 'python a.py', 'python a.py', 'aiohttp', "
                 "'asyncio', 1, 2)")  # fmt: skip
    conn.execute("INSERT INTO processes VALUES (1, 1, 42, 7, '3.11', 1, 2, 0, NULL)")
    conn.commit()
    conn.close()
    store = Store(old)
    assert store.attach(ProcessRecord(42, 7, "python a.py", 3.0)) == (1, 1)
    execed = store.attach(ProcessRecord(42, 7, "python b.py", 4.0))
    assert execed[0] != 1 and execed[1] != 1
    assert store.attach(ProcessRecord(42, 7, "python b.py", 5.0)) == execed
    store.close()
    assert query(old, "PRAGMA user_version") == [(len(MIGRATIONS),)]
    assert integrity(old) == "ok"


def test_the_version_read_is_the_interpreter_mapped_in_the_target() -> None:
    """A target run as another user whose loader cannot reach its binary's own libpython
    (pyenv's, under a /root that user may not enter) falls back to the host's libpython of
    the same minor version: that is the interpreter that runs, as the target's own
    ``sys.version`` says. sidecar reads the version of the interpreter mapped into the target
    (``/proc/PID/maps``), not of the binary's name or of the host's ``python3``: the version it
    reports is the target's own, as root and as the user alike."""
    say = "import sys, time\nprint(sys.version.split()[0], flush=True)\ntime.sleep(30)\n"
    entry = Entry("the interpreter version of a target run as another user", "target faults")
    for prefix in ((), ("setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups")):
        popen = subprocess.Popen(
            [*prefix, PYTHON, "-c", say], stdout=subprocess.PIPE, text=True, cwd="/"
        )
        try:
            assert popen.stdout is not None
            own = popen.stdout.readline().strip()
            assert own, "the target said its version"
            time.sleep(1.0)  # set up for the attach
            result = subprocess.run(
                [str(ROOT / ".venv/bin/sidecar"), "dump", "--pid", str(popen.pid), "--json"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr
            read = json.loads(result.stdout)["python_version"]
            maps = Path(f"/proc/{popen.pid}/maps").read_text()
            libs = sorted({line.split()[-1] for line in maps.splitlines() if "libpython" in line})
            assert read == own, (prefix, read, own, libs)
            entry.rounds += 1
            entry.note(f"{'as UID 1000' if prefix else 'as root'}: the target said {own}, "
                       f"sidecar read {read} (libpython mapped: {libs or 'none'})")  # fmt: skip
        finally:
            popen.kill()
            popen.wait()
    record(entry)


def test_a_program_started_by_record_ends_when_record_is_killed(tmp_path: Path) -> None:
    """``record -- PROGRAM`` killed with SIGKILL (no handler runs): the kernel sends the program
    SIGTERM as its parent dies, so it does not run on, re-parented to PID 1."""
    entry = Entry("record killed -9 while its program runs", "target faults", rounds=1)
    recorder = subprocess.Popen(
        [str(ROOT / ".venv/bin/sidecar"), "record", "-o", str(tmp_path / "k.svg"), "--",
         PYTHON, "-c", "import time; time.sleep(60)"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert wait_until(lambda: bool(children(recorder.pid)), timeout=20)
        (program,) = children(recorder.pid)
        time.sleep(1.0)  # sampling it
        recorder.kill()
        recorder.wait()

        def ended() -> bool:
            try:
                state = Path(f"/proc/{program}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                return True
            return state in ("Z", "X")  # dead, not yet reaped by its new parent

        assert wait_until(ended, timeout=10), f"PID {program} runs on after record's SIGKILL"
        entry.fault("SIGKILL to record -- PROGRAM")
    finally:
        if recorder.poll() is None:
            recorder.kill()
    record(entry)


IDLE_LOOP = "import time\nwhile True:\n    time.sleep(0.01)\n"
EXEC_LATER = "import os, time\ntime.sleep(1.5)\nos.execv('/bin/sleep', ['sleep', '20'])\n"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / ".venv/bin/sidecar"), *args], capture_output=True, text=True, timeout=60
    )


def test_a_stopped_target_or_one_that_became_another_program_is_said_so(
    tmp_path: Path,
) -> None:
    """What became of a target is said in one line, in place of advice that does not fit: one
    stopped (SIGSTOP) while recorded reads idle then, and the summary says it was stopped and
    for how long; --blocking refuses a stopped target up front (record and dump), and an
    attach to one that fails says it is stopped; one that executes another program mid-way
    reads no sample after, said so, not "the target changed its stacks ... --blocking"."""
    entry = Entry("a target stopped, or becoming another program", "target faults", rounds=1)
    idle = subprocess.Popen([PYTHON, "-c", IDLE_LOOP])
    try:
        time.sleep(1.5)
        out = str(tmp_path / "s.svg")
        stopper = threading.Timer(1.0, os.kill, args=(idle.pid, signal.SIGSTOP))
        stopper.start()
        resumer = threading.Timer(2.0, os.kill, args=(idle.pid, signal.SIGCONT))
        resumer.start()
        result = _cli("record", "-p", str(idle.pid), "-d", "3", "-o", out)
        stopper.join()
        resumer.join()
        assert result.returncode == 0, result.stderr
        said = [line for line in result.stderr.splitlines() if "was stopped" in line]
        assert len(said) == 1 and f"PID {idle.pid} was stopped (SIGSTOP" in said[0], said
        assert "--blocking pauses it" not in result.stderr, result.stderr
        entry.fault("SIGSTOP while recorded")
        os.kill(idle.pid, signal.SIGSTOP)
        assert wait_until(lambda: set(thread_states(idle.pid).values()) == {("T", 0)})
        blocked = str(tmp_path / "b.svg")
        for args in (("record", "--blocking", "-d", "1", "-o", blocked), ("dump", "--blocking")):
            result = _cli(*args, "-p", str(idle.pid))
            lines = result.stderr.splitlines()
            assert result.returncode != 0 and len(lines) == 1, (args, result.stderr)
            assert f"PID {idle.pid} is stopped (SIGSTOP or a debugger): --blocking" in lines[0]
            entry.fault(f"{args[0]} --blocking of a stopped target")
        assert set(thread_states(idle.pid).values()) == {("T", 0)}, "left stopped, not traced"
        os.kill(idle.pid, signal.SIGCONT)
    finally:
        idle.kill()
        idle.wait()
    later = subprocess.Popen([PYTHON, "-c", EXEC_LATER])
    try:
        time.sleep(0.8)
        result = _cli("record", "-p", str(later.pid), "-d", "3", "-o", str(tmp_path / "e.svg"))
        assert result.returncode == 0, result.stderr
        became = f"PID {later.pid} became another program during the recording (sleep 20)"
        assert became in result.stderr, result.stderr
        assert "changed its stacks" not in result.stderr, result.stderr
        entry.fault("exec of another program while recorded")
    finally:
        later.kill()
        later.wait()
    record(entry)
