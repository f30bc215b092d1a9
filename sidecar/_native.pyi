"""The native core (Rust, PyO3): the sampler, the flamegraph renderers and readers, diff counts.

Everything crossing this boundary is a plain Python type. Blocking work runs with the GIL released.
"""

from collections.abc import Iterable
from types import TracebackType
from typing import Literal, TypedDict, final

__all__ = [
    "BLOCKED_LEAF",
    "CALLBACK_RUNNERS",
    "CPU_WAIT_LEAF",
    "DEFAULT_RATE_HZ",
    "DEFAULT_SLOW_MS",
    "DEFAULT_STALL_MS",
    "DEFAULT_WINDOW_S",
    "GIL_LEAF",
    "IDLE_LEAF",
    "KNOWN_WAITS",
    "LOOP_ENTRIES",
    "LOOP_PASSES",
    "NO_ROUTE",
    "PRUNED_FRAME",
    "REQUEST_ROOTS",
    "SEMICOLON_STANDIN",
    "TASK_LEAVES",
    "TASK_SCAN_BUDGET",
    "Row",
    "Sampler",
    "SamplerError",
    "decode_pprof",
    "diff_shares",
    "dump_threads",
    "encode_pprof",
    "encode_push_request",
    "frame_names",
    "process_start_time",
    "read_svg",
    "record_reads",
    "render_svg",
    "return_large_allocations",
    "scan_tasks",
]

#: Samples per second when none is asked for.
DEFAULT_RATE_HZ: float
#: Seconds per window of a sampler when none is asked for.
DEFAULT_WINDOW_S: float
#: The shortest stall of an event loop a sampler reports when none is asked for (ms).
DEFAULT_STALL_MS: float
#: The shortest slow request a sampler reports when none is asked for (ms).
DEFAULT_SLOW_MS: float
#: The share of the time task scans (on a thread of their own) may take: a longer scan puts the
#: next off.
TASK_SCAN_BUDGET: float

# The rules the native side uses, defined once in it (native/src/rules.rs) and exported so the
# Python definitions can be checked against them (tests/unit/test_native_rules.py).
#: The leaf of a sample off CPU in an idle wait.
IDLE_LEAF: str
#: The leaf of a loop thread's sample off CPU anywhere else.
BLOCKED_LEAF: str
#: The leaf of a thread waiting for the GIL another thread holds.
GIL_LEAF: str
#: The leaf of a thread runnable but waiting for a CPU.
CPU_WAIT_LEAF: str
#: The leaves of task stacks: "[running]", "[ready]", "[waiting]".
TASK_LEAVES: tuple[str, str, str]
#: The frame an SVG's top-level frames too narrow to draw become.
PRUNED_FRAME: str
#: What a ';' in a frame's name is written as in folded stacks read from an SVG.
SEMICOLON_STANDIN: str
#: The frames a running thread is idle in (py-spy's rule): (the last part of the function's
#: qualified name, how its file is matched, the text matched) each.
KNOWN_WAITS: tuple[tuple[str, Literal["endswith", "contains"], str], ...]
#: The frames that enter an event loop, asyncio's runner of one callback, and asyncio's pass of
#: its loop: (function's last name part, file suffix; "" any file) each.
LOOP_ENTRIES: tuple[tuple[str, str], ...]
CALLBACK_RUNNERS: tuple[tuple[str, str], ...]
LOOP_PASSES: tuple[tuple[str, str], ...]
#: The root coroutines of request tasks: (framework, the text their frames begin with) each.
REQUEST_ROOTS: tuple[tuple[str, str], ...]
#: The route of a request no route matched (yet), in its task stacks' route frame.
NO_ROUTE: str

class SamplerError(RuntimeError):
    """The sampler could not read the target (not a Python process, unsupported version, ...)."""

