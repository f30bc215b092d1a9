//! `sidecar dump`'s side of the boundary: one read of every thread of a process, as plain
//! Python types.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::sampler::dump::dump;
use crate::stack::GilRole;

/// Every Python thread of `pid` once: `{python_version, reader, reads, moving, pause,
/// threads}`, each thread `{tid, name, active, gil, gc, stack, frames}` and each frame,
/// innermost first, `{function, file, line, locals, locals_error}`. The threads are stopped
/// for the read when `blocking`; with `locals`, each frame's locals are read, str and bytes
/// values cut at that many characters.
#[pyfunction]
#[pyo3(signature = (pid, *, blocking = false, locals = None))]
pub fn dump_threads(
    py: Python<'_>,
    pid: i32,
    blocking: bool,
    locals: Option<usize>,
) -> PyResult<Bound<'_, PyDict>> {
    if pid <= 0 {
        return Err(PyValueError::new_err(format!(
            "PID must be positive, not {pid}"
        )));
    }
    if locals == Some(0) {
        return Err(PyValueError::new_err(
            "locals must cut at 1 character or more",
        ));
    }
    let read = py.detach(|| dump(pid, blocking, locals))?;
    let dict = PyDict::new(py);
    dict.set_item("python_version", &read.version)?;
    dict.set_item("reader", &read.reader)?;
    dict.set_item("reads", read.reads)?;
    dict.set_item("moving", &read.moving)?;
    dict.set_item("pause", read.pause)?;
    let threads = PyList::empty(py);
    for thread in &read.threads {
        let trace = &thread.trace;
        let row = PyDict::new(py);
        row.set_item("tid", trace.tid)?;
        row.set_item("name", read.names.get(&trace.tid))?;
        row.set_item("active", trace.active)?;
        row.set_item("cpu_wait", trace.cpu_wait)?;
        let gil = match trace.gil {
            GilRole::Holds => "holds",
            GilRole::Waits => "waits",
            GilRole::None => "none",
        };
        row.set_item("gil", gil)?;
        row.set_item("gc", trace.gc)?;
        row.set_item("stack", trace.stack.as_ref().map(|s| s.text()))?;
        let frames = PyList::empty(py);
        for frame in &thread.frames {
            let f = PyDict::new(py);
            f.set_item("function", &frame.function)?;
            f.set_item("file", &frame.file)?;
            f.set_item("line", frame.line)?;
            let (locals, error) = match &frame.locals {
                None => (None, None),
                Some(Ok(locals)) => (Some(locals), None),
                Some(Err(error)) => (None, Some(error)),
            };
            f.set_item("locals", locals)?;
            f.set_item("locals_error", error)?;
            frames.append(f)?;
        }
        row.set_item("frames", frames)?;
        threads.append(row)?;
    }
    dict.set_item("threads", threads)?;
    Ok(dict)
}
