//! The sampler's side of the boundary: `Sampler` and its windows' `Row`s, the task snapshot,
//! and the helpers about processes, as plain Python types.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::process::{memory, procfs};
use crate::sampler::requests::SlowRequest;
use crate::sampler::stalls::Stall;
use crate::sampler::windows::{End, Options, Window};
use crate::sampler::Session;
use crate::tasks;

/// Samples one Python process on a native thread (its own, or the clock shared by every
/// sampler with `clock="shared"`), without holding the GIL.
#[pyclass(module = "sidecar._native", frozen)]
pub struct Sampler {
    session: Session,
}

/// One row of a window: one thread's stack in one state, with its samples.
#[pyclass(module = "sidecar._native", frozen, get_all)]
pub struct Row {
    thread_id: u64,
    /// empty until the target's threading module names the thread
    thread_name: Py<PyString>,
    on_cpu: bool,
    /// waiting for the GIL that another thread holds
    gil: bool,
    /// collecting garbage (the thread holds the GIL)
    gc: bool,
    /// on CPU as the OS says, but waiting for a CPU (runnable while the kernel runs another)
    cpu_wait: bool,
    /// folded, root first
    stack: Py<PyString>,
    count: u64,
}

#[pymethods]
impl Row {
    #[new]
    #[allow(clippy::too_many_arguments)] // the Python signature: keywords with defaults
    #[pyo3(signature = (*, thread_id, thread_name, on_cpu, stack, count, gil=false, gc=false, cpu_wait=false))]
    fn new(
        thread_id: u64,
        thread_name: Py<PyString>,
        on_cpu: bool,
        stack: Py<PyString>,
        count: u64,
        gil: bool,
        gc: bool,
        cpu_wait: bool,
    ) -> Self {
        Row {
            thread_id,
            thread_name,
            on_cpu,
            gil,
            gc,
            cpu_wait,
            stack,
            count,
        }
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let py_bool = |b: bool| if b { "True" } else { "False" };
        format!(
            "Row(thread_id={}, thread_name={:?}, on_cpu={}, gil={}, gc={}, cpu_wait={}, stack={:?}, \
             count={})",
            self.thread_id,
            self.thread_name.bind(py).to_string(),
            py_bool(self.on_cpu),
            py_bool(self.gil),
            py_bool(self.gc),
            py_bool(self.cpu_wait),
            self.stack.bind(py).to_string(),
            self.count
        )
    }
}

fn window_to_py<'py>(py: Python<'py>, window: &Window) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("start", window.start)?;
    dict.set_item("end", window.end)?;
    dict.set_item("samples", window.samples)?;
    let stacks = PyList::empty(py);
    let unnamed = PyString::new(py, "").unbind();
    let names: HashMap<u64, Py<PyString>> = window
        .thread_names
        .iter()
        .map(|(&tid, name)| (tid, PyString::new(py, name).unbind()))
        .collect();
    for (thread_id, on_cpu, gil, gc, cpu_wait, text, count) in window.rows() {
        let row = Row {
            thread_id,
            thread_name: names.get(&thread_id).unwrap_or(&unnamed).clone_ref(py),
            on_cpu,
            gil,
            gc,
            cpu_wait,
            stack: PyString::new(py, text).unbind(),
            count,
        };
        stacks.append(Bound::new(py, row)?)?;
    }
    dict.set_item("stacks", stacks)?;
    let holders = PyList::empty(py);
    for row in window.holder_rows() {
        holders.append(row)?;
    }
    dict.set_item("gil_holders", holders)?;
    let tasks = PyList::empty(py);
    for (stack, count) in &window.tasks {
        tasks.append((stack.as_str(), *count))?;
    }
    dict.set_item("tasks", tasks)?;
    dict.set_item("task_scans", window.task_scans)?;
    dict.set_item("task_unread", window.task_unread)?;
    let stalls = PyList::empty(py);
    for stall in &window.stalls {
        stalls.append(stall_to_py(py, stall)?)?;
    }
    dict.set_item("stalls", stalls)?;
    dict.set_item("stalls_dropped", window.stalls_dropped)?;
    let slow = PyList::empty(py);
    for request in &window.slow_requests {
        slow.append(slow_request_to_py(py, request)?)?;
    }
    dict.set_item("slow_requests", slow)?;
    dict.set_item("slow_requests_dropped", window.slow_requests_dropped)?;
    Ok(dict)
}

