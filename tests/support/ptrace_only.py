"""A sampler as the Kubernetes manifests deploy sidecar: the app under a user of its own, the
sidecar as root with CAP_SYS_PTRACE its only capability (so the target's /proc ``syscall``
files, for its own user alone, are closed to it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest

from tests.support.procs import PYTHON, ROOT

#: The user the target runs as (nobody).
APP_UID = 65534
#: ``Spawner.target(..., prefix=AS_APP_USER)`` starts a target as that user.
AS_APP_USER = ("setpriv", f"--reuid={APP_UID}", f"--regid={APP_UID}", "--clear-groups")
#: The tests that need it are skipped without root and setpriv, with the reason.
needs_setpriv = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"),
    reason="needs root and setpriv (util-linux) to run the target and sampler as other users",
)


def run_with_ptrace_only(script: str, pid: int) -> dict[str, Any]:
    """What ``script`` (Python, given the target's PID as argv[1]) prints as JSON, run with
    CAP_SYS_PTRACE its only capability."""
    only_ptrace = "-all,+sys_ptrace"
    done = subprocess.run(
        [
            "setpriv",
            f"--inh-caps={only_ptrace}",
            f"--ambient-caps={only_ptrace}",
            f"--bounding-set={only_ptrace}",
            PYTHON,
            "-c",
            script,
            str(pid),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result
