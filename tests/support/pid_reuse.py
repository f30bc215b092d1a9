"""PID reuse, forced: run as PID 1 of a fresh PID namespace (``unshare --pid --fork
--mount-proc python tests/support/pid_reuse.py DB PORT RATE``) by tests/faults/test_faults.py.

Starts ``sidecar serve`` and process A (``targets.spin``, frames ``deeper``), waits until A is
sampled, kills A, and starts process B (``targets.spin --unicode``, frames
``rückwärts_tiefer``) on A's PID by writing /proc/sys/kernel/ns_last_pid. Both run without
address-space randomization (``setarch -R``), so B's interpreter sits at the very addresses
A's did: a sampler that kept reading "PID A" would read B's stacks without any error. After B
was sampled for a while, the sidecar is stopped and one JSON line tells the test A's and B's
PIDs and start times; the test reads the database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start_time(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def samples_of(port: int, pid: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/targets", timeout=5) as r:
            targets = json.loads(r.read())
    except OSError:
        return 0
    return sum(t["samples"] for t in targets if t["pid"] == pid)


def wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def spin(*args: str) -> subprocess.Popen[bytes]:
    popen = subprocess.Popen(
        ["setarch", "-R", sys.executable, "-m", "targets.spin", "--depth", "3", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    assert popen.stdout is not None
    assert popen.stdout.readline().strip() == b"ready"
    return popen


def main() -> None:
    db, port, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    assert os.getpid() == 1, "run me as PID 1 of a new PID namespace"
    sidecar = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sidecar",
            "serve",
            "--db",
            db,
            "--port",
            str(port),
            "--window",
            "1",
            "--rate",
            rate,
            "--match",
            r"targets\.spin",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    try:
        first = spin()
        a_pid, a_start = first.pid, start_time(first.pid)
        assert wait_for(lambda: samples_of(port, a_pid) >= 3, 30), "A was never sampled"
        first.kill()
        first.wait()
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(a_pid - 1))
        second = spin("--unicode")
        b_pid, b_start = second.pid, start_time(second.pid)
        # B runs on A's PID for a while: sampled by its own session, never by A's
        time.sleep(4.0)
        second.kill()
        second.wait()
    finally:
        sidecar.send_signal(signal.SIGTERM)
        code = sidecar.wait(timeout=30)
    print(
        json.dumps(
            {"a": [a_pid, a_start], "b": [b_pid, b_start], "sidecar_exit": code},
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
