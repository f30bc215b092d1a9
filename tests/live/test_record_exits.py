"""``sidecar record``'s exit status against real targets: 130 after Ctrl-C and 143 after
SIGTERM, the partial profile written first; a program started with ``--`` has its own status
passed on (128 + N when a signal ended it); one that outlives the recording is stopped, which
is no failure of it (exit 0: tests/live/test_record.py)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from sidecar.profile import parse_folded
from tests.support.helpers import PYTHON, ROOT, Spawner, sidecar
from tests.support.procs import stop_process


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_recording_ended_by_a_signal_writes_its_profile_then_exits_128_plus_n(
    spawn: Spawner, tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    target = spawn.target("spin")
    out = tmp_path / "partial.txt"
    popen = subprocess.Popen(
        [PYTHON, "-m", "sidecar", "record", "-p", str(target.pid), "-f", "folded", "-o", str(out)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        # as from a terminal: a shell that starts a job in the background ignores SIGINT for it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert popen.stderr is not None
        first = popen.stderr.readline()  # "sampling PID ...": it samples now
        assert first.startswith(f"sampling PID {target.pid} "), first
        time.sleep(1.0)  # samples to write
        popen.send_signal(sig)
        rest = popen.communicate(timeout=60)[1]
    finally:
        stop_process(popen, signal.SIGKILL, timeout=10)
    assert popen.returncode == status, first + rest
    assert f"wrote {out} (folded, " in rest, rest
    assert parse_folded(out.read_text()).total > 0
    assert target.popen.poll() is None  # a target given by --pid is left running


@pytest.mark.parametrize(
    ("code", "status", "said"),
    [
        ("raise SystemExit(3)", 3, "exited with status 3"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 137, "was ended by SIGKILL"),
        ("pass", 0, "exited with status 0"),
    ],
)
def test_a_started_program_s_exit_status_is_passed_on(
    tmp_path: Path, code: str, status: int, said: str
) -> None:
    """A CI job that profiles its test run still fails when the tests do."""
    out = tmp_path / "run.txt"
    program = f"import time\nend = time.time() + 1\nwhile time.time() < end: pass\n{code}\n"
    result = sidecar("record", "-f", "folded", "-o", str(out), "--", PYTHON, "-c", program)
    assert result.returncode == status, result.stderr
    assert result.stderr.rstrip().endswith(said), result.stderr
    assert parse_folded(out.read_text()).total > 0  # the profile is written all the same