@final
class Row:
    """One row of a window: one thread's stack in one state, with its samples."""

    def __new__(
        cls,
        *,
        thread_id: int,
        thread_name: str,
        on_cpu: bool,
        stack: str,
        count: int,
        gil: bool = False,
        gc: bool = False,
        cpu_wait: bool = False,
    ) -> Row: ...
    @property
    def thread_id(self) -> int: ...
    @property
    def thread_name(self) -> str:
        """Empty until the target's threading module names the thread"""
    @property
    def on_cpu(self) -> bool: ...
    @property
    def gil(self) -> bool:
        """waiting for the GIL that another thread holds"""
    @property
    def gc(self) -> bool:
        """collecting garbage (the thread holds the GIL)"""
    @property
    def cpu_wait(self) -> bool:
        """on CPU as the OS says, but waiting for a CPU (runnable while the kernel runs another)"""
    @property
    def stack(self) -> str:
        """folded, root first"""
    @property
    def count(self) -> int: ...

class Window(TypedDict):
    start: float
    end: float
    samples: int
    stacks: list[Row]
    #: samples of threads waiting for the GIL, by who held it: (waiter thread id, its folded
    #: stack, holder thread id (0: none, being handed over), its folded stack, samples)
    gil_holders: list[tuple[int, str, int, str, int]]
    #: task stacks (folded, leaf [running], [ready] or [waiting]) with their task-samples
    tasks: list[tuple[str, int]]
    #: task scans in the window (each counts one task-sample per task it read)
    task_scans: int
    #: tasks those scans found past their bound (20,000 a scan) and did not read, summed
    task_unread: int
    #: the stalls of its event loops that ended in it (at most 100, the longest), and how many
    #: more did
    stalls: list[Stall]
    stalls_dropped: int
    #: the slow requests that ended in it (at most 100, the longest), and how many more did
    slow_requests: list[SlowRequest]
    slow_requests_dropped: int

class SlowRequest(TypedDict):
    """A request the task scans saw in flight for ``slow_ms`` or longer."""

    #: its task's name
    task: str
    framework: str
    method: str
    #: without its query string
    path: str
    #: the pattern the framework matched (None: none yet, or none did)
    route: str | None
    #: Tornado's handler class
    handler: str | None
    trace: str | None
    trace_header: str | None
    #: unix seconds: the framework's start (``start_from`` "framework"), or the first scan
    #: that saw it ("scans")
    start: float
    start_from: Literal["framework", "scans"]
    #: seconds, at least (to the last scan that saw it) and at most (to the first that did
    #: not; for one still in flight when sampling ended, ``ongoing``, the last scan's)
    duration: float
    duration_max: float
    ongoing: bool
    scans: int
    #: its task-samples by folded task stack (route frame first), and those past 32 stacks
    stacks: list[tuple[str, int]]
    other: int

class Stall(TypedDict):
    """One callback of an event loop that kept the loop from its poll for the threshold."""

    thread_id: int
    #: its first sample's time, and that of the sample that ended it (unix seconds); for one
    #: still running when sampling ended (``ongoing``), its last sample's
    start: float
    end: float
    ongoing: bool
    samples: int
    #: samples taken while the thread collected garbage
    gc: int
    #: the loop's callback's frame, ``function (file:line)``
    callback: str
    #: samples by (state: "busy", "blocked", "gil" or "cpu_wait", folded stack); ``other`` past
    #: 64 stacks
    stacks: list[tuple[str, str, int]]
    other: int
    #: samples waiting for the GIL by (holder's thread id (0: none), its folded stack)
    holders: list[tuple[int, str, int]]
    #: the asyncio task a task scan found running in it (``tasks_hz`` > 0): (name, folded task
    #: stack), or None
    task: tuple[str, str] | None

