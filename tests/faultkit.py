"""Tools of the fault and abuse suite (tests/test_faults.py, test_storage_faults.py,
test_hostile_http.py, test_scale.py, test_soak.py): a ``sidecar serve`` that logs to a file,
/proc readings of a process (state, tracer, memory), database checks, and the ledger behind
tests/reports/faults.md.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import re
import signal
import sqlite3
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import PYTHON, REPORTS, ROOT, free_port, wait_until
from prometheus_client.parser import text_string_to_metric_families

LEDGER = REPORTS / "faults.json"
SUMMARY = REPORTS / "faults.md"
#: Entries recorded in this pytest session (the terminal summary prints them).
RECORDED: list[str] = []


# -- a sidecar serve ------------------------------------------------------------------------


class Sidecar:
    """``sidecar serve`` as a real process on a free loopback port; stderr goes to a file, so a
    long run never blocks on a full pipe."""

    def __init__(
        self,
        db: Path,
        *args: str,
        log: Path | None = None,
        token: str | None = None,
        wait: bool = True,
    ) -> None:
        self.db = db
        self.port = free_port()
        self.token = token
        self.log = log or db.with_name(db.name + f".{self.port}.log")
        self.argv = [
            PYTHON,
            "-m",
            "sidecar",
            "serve",
            "--db",
            str(db),
            "--port",
            str(self.port),
            *args,
        ]
        with open(self.log, "w") as handle:
            self.popen = subprocess.Popen(
                self.argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=handle, text=True
            )
        if wait:
            assert wait_until(self.up, timeout=30), self.log_text()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def up(self) -> bool:
        if self.popen.poll() is not None:
            raise AssertionError(f"sidecar exited {self.popen.returncode}: {self.log_text()}")
        try:
            return self.request("/healthz", timeout=5)[0] == 200
        except OSError:
            return False

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def request(
        self,
        path: str,
        token: str | None = None,
        timeout: float = 30,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes, dict[str, str]]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if token or self.token:
            req.add_header("Authorization", f"Bearer {token or self.token}")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                return (
                    response.status,
                    response.read(),
                    {k.lower(): v for k, v in response.headers.items()},
                )
        except urllib.error.HTTPError as err:
            return err.code, err.read(), {k.lower(): v for k, v in err.headers.items()}

    def json(self, path: str, timeout: float = 30) -> Any:
        status, body, _ = self.request(path, timeout=timeout)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def targets(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.json("/api/targets")
        return result

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self.json("/healthz")
        return result

    def metric(self, name: str) -> float:
        return metrics(self.request("/metrics")[1].decode()).get(name, float("nan"))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        return self.popen.wait(timeout=timeout)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=30)


class Sidecars:
    """Starts sidecars for one test; none outlives it."""

    def __init__(self) -> None:
        self.started: list[Sidecar] = []

    def __call__(self, db: Path, *args: str, **kwargs: Any) -> Sidecar:
        server = Sidecar(db, *args, **kwargs)
        self.started.append(server)
        return server

    def close(self) -> None:
        for server in self.started:
            server.kill()


def metrics(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus exposition, by name."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.labels:
                out[sample.name] = float(sample.value)
    return out


# -- a process seen through /proc -----------------------------------------------------------


def thread_states(pid: int) -> dict[int, tuple[str, int]]:
    """(state letter, TracerPid) of every thread of ``pid``; empty once it is gone."""
    out: dict[int, tuple[str, int]] = {}
    for path in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        state = re.search(r"^State:\s+(\S)", text, re.M)
        tracer = re.search(r"^TracerPid:\s+(\d+)", text, re.M)
        if state and tracer:
            out[int(path.split("/")[4])] = (state[1], int(tracer[1]))
    return out


def left_stopped_or_traced(pid: int) -> dict[int, tuple[str, int]]:
    """Threads of ``pid`` that are stopped (T, t) or still have a tracer."""
    return {tid: st for tid, st in thread_states(pid).items() if st[0] in "Tt" or st[1] != 0}


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` from /proc/PID/status (VmRSS)."""
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(match[1]) * 1024 if match else 0


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


