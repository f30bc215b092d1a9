"""The CPU goal: what ``sidecar serve`` costs per target at 100 Hz, everything included, and where.

``sidecar serve`` (defaults: 100 Hz, 10 s windows, SQLite) samples N ``targets/deep.py`` (an event
loop ~30 frames deep, 10 % on CPU). On the running service: its CPU per target (sampler threads
and Python threads), system calls per sample (``perf stat``) and where the CPU goes (``perf
record``, each sample put in a category by its kernel chain and user-space leaf). Then, each on
its own: a sampler's read and fold (``pauses.sample``), the two readers and the two clocks side by
side, classification and ``Store.write`` over the windows serve stored, the discovery scan, one
``process_vm_readv`` after a sleep, and the machine's floor (``floor.native_floor``).
"""

from __future__ import annotations

import ctypes
import os
import re
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import floor, pauses, store
from benchmarks.common import serve, thread_cpu
from benchmarks.procs import load_average
from sidecar import _native
from sidecar.classify.threads import classify
from sidecar.discover import Selection, scan
from sidecar.serve.sessions import Session, Sessions
from sidecar.store import ProcessRecord, Store
from tests.support.procs import Procs

WINDOW = 10
RATE = 100.0
#: serve's CPU is measured over this many equal parts of the measured time; the median counts
CPU_ROUNDS = 4
SYSCALLS = ("process_vm_readv", "openat", "read", "getdents64", "close", "ptrace", "wait4")

Log = Callable[[str], None]