class SamplerStats(TypedDict):
    samples: int
    traces: int
    errors: int
    #: non-blocking mode: torn reads of a running target that were read again in the same tick
    retried: int
    late: int
    missed: int
    empty: int
    dropped_windows: int
    dropped_samples: int
    lag_mean: float
    lag_max: float
    read_mean: float
    read_max: float
    #: per tick, the frame walker's reads of the target's memory: process_vm_readv calls, the
    #: remote pieces they name (about one page each to pin) and the bytes copied; 0 with py-spy
    read_calls: float
    read_pieces: float
    read_bytes: float
    #: per tick, the seconds spent in those calls, timed around each: the kernel's share of a
    #: sample as the machine was then (a benchmark's floor without a replay)
    read_calls_mean: float
    #: per tick, thread run states the walker read from /proc (a thread whose innermost frame
    #: is a known wait, such as a selector's select or a condition's wait, is idle unread)
    state_reads: float
    #: per tick, the seconds spent in those reads, timed around each
    state_reads_mean: float
    #: per tick, the seconds the stall detector took, timed around each of its calls (0 with
    #: ``stall_ms=0``)
    stall_mean: float
    #: when the oldest stall still in progress began (unix seconds): a callback that has held
    #: its loop ``stall_ms`` or more by the last sample; None while none has
    stalled_since: float | None
    #: the /proc file of those run states: "stat", or "syscall" once it has named the system
    #: call of a thread that "stat" showed asleep (it costs the kernel less); "" through py-spy
    state_file: str
    #: folding stacks into text, per sample
    fold_mean: float
    #: blocking mode: samples that stopped the target, and how long its Python threads stood
    pauses: int
    pause_mean: float
    pause_max: float
    pause_p99: float
    last_error: str | None
    #: what reads the stacks: "walker (Python 3.11.7)", or "py-spy (...)" with the reason
    reader: str
    #: where the last sample's on-CPU states came from: "os", or "estimated (...)" with the
    #: reason (py-spy's guess from the innermost frame); "" before the first sample
    on_cpu: str
    #: where the GIL's holder and waiters come from: "the thread states' flags" (3.15), "the
    #: GIL's holder, and the waiters' futex in /proc", or what is missing and why
    gil: str
    #: where waits for a CPU come from: "schedstat" (each runnable thread's), why not (a kernel
    #: without scheduler statistics, ``cpu_wait=False``), or "not read yet (...)"
    cpu_wait: str
    #: where it ticks: "own", "shared", or "own (moved off the shared clock: ...)" and the like
    clock: str
    #: task scans (``tasks_hz``): done, task-samples counted, tasks left out because a read of
    #: them tore, tasks past a scan's bound, scans that failed and why the last one did
    task_scans: int
    task_samples: int
    task_torn: int
    task_unread: int
    task_errors: int
    task_last_error: str | None
    #: requests' tasks whose request a scan left out (changed as it was read): their
    #: task-samples have no route frame
    task_requests_torn: int
    #: requests in flight the scans did not follow for slow requests: seen while 10,000 were
    slow_requests_untracked: int
    state: Literal["running", "stopped", "exited"]

