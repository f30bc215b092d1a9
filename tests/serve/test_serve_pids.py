"""``serve --pid``: a PID asked for that names no process, or no Python one, is refused at start
in one line (exit 1); one that exits later is said in the log at WARNING and in ``/healthz``,
degraded, with the reason and never the command line."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from tests.support.helpers import Spawner, one_error_line, sidecar, wait_until

GONE = 2**22 + 4321  # no such process


def test_a_pid_asked_for_that_is_not_there_or_not_python_is_refused_at_start(
    spawn: Spawner, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    line = one_error_line(sidecar("serve", "--db", str(db), "--port", "0", "--pid", str(GONE)))
    assert line == f"sidecar: error: --pid {GONE}: no process with PID {GONE}"
    sleeper = spawn.command("sleep", "60")
    wait_until(lambda: Path(f"/proc/{sleeper.pid}/exe").resolve().name == "sleep", timeout=5)
    line = one_error_line(sidecar("serve", "--db", str(db), "--port", "0", "--pid",
                                  str(sleeper.pid)))  # fmt: skip
    assert line == (
        f"sidecar: error: --pid {sleeper.pid}: PID {sleeper.pid} does not look like a Python "
        "process (it runs sleep)"
    )
    assert not db.exists()  # refused before the store was opened


def test_a_pid_asked_for_that_exits_is_said_in_the_log_and_in_healthz(
    spawn: Spawner, serve: Any
) -> None:
    target = spawn.target("spin", "--sleep")
    stays = spawn.target("spin", "--sleep", "--depth", "2")
    server = serve(pids=(target.pid, stays.pid))
    assert wait_until(lambda: server.health()["sessions"] == 2, timeout=30), server.health()
    health = server.health()
    assert health["status"] == "ok" and health["missing"] == [], health
    target.popen.kill()
    target.popen.wait()

    def missing() -> dict[int, str]:
        return {m["pid"]: m["reason"] for m in server.health()["missing"]}

    assert wait_until(lambda: bool(missing()), timeout=30), server.health()
    health = server.health()
    assert health["status"] == "degraded" and health["sessions"] == 1, health
    assert missing() == {target.pid: "it exited"}
    assert all(isinstance(m["since"], float) for m in health["missing"]), health
    said = rf"WARNING sidecar\.serve: PID {target.pid}, asked for with --pid, is not sampled: "
    warned = [
        line for line in server.log_text().splitlines() if re.search(said + "it exited$", line)
    ]
    assert len(warned) == 1, server.log_text()  # said once, not at every scan
    time.sleep(4.5)  # two scans more (one every 2 s)
    assert server.log_text().count(f"PID {target.pid}, asked for with --pid") == 1
    # the program's name at most, never its command line: /healthz answers without the token
    assert "targets.spin" not in json.dumps(server.health())
