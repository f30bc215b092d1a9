"""Tools of the fault and abuse suite (tests/faults/test_faults.py, test_storage_faults.py,
test_hostile_http.py, test_resource_limits.py, test_scale.py, test_soak.py,
test_large_inputs.py): /proc readings of a process (state, tracer, memory), database checks,
and the ledger behind tests/reports/faults.md. The suite's ``sidecar serve`` is ``helpers.Serve``.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.helpers import REPORTS

LEDGER = REPORTS / "faults.json"
SUMMARY = REPORTS / "faults.md"
#: Entries recorded in this pytest session (the terminal summary prints them).
RECORDED: list[str] = []


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
    "hostile files",
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
        "Written by the tests marked `faults` (tests/faults/: test_faults.py, "
        "test_storage_faults.py, test_hostile_http.py, test_hostile_numbers.py, "
        "test_resource_limits.py, test_scale.py, test_soak.py) as they pass; "
        "each row is the "
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
