"""What the benchmark scripts share: CPU time from /proc, and their command line."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks.procs import load_average, machine
from benchmarks.table import Report
from tests.support.procs import PYTHON, Child, Procs
from tests.support.pythons import find_pythons

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_seconds(pid: int | str = "self") -> dict[str, float]:
    """CPU seconds so far of each thread name of a process, from the scheduler's nanosecond
    run time (utime and stime in /proc count 10 ms ticks)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            seconds = int((task / "schedstat").read_text().split()[0]) / 1e9
        except OSError:
            continue  # the thread ended meanwhile
        out[comm] = out.get(comm, 0.0) + seconds
    return out


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of the process's native sampler threads and of all the others."""
    threads = thread_seconds(pid)
    sampler = sum(s for name, s in threads.items() if name.startswith("sidecar-sampl"))
    return {"sampler": sampler, "python": sum(threads.values()) - sampler}


def sampler_thread_seconds(names: tuple[str, ...] = ("sidecar-sampl", "sidecar-tasks")) -> float:
    """CPU seconds of this process's sampling threads so far: the thread samplers' and the task
    scans' (``sidecar-tasks``), or those whose names begin with one of ``names``."""
    return sum(s for name, s in thread_seconds().items() if name.startswith(names))


def serve(procs: Procs, pids: list[int], db: Path, rate: float, window: int, *extra: str) -> Child:
    """``sidecar serve`` of ``pids`` into ``db`` (on a free port unless ``extra`` names one),
    once it serves."""
    argv = [PYTHON, "-m", "sidecar", "serve", "--db", str(db), "--rate", f"{rate:g}", "--window",
            str(window), "--log-level", "warning", *extra, *(() if "--port" in extra else
            ("--port", "0")), *(a for pid in pids for a in ("--pid", str(pid)))]  # fmt: skip
    child = procs.start(argv)
    child.wait_for(r"serving http", stream="err")
    return child


def sampled(samplers: list[Any], warmup: float, seconds: float) -> tuple[float, list[Any]]:
    """Runs started samplers for ``seconds`` after ``warmup``: the CPU seconds of this process's
    sampling threads meanwhile, and (before, after) ``stats()`` of each sampler."""
    time.sleep(warmup)
    cpu0, before = sampler_thread_seconds(), [s.stats() for s in samplers]
    time.sleep(seconds)
    cpu1, after = sampler_thread_seconds(), [s.stats() for s in samplers]
    return cpu1 - cpu0, list(zip(before, after, strict=True))


def pythons(versions: Iterable[str]) -> dict[str, str]:
    """The interpreters of ``versions`` (tests/pythons.py), or exit naming the missing ones."""
    found = find_pythons()
    if missing := [v for v in versions if v not in found]:
        raise SystemExit(f"no interpreter for {', '.join(missing)}: run `make pythons` first")
    return {v: str(found[v]) for v in versions}


def stamp() -> dict[str, Any]:
    """When and where a run was measured, and the load average at its end."""
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    return {"when": when, "machine": machine(), "load_average": load_average()}


def measured(data: dict[str, Any]) -> str:
    """The opening of a report written from a ``stamp()``ed run."""
    cpu = data["machine"].get("cpu", "this machine")
    return f"Measured {data['when']} ({cpu}), load average {data['load_average']:.2f}"


Options = dict[str, Any]


def main(
    doc: str,
    name: str,
    measure: Callable[[argparse.Namespace, Path], dict[str, Any]],
    write: Callable[[dict[str, Any], Report], object],
    options: Options,
) -> int:
    """A benchmark's command line: ``options`` (flag → default, or (default, help)), then
    ``measure(args, workdir)``'s figures saved as NAME.json and NAME.md written from them by
    ``write(figures, report)``; ``--from-json`` writes the report from saved figures instead,
    ``--out`` puts both in another folder."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for flag, value in options.items():
        default, helps = value if isinstance(value, tuple) else (value, None)
        kind = str if isinstance(default, str) or default is None else type(default)
        if kind is bool:
            parser.add_argument(flag, action="store_true", help=helps)
        else:
            parser.add_argument(flag, type=kind, default=default, help=helps)
    parser.add_argument("--from-json", type=Path, help="write the report from these figures")
    parser.add_argument("--out", type=Path, help="folder of the report and its JSON")
    args = parser.parse_args()
    report = Report(name, args.out)
    if args.from_json:
        figures = json.loads(args.from_json.read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="sidecar-bench-") as tmp:
            figures = measure(args, Path(tmp))
        report.save(figures)
    write(figures, report)
    print(report.write(), end="")
    print(f"wrote {report.md}")
    return 0