fn slow_request_to_py<'py>(py: Python<'py>, slow: &SlowRequest) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let request = &slow.request;
    dict.set_item("task", &slow.task)?;
    dict.set_item("framework", request.framework)?;
    dict.set_item("method", &request.method)?;
    dict.set_item("path", &request.path)?;
    dict.set_item("route", &request.route)?;
    dict.set_item("handler", &request.handler)?;
    dict.set_item("trace", request.trace.as_ref().map(|t| &t.id))?;
    dict.set_item("trace_header", request.trace.as_ref().map(|t| t.header))?;
    dict.set_item("start", slow.start)?;
    dict.set_item(
        "start_from",
        if slow.from_scans {
            "scans"
        } else {
            "framework"
        },
    )?;
    dict.set_item("duration", slow.duration)?;
    dict.set_item("duration_max", slow.duration_max)?;
    dict.set_item("ongoing", slow.ongoing)?;
    dict.set_item("scans", slow.scans)?;
    let stacks = PyList::empty(py);
    for (stack, count) in &slow.stacks {
        stacks.append((stack.as_str(), *count))?;
    }
    dict.set_item("stacks", stacks)?;
    dict.set_item("other", slow.other)?;
    Ok(dict)
}

fn stall_to_py<'py>(py: Python<'py>, stall: &Stall) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("thread_id", stall.thread_id)?;
    dict.set_item("start", stall.start)?;
    dict.set_item("end", stall.end)?;
    dict.set_item("ongoing", stall.ongoing)?;
    dict.set_item("samples", stall.samples)?;
    dict.set_item("gc", stall.gc)?;
    dict.set_item("callback", stall.callback())?;
    let stacks = PyList::empty(py);
    for ((state, stack), count) in &stall.stacks {
        stacks.append((state.name(), stack.text(), *count))?;
    }
    dict.set_item("stacks", stacks)?;
    dict.set_item("other", stall.other)?;
    let holders = PyList::empty(py);
    for ((holder, stack), count) in &stall.holders {
        holders.append((*holder, stack.as_ref().map_or("", |s| s.text()), *count))?;
    }
    dict.set_item("holders", holders)?;
    dict.set_item(
        "task",
        stall.task.as_ref().map(|(name, stack)| (name, stack)),
    )?;
    Ok(dict)
}

/// Samples per second when none is asked for: `record`'s and `serve`'s default too.
pub const DEFAULT_RATE_HZ: f64 = 100.0;
/// Seconds per window of a sampler when none is asked for.
pub const DEFAULT_WINDOW_S: f64 = 1.0;
/// The shortest stall reported when none is asked for: asyncio's own `slow_callback_duration`.
pub const DEFAULT_STALL_MS: f64 = 100.0;
/// The shortest slow request reported when none is asked for (with task scans on).
pub const DEFAULT_SLOW_MS: f64 = 500.0;