# -- the database ---------------------------------------------------------------------------


def query(db: Path, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows of a read-only query on a sidecar database (the writer may be running)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return list(conn.execute(sql, tuple(params)).fetchall())
    finally:
        conn.close()


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db, timeout=10)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def window_ticks(db: Path) -> dict[tuple[int, int, int], int]:
    """(window, target, process) → ticks of every committed window."""
    rows = query(db, "SELECT window, target_id, process_id, ticks FROM windows")
    return {(w, t, p): n for w, t, p, n in rows}


# -- the report -----------------------------------------------------------------------------


@dataclass
class Entry:
    """What one test of the suite did: rounds, faults injected, inputs tried, what was lost."""

    test: str
    area: str
    rounds: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    inputs: int = 0
    lost: str = "nothing"
    notes: list[str] = field(default_factory=list)

    def fault(self, name: str, count: int = 1) -> None:
        self.faults[name] = self.faults.get(name, 0) + count

    def note(self, text: str) -> None:
        self.notes.append(text)


AREAS = (
    "never hurt the target",
    "target faults",
    "scale of the target",
    "storage faults",
    "hostile HTTP input",
    "soak",
)


def record(entry: Entry) -> None:
    """Adds a finished test's entry to the ledger and rewrites tests/reports/faults.md."""
    REPORTS.mkdir(parents=True, exist_ok=True)
    try:
        ledger: dict[str, Any] = json.loads(LEDGER.read_text())
    except (OSError, ValueError):
        ledger = {}
    data = entry.__dict__ | {"at": datetime.datetime.now().isoformat(timespec="seconds")}
    ledger[entry.test] = data
    LEDGER.write_text(json.dumps(ledger, indent=1, sort_keys=True))
    SUMMARY.write_text(render(ledger))
    RECORDED.append(entry.test)


def render(ledger: dict[str, Any]) -> str:
    rows = sorted(
        ledger.values(),
        key=lambda e: (AREAS.index(e["area"]) if e["area"] in AREAS else 99, e["test"]),
    )
    rounds = sum(e["rounds"] for e in rows)
    faults = sum(sum(e["faults"].values()) for e in rows)
    inputs = sum(e["inputs"] for e in rows)
    lost = [e for e in rows if e["lost"] != "nothing"]
    lines = [
        "# Fault and abuse suite: summary",
        "",
        "Written by the tests marked `faults` (tests/test_faults.py, test_storage_faults.py, "
        "test_hostile_http.py, test_scale.py, test_soak.py) as they pass; each row is the "
        "latest run of that test. Nothing lost means: no sample, window or process the sidecar "
        "had was missing or attributed elsewhere afterwards.",
        "",
        f"**{len(rows)} tests · {rounds:,} rounds · {faults:,} faults injected · "
        f"{inputs:,} hostile inputs tried · lost: "
        f"{'nothing' if not lost else ', '.join(e['test'] + ': ' + e['lost'] for e in lost)}**",
        "",
        "| area | test | rounds | faults injected | inputs | lost | run at |",
        "|---|---|---:|---|---:|---|---|",
    ]
    for e in rows:
        injected = ", ".join(f"{name} ×{n}" for name, n in sorted(e["faults"].items())) or "–"
        lines.append(
            f"| {e['area']} | `{e['test']}` | {e['rounds']} | {injected} | {e['inputs']} | "
            f"{e['lost']} | {e['at']} |"
        )
    notes = [(e["test"], n) for e in rows for n in e["notes"]]
    if notes:
        lines += ["", "## Observations", ""]
        lines += [f"- `{test}`: {text}" for test, text in notes]
    return "\n".join(lines) + "\n"


def pids_alive(pids: Iterable[int]) -> list[int]:
    return [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