@final
class Sampler:
    """Samples one Python process on a native thread, without holding the GIL.

    ``tasks_hz`` > 0 also scans its asyncio tasks (CPython 3.11+) at that rate, on a thread of
    its own (each scan at a random instant of its period); each window then holds the task
    stacks of the scans done by its samples.

    ``clock="shared"`` ticks it on one native thread shared by every sampler that asks for it,
    on a common schedule: one wakeup per tick for all their targets instead of one each.

    ``rate_hz`` and ``window`` default to ``DEFAULT_RATE_HZ`` and ``DEFAULT_WINDOW_S``.
    ``gil=False`` leaves out the reads of who holds and who waits for the GIL, and of the
    collector's flag (the benchmarks compare the cost). ``stall_ms`` (default
    ``DEFAULT_STALL_MS``) is the shortest stall of an event loop each window reports; 0 looks
    for none (the benchmarks compare the cost too). ``task_bound`` (1 to 20,000, the default)
    is the most tasks a scan reads (tests: a few hundred past it); ``task_cache=False`` reads
    every await chain again at each scan instead of keeping those unchanged (the benchmarks
    compare the cost). ``cpu_wait=False`` leaves out the read of each runnable thread's
    ``schedstat`` that tells those waiting for a CPU (they read busy; the benchmarks compare
    the cost). ``slow_ms`` (default ``DEFAULT_SLOW_MS``; 0: none) is the shortest request in
    flight, as the task scans saw it, that a window reports as slow (``SlowRequest``).

    Raises ProcessLookupError (no such process), PermissionError (the message names the fix)
    or SamplerError (anything else) when it cannot attach.
    """

    def __new__(
        cls,
        pid: int,
        rate_hz: float = ...,
        blocking: bool = False,
        window: float = ...,
        max_pending: int = 360,
        reader: Literal["auto", "py-spy"] = "auto",
        clock: Literal["own", "shared"] = "own",
        tasks_hz: float = 0.0,
        gil: bool = True,
        stall_ms: float = ...,
        *,
        task_bound: int | None = None,
        task_cache: bool = True,
        cpu_wait: bool = True,
        slow_ms: float = ...,
    ) -> Sampler: ...
    @property
    def python_version(self) -> str: ...
    @property
    def gil(self) -> str:
        """Where the GIL's holder and waiters come from, and what is missing: "the thread
        states' flags" (3.15), "the GIL's holder, and the waiters' futex in /proc", or why
        not; empty before the first sample."""
    @property
    def running(self) -> bool: ...
    @property
    def exited(self) -> bool: ...
    @property
    def clock(self) -> str: ...
    @property
    def on_cpu(self) -> str: ...
    def drain(self, flush: bool = False) -> list[Window]: ...
    def set_cpu_wait(self, on: bool) -> None:
        """Tells (or stops telling) the runnable threads that wait for a CPU from the next
        sample on, as ``cpu_wait`` does from the start; turned on again, the read begins
        afresh (the benchmarks turn it on and off in two samplers side by side)."""
    def stats(self) -> SamplerStats: ...
    def stop(self) -> None: ...
    def __enter__(self) -> Sampler: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

def render_svg(
    lines: list[str],
    *,
    title: str = "Flame Graph",
    subtitle: str | None = None,
    inverted: bool = False,
    palette: str = "python",
    min_width: float = 0.1,
    count_name: str = "samples",
    width: int | None = None,
    negate: bool = False,
    factor: float = 1.0,
) -> str:
    """Folded lines into a flamegraph SVG; lines with two counts make a differential one."""