#[pymethods]
impl Sampler {
    #[new]
    #[allow(clippy::too_many_arguments)] // the Python signature: keywords with defaults
    #[pyo3(signature = (pid, rate_hz=DEFAULT_RATE_HZ, blocking=false, window=DEFAULT_WINDOW_S, max_pending=360, reader="auto", clock="own", tasks_hz=0.0, gil=true, stall_ms=DEFAULT_STALL_MS, *, task_bound=None, task_cache=true, cpu_wait=true, slow_ms=DEFAULT_SLOW_MS))]
    fn new(
        py: Python<'_>,
        pid: i32,
        rate_hz: f64,
        blocking: bool,
        window: f64,
        max_pending: usize,
        reader: &str,
        clock: &str,
        tasks_hz: f64,
        gil: bool,
        stall_ms: f64,
        task_bound: Option<usize>,
        task_cache: bool,
        cpu_wait: bool,
        slow_ms: f64,
    ) -> PyResult<Self> {
        if pid <= 0 {
            return Err(PyValueError::new_err(format!(
                "PID must be positive, not {pid}"
            )));
        }
        if rate_hz.is_nan() || rate_hz <= 0.0 || rate_hz > 10_000.0 {
            return Err(PyValueError::new_err(format!(
                "rate must be between 0 and 10000 Hz, not {rate_hz}"
            )));
        }
        if tasks_hz.is_nan() || !(0.0..=rate_hz).contains(&tasks_hz) {
            return Err(PyValueError::new_err(format!(
                "task rate must be between 0 and the rate ({rate_hz} Hz), not {tasks_hz}"
            )));
        }
        if !(0.01..=86_400.0).contains(&window) {
            return Err(PyValueError::new_err(format!(
                "window must be between 0.01 and 86400 seconds, not {window}"
            )));
        }
        if stall_ms != 0.0 && !(1.0..=3_600_000.0).contains(&stall_ms) {
            return Err(PyValueError::new_err(format!(
                "the stall threshold must be between 1 ms and an hour (0: no stalls), not \
                 {stall_ms} ms"
            )));
        }
        if slow_ms != 0.0 && !(1.0..=86_400_000.0).contains(&slow_ms) {
            return Err(PyValueError::new_err(format!(
                "the slow request threshold must be between 1 ms and a day (0: none), not \
                 {slow_ms} ms"
            )));
        }
        if let Some(bound) = task_bound.filter(|b| !(1..=tasks::MAX_TASKS).contains(b)) {
            return Err(PyValueError::new_err(format!(
                "the task bound must be between 1 and {} tasks, not {bound}",
                tasks::MAX_TASKS
            )));
        }
        let options = Options {
            pid,
            rate_hz,
            blocking,
            window,
            max_pending: max_pending.max(1),
            walker: match reader {
                "auto" => true,
                "py-spy" => false,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "reader must be 'auto' or 'py-spy', not {other:?}"
                    )))
                }
            },
            shared_clock: match clock {
                "own" => false,
                "shared" => true,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "clock must be 'own' or 'shared', not {other:?}"
                    )))
                }
            },
            tasks_hz,
            task_scan: tasks::ScanOptions {
                bound: task_bound.unwrap_or(tasks::MAX_TASKS),
                chain_cache: task_cache,
            },
            gil,
            stall_s: stall_ms / 1000.0,
            cpu_wait,
            slow_s: slow_ms / 1000.0,
        };
        let session = py.detach(|| Session::start(options))?;
        Ok(Sampler { session })
    }

    /// The target's Python version, e.g. "3.11.7".
    #[getter]
    fn python_version(&self) -> String {
        self.session.python_version.clone()
    }

    /// True while the sampling thread runs.
    #[getter]
    fn running(&self) -> bool {
        self.session.end() == End::Running
    }

    /// True once the target exited (or its PID now names another process).
    #[getter]
    fn exited(&self) -> bool {
        self.session.end() == End::Exited
    }

    /// Where it ticks: "own", "shared", or "own (moved off the shared clock: ...)" and the like.
    #[getter]
    fn clock(&self) -> String {
        self.session.clock()
    }

    /// Where on-CPU states come from: "os", or "estimated (...)" with the reason; empty before
    /// the first sample.
    #[getter]
    fn on_cpu(&self) -> String {
        self.session.on_cpu()
    }

    /// Where the GIL's holder and waiters come from, and what is missing: "the thread states'
    /// flags" (3.15), "the GIL's holder, and the waiters' futex in /proc", or why not; empty
    /// before the first sample.
    #[getter]
    fn gil(&self) -> String {
        self.session.gil()
    }

    /// Tells (or stops telling) the runnable threads that wait for a CPU from the next sample
    /// on, as `cpu_wait` does from the start; turned on again, the read begins afresh.
    fn set_cpu_wait(&self, on: bool) {
        self.session.set_cpu_wait(on);
    }

    /// Completed windows since the last call, oldest first; `flush` adds the one in progress.
    #[pyo3(signature = (flush=false))]
    fn drain<'py>(&self, py: Python<'py>, flush: bool) -> PyResult<Bound<'py, PyList>> {
        let windows = py.detach(|| self.session.drain(flush));
        let out = PyList::empty(py);
        for window in &windows {
            out.append(window_to_py(py, window)?)?;
        }
        Ok(out)
    }

    /// Counters: samples, errors, lag, dropped windows, read time, last error.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (stats, end) = self.session.stats();
        let dict = PyDict::new(py);
        dict.set_item("samples", stats.samples)?;
        dict.set_item("traces", stats.traces)?;
        dict.set_item("errors", stats.errors)?;
        dict.set_item("retried", stats.retried)?;
        dict.set_item("late", stats.late)?;
        dict.set_item("missed", stats.missed)?;
        dict.set_item("empty", stats.empty)?;
        dict.set_item("dropped_windows", stats.dropped_windows)?;
        dict.set_item("dropped_samples", stats.dropped_samples)?;
        let ticks = (stats.samples + stats.errors).max(1) as f64;
        dict.set_item("lag_mean", stats.lag_sum / ticks)?;
        dict.set_item("lag_max", stats.lag_max)?;
        dict.set_item("read_mean", stats.read_sum / ticks)?;
        dict.set_item("read_max", stats.read_max)?;
        let reads = stats.memory_reads;
        dict.set_item("read_calls", reads.calls as f64 / ticks)?;
        dict.set_item("read_pieces", reads.pieces as f64 / ticks)?;
        dict.set_item("read_bytes", reads.bytes as f64 / ticks)?;
        dict.set_item("read_calls_mean", reads.nanos as f64 / 1e9 / ticks)?;
        dict.set_item("state_reads", stats.state_reads as f64 / ticks)?;
        dict.set_item("state_reads_mean", stats.state_nanos as f64 / 1e9 / ticks)?;
        dict.set_item("state_file", stats.state_file)?;
        dict.set_item("stall_mean", stats.stall_nanos as f64 / 1e9 / ticks)?;
        dict.set_item("stalled_since", stats.stalled_since)?;
        dict.set_item("fold_mean", stats.fold_sum / (stats.samples.max(1) as f64))?;
        dict.set_item("pauses", stats.pauses.count)?;
        dict.set_item(
            "pause_mean",
            stats.pauses.sum / (stats.pauses.count.max(1) as f64),
        )?;
        dict.set_item("pause_max", stats.pauses.max)?;
        dict.set_item("pause_p99", stats.pauses.percentile(99.0))?;
        dict.set_item("last_error", stats.last_error)?;
        dict.set_item("reader", stats.reader)?;
        dict.set_item("on_cpu", stats.on_cpu)?;
        dict.set_item("gil", stats.gil)?;
        dict.set_item("cpu_wait", stats.cpu_wait)?;
        dict.set_item("clock", stats.clock)?;
        dict.set_item("task_scans", stats.task_scans)?;
        dict.set_item("task_samples", stats.task_samples)?;
        dict.set_item("task_torn", stats.task_torn)?;
        dict.set_item("task_unread", stats.task_unread)?;
        dict.set_item("task_requests_torn", stats.task_requests_torn)?;
        dict.set_item("slow_requests_untracked", stats.slow_requests_untracked)?;
        dict.set_item("task_errors", stats.task_errors)?;
        dict.set_item("task_last_error", stats.task_last_error)?;
        let state = match end {
            End::Running => "running",
            End::Stopped => "stopped",
            End::Exited => "exited",
        };
        dict.set_item("state", state)?;
        Ok(dict)
    }

    /// Stops sampling and waits for the thread; safe to call more than once.
    fn stop(&self, py: Python<'_>) {
        py.detach(|| self.session.stop());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> bool {
        self.stop(py);
        false
    }

    fn __repr__(&self) -> String {
        let o = &self.session.options;
        format!(
            "Sampler(pid={}, rate_hz={}, blocking={}, window={})",
            o.pid,
            o.rate_hz,
            if o.blocking { "True" } else { "False" },
            o.window
        )
    }
}

