"""A pod on this machine: the app and sidecar in one fresh PID namespace, under different UIDs.

As in Kubernetes with ``shareProcessNamespace: true``: the app runs as UID 65534, sidecar as
UID 1001 with only CAP_SYS_PTRACE (or with no capability at all).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.helpers import PYTHON, ROOT, free_port, wait_until

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"),
    reason="needs root, unshare and setpriv (util-linux) to build a PID namespace",
)

APP_UID = 65534
SIDECAR_UID = 1001


class Pod:
    def __init__(self, workdir: Path, capability: bool) -> None:
        self.port = free_port()
        self.log = workdir / "sidecar.log"
        caps = "+sys_ptrace" if capability else ""
        drop = (
            f"--inh-caps=-all{',' + caps if caps else ''} "
            f"--ambient-caps=-all{',' + caps if caps else ''} "
            f"--bounding-set=-all{',' + caps if caps else ''}"
        )
        app = (
            f"setpriv --reuid={APP_UID} --regid={APP_UID} --clear-groups "
            f"{shlex.quote(PYTHON)} -m targets.aiohttp_app > {workdir}/app.log 2>&1 &"
        )
        sidecar = (
            f"exec setpriv --reuid={SIDECAR_UID} --regid={SIDECAR_UID} --clear-groups "
            f"{drop} {shlex.quote(PYTHON)} -m sidecar serve --db {workdir}/pod.db "
            f"--port {self.port} --window 1 --match targets.aiohttp_app"
        )
        script = f"cd {shlex.quote(str(ROOT))} && {app} sleep 1; {sidecar}"
        with open(self.log, "w") as log:
            self.popen = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", script],
                stdout=subprocess.DEVNULL,
                stderr=log,
                text=True,
            )
        assert wait_until(self._up, timeout=30), self.log.read_text()

    def _up(self) -> bool:
        try:
            return self.get("/healthz")[0] == 200
        except OSError:
            return False

    def get(self, path: str) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return r.status, r.read().decode()

    def json(self, path: str) -> Any:
        return json.loads(self.get(path)[1])

    def app_pid_in_namespace(self) -> int:
        """The app's PID as the pod sees it (the last NSpid field, read from the host)."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            mine = str(self.popen.pid) in _ancestors(int(entry))
            if b"targets.aiohttp_app" in cmdline and f"Uid:\t{APP_UID}" in status and mine:
                nspid = next(x for x in status.splitlines() if x.startswith("NSpid:"))
                return int(nspid.split()[-1])
        raise AssertionError("the app is not running")

    def stop(self) -> None:
        """Kills the namespace's PID 1 (the child of unshare): the kernel then ends every
        process in the namespace. Stopping unshare alone would leave them running, and its
        --kill-child cannot help: the parent-death signal is cleared when setpriv changes UID.
        """
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.popen.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry), signal.SIGKILL)
        try:
            self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def _ancestors(pid: int) -> set[str]:
    out: set[str] = set()
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        out.add(str(pid))
    return out


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sidecar-pod-"))
    path.chmod(0o777)  # the sidecar runs as another UID
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_with_sys_ptrace_it_finds_and_profiles_the_app(workdir: Path) -> None:
    pod = Pod(workdir, capability=True)
    try:
        assert "CAP_SYS_PTRACE present" in pod.json("/healthz")["tracing"]
        assert wait_until(
            lambda: any(t["samples"] > 100 for t in pod.json("/api/targets")), timeout=20
        ), pod.json("/api/targets")
        (target,) = pod.json("/api/targets")
        assert target["framework"] == "aiohttp" and target["problem"] is None
        assert target["pid"] == pod.app_pid_in_namespace()  # the pod's PIDs, not the host's
        folded = pod.get(f"/api/profile?target={target['id']}")[1]
        assert "run_app (aiohttp/web.py:" in folded
    finally:
        pod.stop()


def test_without_the_capability_it_reports_and_keeps_running(workdir: Path) -> None:
    pod = Pod(workdir, capability=False)
    try:
        assert "no CAP_SYS_PTRACE" in pod.json("/healthz")["tracing"]

        def reported() -> bool:
            return any(t["problem"] for t in pod.json("/api/targets"))

        assert wait_until(reported, timeout=20), pod.json("/api/targets")
        (target,) = pod.json("/api/targets")
        assert "CAP_SYS_PTRACE" in target["problem"] and target["samples"] == 0
        health = pod.json("/healthz")
        assert health["status"] == "degraded"
        assert "CAP_SYS_PTRACE" in health["problems"][0]["error"]
        metrics = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(pod.get("/metrics")[1])
            for s in family.samples
        }
        assert metrics[("sidecar_untraceable_processes", (("reason", "permission"),))] == 1
        assert f"cannot sample PID {target['pid']}" in pod.log.read_text()
        assert "shareProcessNamespace" in pod.log.read_text()
        assert pod.popen.poll() is None  # still running, no crash loop
        assert pod.get("/healthz")[0] == 200
    finally:
        pod.stop()
