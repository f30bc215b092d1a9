//! The Python boundary: everything `sidecar._native` exposes, as plain Python types, over the
//! plain Rust types and functions of the concern modules. `lib.rs` registers it; the wrappers
//! are here (`sampler`, `formats`), and so is how a failed attachment becomes an exception.

pub mod dump;
pub mod formats;
pub mod sampler;

use pyo3::exceptions::{PyPermissionError, PyProcessLookupError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::process::attach::{InitError, PERMISSION_FIX};
use crate::rules::{FileMatch, KNOWN_WAITS};

pyo3::create_exception!(
    _native,
    SamplerError,
    pyo3::exceptions::PyRuntimeError,
    "The sampler could not read the target (not a Python process, unsupported version, ...)."
);

impl From<InitError> for PyErr {
    fn from(err: InitError) -> PyErr {
        match err {
            InitError::NoProcess(pid) => {
                PyProcessLookupError::new_err(format!("no process with PID {pid} (or it exited)"))
            }
            InitError::Permission(pid, detail) => PyPermissionError::new_err(format!(
                "not allowed to read the memory of PID {pid} ({detail}): {PERMISSION_FIX}"
            )),
            InitError::Sampler(pid, detail) => {
                let hint = if detail.contains("python version")
                    || detail.contains("Python version")
                    || detail.contains("python interpreter")
                    || detail.contains("libpython")
                {
                    "it does not look like a Python process"
                } else {
                    "cannot sample it"
                };
                SamplerError::new_err(format!("PID {pid}: {hint}: {detail}"))
            }
            InitError::Other(detail) => SamplerError::new_err(detail),
        }
    }
}

/// `rules::KNOWN_WAITS` as Python data: (function, "endswith" or "contains", file text) each.
pub fn known_waits(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
    let rows = KNOWN_WAITS.iter().map(|&(function, file)| match file {
        FileMatch::EndsWith(suffix) => (function, "endswith", suffix),
        FileMatch::Contains(part) => (function, "contains", part),
    });
    PyTuple::new(py, rows)
}