/// One snapshot of the asyncio tasks of `pid` (CPython 3.11+): `{python_version, tasks, folded,
/// torn, unread, requests_torn}`, each task `{id, name, state, frames, future, awaits,
/// awaited_by, request}`.
#[pyfunction]
pub fn scan_tasks(py: Python<'_>, pid: i32) -> PyResult<Bound<'_, PyDict>> {
    if pid <= 0 {
        return Err(PyValueError::new_err(format!(
            "PID must be positive, not {pid}"
        )));
    }
    let (version, scan) = py.detach(|| tasks::snapshot(pid))?;
    let dict = PyDict::new(py);
    dict.set_item("python_version", version)?;
    let rows = PyList::empty(py);
    let awaiters = tasks::awaiters(&scan.tasks);
    for task in &scan.tasks {
        let row = PyDict::new(py);
        row.set_item("id", task.id)?;
        row.set_item("name", &task.name)?;
        row.set_item("state", task.state.leaf().trim_matches(['[', ']']))?;
        let frames: Vec<&str> = task.frames.iter().map(|f| f.as_ref()).collect();
        row.set_item("frames", frames)?;
        row.set_item("future", task.future)?;
        row.set_item("awaits", task.awaits)?;
        row.set_item("awaited_by", awaiters.get(&task.id))?;
        let request = match &task.request {
            Some(request) => Some(request_row(py, request, scan.clocks)?),
            None => None,
        };
        row.set_item("request", request)?;
        rows.append(row)?;
    }
    dict.set_item("tasks", rows)?;
    dict.set_item("folded", tasks::fold(&scan.tasks))?;
    dict.set_item("torn", scan.torn)?;
    dict.set_item("unread", scan.unread)?;
    dict.set_item("requests_torn", scan.requests_torn)?;
    Ok(dict)
}

/// A request in flight as Python data: `{framework, method, path, route, handler, started,
/// started_clock, age_s, trace, trace_header}`, its start in unix seconds as of the scan's
/// `clocks` (`tasks::requests::Started::at`).
fn request_row<'py>(
    py: Python<'py>,
    request: &tasks::Request,
    (wall, mono): (f64, f64),
) -> PyResult<Bound<'py, PyDict>> {
    let row = PyDict::new(py);
    row.set_item("framework", request.framework)?;
    row.set_item("method", &request.method)?;
    row.set_item("path", &request.path)?;
    row.set_item("route", &request.route)?;
    row.set_item("handler", &request.handler)?;
    let started = request.started.map(|s| s.at(wall, mono));
    row.set_item("started", started.map(|(at, _)| at))?;
    row.set_item("started_clock", request.started.map(|s| s.clock()))?;
    row.set_item("age_s", started.map(|(_, age)| age))?;
    row.set_item("trace", request.trace.as_ref().map(|t| &t.id))?;
    row.set_item("trace_header", request.trace.as_ref().map(|t| t.header))?;
    Ok(row)
}

