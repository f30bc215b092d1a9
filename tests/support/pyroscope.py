"""A real Grafana Pyroscope for the push tests: built once from the Go module proxy by
tests/pyroscope.sh (cached in .cache/pyroscope), run as one process (``-target=all``) on
127.0.0.1 with its data in a temporary folder, queried back through its querier API."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.procs import ROOT, free_port, stop_process, wait_until

PERIOD_NS = 10_000_000  # one sample at 100 Hz


def build() -> Path:
    """The pyroscope binary, built the first time (minutes on two cores)."""
    done = subprocess.run(
        [str(ROOT / "tests" / "pyroscope.sh")],
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert done.returncode == 0, f"tests/pyroscope.sh failed:\n{done.stderr[-4000:]}"
    return Path(done.stdout.strip().splitlines()[-1])


class Pyroscope:
    """One Pyroscope process; ``stop`` and ``start`` again keep its ports and its data."""

    def __init__(self, binary: Path, data: Path) -> None:
        self.binary = binary
        self.data = data
        self.port = free_port()
        self.grpc_port = free_port()
        self.memberlist_port = free_port()
        self.popen: subprocess.Popen[bytes] | None = None
        self.log = data / "pyroscope.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def args(self) -> list[str]:
        here = "127.0.0.1"
        return [
            str(self.binary),
            "-target=all",
            "-usage-stats.enabled=false",
            "-tracing.enabled=false",
            "-self-profiling.disable-push=true",
            f"-pyroscopedb.data-path={self.data / 'db'}",
            "-storage.backend=filesystem",
            f"-storage.filesystem.dir={self.data / 'bucket'}",
            f"-server.http-listen-address={here}",
            f"-server.http-listen-port={self.port}",
            f"-server.grpc-listen-address={here}",
            f"-server.grpc-listen-port={self.grpc_port}",
            f"-memberlist.bind-addr={here}",
            f"-memberlist.bind-port={self.memberlist_port}",
            f"-memberlist.advertise-addr={here}",
            f"-memberlist.advertise-port={self.memberlist_port}",
            "-memberlist.leave-timeout=1s",
            "-memberlist.nodename=pyroscope-test",
            # /ready answers once the ingester is in the ring, not 15 s later: that delay only
            # paces a rolling update, and this one process is the whole cluster
            "-ingester.min-ready-duration=0s",
            f"-distributor.ring.instance-addr={here}",
            f"-ingester.lifecycler.addr={here}",
            f"-overrides-exporter.ring.instance-addr={here}",
            f"-query-frontend.instance-addr={here}",
            f"-query-scheduler.ring.instance-addr={here}",
            f"-store-gateway.sharding-ring.instance-addr={here}",
            f"-compactor.ring.instance-addr={here}",
        ]

    def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(
                self.args(), cwd=self.data, stdout=log, stderr=subprocess.STDOUT
            )
        assert wait_until(self.ready, timeout=90, interval=0.5), self.tail()

    def ready(self) -> bool:
        assert self.popen is not None
        if self.popen.poll() is not None:
            raise AssertionError(f"pyroscope exited:\n{self.tail()}")
        try:
            with urllib.request.urlopen(self.url + "/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.HTTPError):
            return False

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stops it as an orchestrator would (SIGTERM, then SIGKILL after a while)."""
        if self.popen is not None:
            stop_process(self.popen, signal.SIGTERM, timeout=60)

    def call(self, method: str, body: dict[str, Any]) -> Any:
        """A querier API call (Connect with a JSON body)."""
        request = urllib.request.Request(
            f"{self.url}/querier.v1.QuerierService/{method}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())

    def flamegraph(self, profile_type: str, selector: str, start: float, end: float) -> Any:
        """The merged flamegraph of a selector over [start, end) (unix seconds)."""
        doc = self.call(
            "SelectMergeStacktraces",
            {
                "profileTypeID": profile_type,
                "labelSelector": selector,
                "start": int(start * 1000),
                "end": int(end * 1000) - 1,  # Pyroscope's end is inclusive
            },
        )
        return doc.get("flamegraph", {})

    def total(self, profile_type: str, selector: str, start: float, end: float) -> int:
        return int(self.flamegraph(profile_type, selector, start, end).get("total", 0) or 0)

    def names(self, profile_type: str, selector: str, start: float, end: float) -> set[str]:
        return set(self.flamegraph(profile_type, selector, start, end).get("names", []))

    def label_values(self, name: str, selector: str, start: float, end: float) -> set[str]:
        doc = self.call(
            "LabelValues",
            {
                "name": name,
                "matchers": [selector],
                "start": int(start * 1000),
                "end": int(end * 1000) - 1,
            },
        )
        return set(doc.get("names", []))


def wait_pushed(check: Any, timeout: float = 60.0) -> bool:
    """Waits for a condition on what Pyroscope answers, which lags a push by a moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except (OSError, urllib.error.HTTPError):
            pass
        time.sleep(1.0)
    return False