def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), None if there is no such process."""

def record_reads(pids: list[int], seconds: float) -> list[tuple[int, list[tuple[int, int]]]]:
    """Every read this process makes of the memory of ``pids`` for ``seconds``, in order: the
    PID and the (address, length) pieces of each call. For benchmarks: the machine's floor
    replays them. Blocks for ``seconds`` (0 to 60) without the GIL."""

def return_large_allocations() -> bool:
    """Allocations of 128 KiB and more mapped for themselves and given back to the kernel when
    freed (glibc's fixed mmap threshold); True if the allocator took it."""

class RequestRow(TypedDict):
    """The request a request's task serves, read from its root coroutine."""

    framework: Literal["aiohttp", "tornado"]
    method: str
    #: without the query string
    path: str
    #: the pattern the framework matched (aiohttp's resource, Tornado's rule); None before it
    #: matched one, or when none did
    route: str | None
    #: Tornado's handler class
    handler: str | None
    #: when it started (unix seconds), as the framework keeps it: aiohttp's ``loop.time()`` for
    #: its access log (None with the access log off), Tornado's ``time.time()``
    started: float | None
    started_clock: Literal["loop", "wall"] | None
    #: seconds since it started, as of the scan
    age_s: float | None
    #: from W3C ``traceparent``, else B3, else ``x-request-id``: the header is said
    trace: str | None
    trace_header: Literal["traceparent", "x-b3-traceid", "b3", "x-request-id"] | None

class TaskRow(TypedDict):
    """One live asyncio task in a scan."""

    #: the task object's address: an id within the scan
    id: int
    name: str
    state: Literal["running", "ready", "waiting"]
    #: ``function (file:line)`` of each coroutine of its await chain, outermost first
    frames: list[str]
    #: what the innermost coroutine awaits: "Task", "Future", or None
    future: Literal["Task", "Future"] | None
    #: the id of the task it awaits
    awaits: int | None
    #: the id of the task awaiting it (the first that awaits it, else the task whose
    #: ``gather`` or ``TaskGroup`` holds it), as its folded stack follows; maybe not in the scan
    awaited_by: int | None
    #: the request it serves, for a request's task (``rules.tasks.REQUEST_ROOTS``)
    request: RequestRow | None

class TaskScan(TypedDict):
    python_version: str
    tasks: list[TaskRow]
    #: one folded stack per task: the chains of the tasks awaiting it, its own, its state's leaf
    folded: list[str]
    #: tasks left out because a read of them tore (freed or changed as they were read)
    torn: int
    #: tasks past the scan's bound, not read
    unread: int
    #: requests' tasks whose request was left out (it changed as it was read)
    requests_torn: int

def scan_tasks(pid: int) -> TaskScan:
    """One snapshot of the asyncio tasks of a CPython 3.11+ process, read from its memory.

    Raises ProcessLookupError, PermissionError or SamplerError (an older Python, no asyncio
    imported, ...) with one line that says why."""

class DumpFrame(TypedDict):
    """One frame of a dumped thread, innermost first."""

    function: str
    #: the file as shown (relative to the outermost directory that is not a package)
    file: str
    line: int
    #: (name, short repr) of each bound local when locals were asked for and read, else None
    locals: list[tuple[str, str]] | None
    #: why this frame's locals did not read (locals asked for), else None
    locals_error: str | None

class DumpThread(TypedDict):
    """One Python thread of a dump."""

    #: the OS thread id
    tid: int
    #: its ``threading`` name, when it has one
    name: str | None
    #: on CPU and not in a known wait (as a sample reads it)
    active: bool
    #: active, but waiting for a CPU: its ``schedstat`` stood still across the dump's read
    cpu_wait: bool
    #: what it had to do with the GIL: holds it, waits for it, or neither (or not known)
    gil: Literal["holds", "waits", "none"]
    #: the interpreter was collecting garbage on it
    gc: bool
    #: its stack folded as the sampler folds it (outermost first), None without Python frames
    stack: str | None
    frames: list[DumpFrame]

class DumpRead(TypedDict):
    python_version: str
    #: which reader read it, and why
    reader: str
    #: reads taken: the running target is read again after each dump, and again while a
    #: thread's stack changed between the two (a few times at most)
    reads: int
    #: threads whose stack changed between the dump and the read after it: they ran on
    moving: list[int]
    #: how long the threads were stopped (blocking), else None
    pause: float | None
    threads: list[DumpThread]

def dump_threads(pid: int, *, blocking: bool = False, locals: int | None = None) -> DumpRead:
    """Every Python thread of a process once, from its memory: its state, the GIL, its
    frames; with ``locals``, each frame's locals, str and bytes cut at that many characters.
    ``blocking`` stops the threads for the read (and lets them go).

    Raises ProcessLookupError, PermissionError or SamplerError with one line that says why."""

class InfernoRead(TypedDict):
    """An inferno SVG read natively: its folded stacks and what the profile's notes need."""

    #: folded stacks (';' in frame names written as U+FF1B) with their self counts
    stacks: dict[str, int]
    #: the root frame's fg:w, and the count in its title
    total: int
    root_title_count: int
    #: some title has a differential part ("; +1.2%")
    differential: bool
    #: frames whose title count is off their fg:w (scaled by the root's ratio), and the first
    off: int
    first_off: str | None
    #: the frames container's total_samples attribute
    total_samples: str | None
    #: frames whose name holds a ';'
    renamed: int
    #: the root's count less its children's
    root_self: int
    #: the smallest positive count of a frame below the root, 0 if none
    smallest: int

class SvgRead(TypedDict):
    #: the root element's name
    root: str
    #: each frame's title text and its <rect>'s x, y, width, fg:x and fg:w (those present),
    #: empty when ``folded`` is given
    frames: list[tuple[str, dict[str, str]]]
    #: the first <svg id="frames">'s total_samples attribute
    total_samples: str | None
    #: the text of the scripts
    script: str
    #: the text of the first <metadata id="sidecar-folded">: the folded stacks sidecar embeds
    embedded: str | None
    #: inferno's frames folded into stacks, None for other layouts or an inconsistent graph
    folded: InfernoRead | None

def read_svg(data: bytes, *, max_depth: int, fold: bool = True) -> SvgRead:
    """A flamegraph SVG read (quick-xml): its frames, folded when they are inferno's and
    ``fold``. Raises ValueError, one line saying what is wrong and where, for a document that is
    not well-formed UTF-8 XML, declares anything in a DTD (entities are not accepted), refers to
    an entity other than XML's five, or nests deeper than ``max_depth``."""

def frame_names(stacks: Iterable[str]) -> list[str]:
    """The distinct frames of folded stacks, in the order they first appear."""

def diff_shares(
    before: dict[str, int], after: dict[str, int], keys: dict[str, str]
) -> tuple[
    tuple[dict[str, int], dict[str, int], dict[str, int]],
    tuple[dict[str, int], dict[str, int], dict[str, int]],
    dict[str, tuple[float, str, float, str]],
]:
    """Both profiles' per function (``keys``: frame -> function) self counts, total counts (once
    per stack, not the [idle]/[blocked] leaves) and counts per state, and per caller
    (largest growth of a callee edge's share, that callee, largest shrink, that callee), ties
    to the smaller name, ``(0.0, "")`` when nothing grew or shrank; shares are count / total.

    Raises KeyError for a frame missing from ``keys``, OverflowError when a total is not
    positive or a count or total is not exact as a float (2^53 and above).
    """

class PprofRead(TypedDict):
    """A pprof file read back: every index resolved and checked."""

    #: (type, unit) per value of a sample
    sample_types: list[tuple[str, str]]
    #: the index in ``sample_types`` of the default one, where the file names it
    default_type: int | None
    period_type: tuple[str, str] | None
    period: int
    comments: list[str]
    #: the distinct frames: (function, file or "", line)
    frames: list[tuple[str, str, int]]
    #: per sample: indexes into ``frames``, root first, and one value per sample type
    samples: list[tuple[list[int], list[int]]]

def decode_pprof(data: bytes, *, max_bytes: int) -> PprofRead:
    """A pprof profile.proto, gzipped or not, read (prost); ``max_bytes`` bounds the message
    once decompressed. Raises ValueError, one line, for a corrupt or inconsistent file."""

def encode_pprof(
    frames: list[tuple[str, str, str, int]],
    samples: list[tuple[str, list[int], list[tuple[str, str]]]],
    *,
    sample_types: list[tuple[str, str]],
    period_type: tuple[str, str],
    period: int,
    time_nanos: int = 0,
    duration_nanos: int = 0,
    comments: list[str] = ...,
) -> bytes:
    """A gzipped pprof profile.proto. ``frames`` are (folded text, function, file or "",
    line) of every frame the samples use; a sample is (folded stack root first, one value per
    sample type, (key, value) string labels).

    Raises ValueError for a sample with a frame not in ``frames`` or the wrong number of values.
    """

def encode_push_request(series: list[tuple[list[tuple[str, str]], list[bytes]]]) -> bytes:
    """The protobuf body of Pyroscope's ``push.v1.PusherService/Push``: per series its labels
    and its raw (gzipped pprof) profiles."""