def perf_stat(pid: int, seconds: float) -> dict[str, int]:
    """System calls of ``pid`` over ``seconds``, by name."""
    events = ",".join(f"syscalls:sys_enter_{name}" for name in SYSCALLS)
    argv = ["perf", "stat", "-x,", "-e", events, "-p", str(pid), "--", "sleep", f"{seconds:g}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
    counts: dict[str, int] = {}
    for line in done.stderr.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[2].startswith("syscalls:sys_enter_") and parts[0].isdigit():
            counts[parts[2].removeprefix("syscalls:sys_enter_")] = int(parts[0])
    return counts


# -- perf profile categories ---------------------------------------------------------------

COPY = ("copy_page_to_iter", "_copy_to_iter", "copy_user_generic", "rep_movs_alternative")
PAGES = ("get_user_pages", "pin_user_pages", "mm_access", "unpin_user_page", "follow_page", "gup_")
PROC_CALLS = ("sys_openat", "sys_read", "sys_getdents64", "sys_close", "sys_newfstatat",
              "sys_statx")  # fmt: skip
LIBC_PROC = ("open64", "open", "libc_open64", "openat", "read", "libc_read", "close",
             "libc_close", "opendir", "readdir64", "readdir", "getdents64", "closedir", "fstat",
             "statx", "GI___readdir64", "GI___close")  # fmt: skip
SLEEP = ("nanosleep", "futex", "schedule", "sched_yield", "poll", "epoll", "select")
ALLOC = re.compile(
    r"_*(libc_|GI_)*(malloc|calloc|realloc|free|cfree|int_malloc|int_free|int_realloc"
    r"|unlink_chunk|malloc_consolidate|tcache|memalign)"
)

#: Categories in report order: key → label.
CATEGORIES = {
    "vm_copy": "process_vm_readv: copying the bytes",
    "vm_pages": "process_vm_readv: finding and pinning the pages (VMA lookup, GUP, mm access)",
    "vm_call": "process_vm_readv: syscall entry and exit, iovecs, tracing hooks",
    "proc_io": "/proc reads: open, read, list and close of /proc/PID/task/*/stat",
    "proc_regex": "/proc stat parsing: remoteprocess's regex",
    "ptrace": "ptrace stop and resume (blocking mode)",
    "line_numbers": "py-spy: line numbers from line tables",
    "pyspy": "py-spy: frame walk, strings, other",
    "walker": "sidecar's frame walker (CPython 3.11): frames, code checks, cached folding",
    "alloc": "malloc / free (any caller)",
    "fold": "sidecar's sampling loop: folding (frame cache, hashing), windows, /proc checks",
    "sleep": "sleeping and waking (timers, futexes, scheduler)",
    "kernel_other": "kernel, other",
    "native_other": "native thread, other user space (memcpy, memcmp, threading)",
    "unresolved": "native thread, symbols unresolved (library replaced on disk meanwhile?)",
    "python": "Python threads: interpreter (classify, store, discovery, HTTP)",
    "sqlite": "Python threads: SQLite",
    "python_kernel": "Python threads: kernel",
    "python_other": "Python threads: other libraries",
}  # fmt: skip


def _has(names: tuple[str, ...]) -> Callable[[str], bool]:
    return lambda text: any(name in text for name in names)


#: A sampler thread's sample with a kernel chain: the first rule that matches the chain (joined).
KERNEL_RULES: list[tuple[Callable[[str], bool], str]] = [
    (lambda c: "process_vm_r" in c and _has(COPY)(c), "vm_copy"),
    (lambda c: "process_vm_r" in c and _has(PAGES)(c), "vm_pages"),
    (_has(("process_vm_r",)), "vm_call"),
    (_has(PROC_CALLS), "proc_io"),
    (_has(("ptrace", "wait4", "sys_wait")), "ptrace"),
    (_has(SLEEP), "sleep"),
]
#: Then, or without a kernel chain, the first that matches the user-space leaf (symbol, dso).
LEAF_RULES: list[tuple[Callable[[str, str], bool], str]] = [
    (lambda sym, dso: sym == "process_vm_readv", "vm_call"),
    (lambda sym, dso: "regex" in sym, "proc_regex"),
    (lambda sym, dso: "libc" in dso and bool(ALLOC.match(sym)), "alloc"),
    (lambda sym, dso: "libc" in dso and sym.lstrip("_").split("@")[0] in LIBC_PROC, "proc_io"),
    (lambda sym, dso: "libc" in dso and ("ptrace" in sym or "wait" in sym), "ptrace"),
    (lambda sym, dso: "libc" in dso and _has(SLEEP)(sym), "sleep"),
    (lambda sym, dso: sym in ("", "[unknown]"), "unresolved"),
    (lambda sym, dso: "get_line_number" in sym, "line_numbers"),
    (lambda sym, dso: _has(("py_spy", "remoteprocess", "read_process_memory"))(sym), "pyspy"),
    (lambda sym, dso: "walker::" in sym, "walker"),
    (lambda sym, dso: "_native" in dso, "fold"),
]


def categorize(comm: str, frames: list[tuple[str, str]]) -> str:
    """One perf sample's category from its thread name and (symbol, dso) frames, leaf first."""
    kernel = " ".join(sym for sym, dso in frames if dso == "[kernel.kallsyms]")
    leaf, dso = next(((s, d) for s, d in frames if d != "[kernel.kallsyms]"), ("", ""))
    if not comm.startswith("sidecar-sampl"):
        return ("python_kernel" if kernel else "sqlite" if "sqlite" in dso else
                "python" if "python" in dso else "python_other")  # fmt: skip
    if kernel:
        if rule := next((k for match, k in KERNEL_RULES if match(kernel)), None):
            return rule
        if leaf == "process_vm_readv":
            return "vm_call"  # the kernel chain was cut short at syscall entry
        return "proc_io" if leaf.lstrip("_") in LIBC_PROC else "kernel_other"
    return next((k for match, k in LEAF_RULES if match(leaf, dso)), "native_other")


def parse_perf_script(text: str) -> Counter[str]:
    """Samples per category from ``perf script -F comm,tid,ip,sym,dso`` output."""
    counts: Counter[str] = Counter()
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        comm = lines[0].rsplit(None, 1)[0].strip() if len(lines[0].split()) > 1 else lines[0]
        frames = []
        for line in lines[1:]:
            match = re.match(r"\s*[0-9a-f]+ (.*) \((.*)\)$", line)
            if match:
                frames.append((re.sub(r"\+0x[0-9a-f]+$", "", match[1]), match[2]))
        counts[categorize(comm, frames)] += 1
    return counts


def perf_profile(pid: int, seconds: float, workdir: Path) -> dict[str, int]:
    data = workdir / "perf.data"
    argv = ["perf", "record", "-q", "-e", "cpu-clock", "-g", "-p", str(pid), "-o", str(data)]
    subprocess.run([*argv, "--", "sleep", f"{seconds:g}"], capture_output=True,
                   timeout=seconds + 60, check=True)  # fmt: skip
    script = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,tid,ip,sym,dso"],
                            capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    data.unlink()
    return dict(parse_perf_script(script.stdout))


# -- per-window parts ----------------------------------------------------------------------


def stored_windows(db: Path) -> list[tuple[int, dict[str, Any]]]:
    """The windows serve stored, as (target id, sampler window) in time order."""
    with store.readonly(db) as conn:
        query = "SELECT window, target_id, SUM(ticks) FROM windows GROUP BY window, target_id"
        ticks = {(int(w), int(t)): int(n) for w, t, n in conn.execute(query).fetchall()}
    return [(target, {"start": float(window), "end": float(window + WINDOW),
                      "samples": ticks.get((window, target), 0),
                      "stacks": [_native.Row(thread_id=thread, thread_name="", count=count,
                                             on_cpu=state == "busy", stack=text)
                                 for text, thread, state, count in rows]})
            for (window, target), rows in sorted(store.stored(db).items())]  # fmt: skip


def time_windows(windows: list[tuple[int, dict[str, Any]]], workdir: Path) -> dict[str, Any]:
    """Classification (serve's ``Sessions._batch``) and ``Store.write`` per stored window."""
    sessions = Sessions(None, Selection(), rate_hz=RATE, window=WINDOW)  # type: ignore[arg-type]
    writer = Store(workdir / "timing.db")
    session_of: dict[int, Session] = {}
    times: dict[str, list[float]] = {k: [] for k in ("cold", "warm", "write_first", "write")}

    def timed(key: str, fn: Callable[[], Any]) -> Any:
        began = time.perf_counter()
        out = fn()
        times[key].append(time.perf_counter() - began)
        return out

    try:
        for target, window in windows:
            first = target not in session_of
            if first:
                key = (900_000 + target, 1)
                writer.attach(ProcessRecord(key[0], key[1], f"target {target}", time.time()))
                session_of[target] = Session(key, "", None, "unknown", "asyncio", 0.0)  # type: ignore[arg-type]
            session = session_of[target]
            classify.cache_clear()
            timed("cold", lambda: sessions._batch(session, window))  # noqa: B023
            batch = timed("warm", lambda: sessions._batch(session, window))  # noqa: B023
            timed("write_first" if first else "write", lambda: writer.write([batch]))  # noqa: B023
    finally:
        writer.close()
    return {
        "windows": len(windows),
        "ticks_median": statistics.median(w["samples"] for _, w in windows) if windows else 0,
        "rows_median": statistics.median(len(w["stacks"]) for _, w in windows) if windows else 0,
        "classify_cold": times["cold"], "classify_warm": times["warm"],
        "write_first": times["write_first"], "write": times["write"],
    }  # fmt: skip


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def wake_penalty(pid: int, ticks: int = 300, calls: int = 8) -> dict[str, float]:
    """What one ``process_vm_readv`` of 64 bytes of the target's heap costs (median ns): the
    first after a 10 ms sleep (a sampler's tick at 100 Hz), the later ones of the same tick,
    and back to back without sleeping; and a trivial system call right after waking."""
    libc = ctypes.CDLL(None, use_errno=True)
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    heap = next(int(line.split("-")[0], 16) for line in maps if line.endswith("[heap]"))
    buf = ctypes.create_string_buffer(64)
    local, remote = _IoVec(ctypes.addressof(buf), 64), _IoVec(heap, 64)

    def read() -> int:
        began = time.perf_counter_ns()
        libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        return time.perf_counter_ns() - began

    first, later, other, trivial = [], [], [], []
    for _ in range(ticks):
        time.sleep(0.01)
        began = time.perf_counter_ns()
        os.getppid()
        trivial.append(time.perf_counter_ns() - began)
        first.append(read())
        later += [read() for _ in range(calls - 1)]
    for _ in range(ticks):
        other += [read() for _ in range(calls)]
    return {"first_after_sleep": statistics.median(first),
            "later_after_sleep": statistics.median(later),
            "back_to_back": statistics.median(other),
            "syscall_after_sleep": statistics.median(trivial)}  # fmt: skip


def time_discovery(pids: list[int], repeat: int = 10) -> list[float]:
    out, selection = [], Selection(pids=frozenset(pids))
    for _ in range(repeat):
        began = time.perf_counter()
        scan(selection)
        out.append(time.perf_counter() - began)
    return out


def run(
    procs: Procs, workdir: Path, *, targets: int, seconds: float, warmup: float,
    perf_seconds: float, log: Log,
) -> dict[str, Any]:  # fmt: skip
    lifetime = str(warmup + seconds + perf_seconds + 120)
    deep = [procs.target("deep", "--seconds", lifetime)[0] for _ in range(targets)]
    pids = [child.pid for child in deep]
    db = workdir / "cost.db"
    server = serve(procs, pids, db, RATE, WINDOW)
    time.sleep(warmup)
    # in rounds, as the machine's own load moves the figure between them
    load0, rounds = load_average(), []
    for _ in range(CPU_ROUNDS):
        cpu0, t0 = thread_cpu(server.pid), time.monotonic()
        time.sleep(seconds / CPU_ROUNDS)
        cpu1, t1 = thread_cpu(server.pid), time.monotonic()
        rounds.append({part: (cpu1[part] - cpu0[part]) / (t1 - t0) for part in cpu0})
    load1 = load_average()
    per_round = [sum(r.values()) / targets for r in rounds]
    cpu = rounds[per_round.index(statistics.median_low(per_round))]
    per_target = sum(cpu.values()) / targets
    log(f"serve on {targets} targets: {per_target:.3%} of a core per target (sampler threads "
        f"{cpu['sampler'] / targets:.3%}; rounds {', '.join(f'{r:.3%}' for r in per_round)}) · "
        f"load {load0:.1f}–{load1:.1f}")  # fmt: skip
    syscalls, stat_seconds = perf_stat(server.pid, 5.0), 5.0
    profile = perf_profile(server.pid, perf_seconds, workdir)
    procs.stop(server)
    timing = time_windows(stored_windows(db), workdir)
    log(f"timed classification and writes over {timing['windows']} stored windows")

    def sample(pid: Any, seconds: float = 5, **kwargs: Any) -> dict[str, Any]:
        return pauses.sample(procs, pid, rate_hz=RATE, seconds=seconds, rt=None, **kwargs)

    sampler = sample(pids[0], 6, blocking=False)
    blocking = sample(pids[0], 6, blocking=True)
    # the two readers side by side on one target, and every target on its own sampling thread
    # against all on the shared clock: alternating, three rounds each
    readers: dict[str, list[dict[str, Any]]] = {"auto": [], "py-spy": []}
    clocks: dict[str, list[dict[str, Any]]] = {"own": [], "shared": []}
    for _ in range(3):
        for reader, runs in readers.items():
            runs.append(sample(pids[0], blocking=False, reader=reader))
        for clock, runs in clocks.items():
            runs.append(sample(pids, blocking=False, clock=clock))
        log("clocks: " + ", ".join(f"{clock} {runs[-1]['thread_cpu_per_sample'] * 1e6:.1f} µs "
                                   "per sample" for clock, runs in clocks.items()))  # fmt: skip
    # the machine's floor: a native thread that only wakes, one that reads 64 bytes, and one
    # whose read has the shape of the walker's on the shared clock
    last = clocks["shared"][-1]
    shape = (round(last["read_pieces"]), round(last["read_bytes"]))
    machine_floor = floor.native_floor(procs, pids[0], rate=RATE, seconds=5, rt=None,
                                       shape=shape if shape[0] else None)  # fmt: skip
    log(f"floor: waking {machine_floor['sleep']['cpu_per_tick_us']:.1f} µs CPU per tick, with "
        f"one read {machine_floor['read']['cpu_per_tick_us']:.1f} µs")  # fmt: skip
    discovery, wake = time_discovery(pids), wake_penalty(pids[0])
    log(
        "process_vm_readv: first after a 10 ms sleep {first_after_sleep:,.0f} ns, later "
        "{later_after_sleep:,.0f} ns, back to back {back_to_back:,.0f} ns".format(**wake)
    )
    for child in deep:
        procs.stop(child)
    return {
        "targets": targets, "rate_hz": RATE, "window": WINDOW, "seconds": seconds,
        "warmup": warmup, "load": [load0, load1], "cpu": cpu, "cpu_per_target": per_target,
        "cpu_per_target_rounds": per_round, "syscalls": syscalls, "syscall_seconds": stat_seconds,
        "perf": profile, "perf_seconds": perf_seconds, "timing": timing, "sampler": sampler,
        "sampler_blocking": blocking, "readers": readers, "clocks": clocks,
        "floor": machine_floor, "wake": wake, "discovery": discovery,
    }  # fmt: skip