/// Field 22 of /proc/PID/stat (start time in clock ticks), or None if there is no such process.
#[pyfunction]
pub fn process_start_time(pid: i32) -> Option<u64> {
    procfs::start_time(pid)
}

/// Allocations of 128 KiB and more are mapped for themselves and given back to the kernel when
/// freed (glibc's `M_MMAP_THRESHOLD`, fixed): by default glibc raises the threshold to the
/// largest block freed so far, and a long-lived process that once built a large response
/// keeps such blocks in its heap, spread out, long after. True if the allocator took it.
#[pyfunction]
pub fn return_large_allocations() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt takes an option and a value and only changes the allocator's settings.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

/// Every read this process makes of the memory of `pids` for `seconds`, in order: (PID,
/// [(address, length), ...]) per `process_vm_readv` call. For benchmarks: the machine's floor
/// replays them. Blocks for `seconds` without the GIL.
#[pyfunction]
pub fn record_reads(
    py: Python<'_>,
    pids: Vec<i32>,
    seconds: f64,
) -> PyResult<Vec<memory::RecordedRead>> {
    if !(0.0..=60.0).contains(&seconds) {
        return Err(PyValueError::new_err(format!(
            "seconds must be between 0 and 60, not {seconds}"
        )));
    }
    let duration = std::time::Duration::from_secs_f64(seconds);
    py.detach(|| memory::record(&pids, duration))
        .map_err(|err| PyValueError::new_err(err.to_string()))
}
