//! Why attaching to a target failed, told apart so Python gets the right exception.

use pyo3::exceptions::{PyPermissionError, PyProcessLookupError};
use pyo3::prelude::*;

use crate::procfs::start_time;

pyo3::create_exception!(
    _native,
    SamplerError,
    pyo3::exceptions::PyRuntimeError,
    "The sampler could not read the target (not a Python process, unsupported version, ...)."
);

#[derive(Debug)]
pub enum InitError {
    NoProcess(i32),
    Permission(i32, String),
    Sampler(i32, String),
    Other(String),
}

const PERMISSION_FIX: &str = "run sidecar as root or grant it CAP_SYS_PTRACE; in Kubernetes add \
SYS_PTRACE to the sidecar container's securityContext.capabilities and set \
shareProcessNamespace: true on the pod";

impl InitError {
    /// Sorts a py-spy error into the cases a user acts on differently.
    pub fn classify(pid: i32, started: u64, err: &anyhow::Error) -> InitError {
        if start_time(pid) != Some(started) {
            return InitError::NoProcess(pid);
        }
        // Causes often repeat the same OS error; keep each message once.
        let mut parts: Vec<String> = Vec::new();
        for cause in err.chain() {
            let message = cause.to_string();
            if !parts.iter().any(|p| p.contains(&message)) {
                parts.push(message);
            }
        }
        let text = parts.join(": ");
        let denied = err.chain().any(|cause| {
            if let Some(io) = cause.downcast_ref::<std::io::Error>() {
                matches!(io.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
            } else {
                false
            }
        }) || text.contains("os error 1)")
            || text.contains("os error 13)")
            || text.contains("Operation not permitted")
            || text.contains("Permission denied")
            || text.contains("EPERM");
        if denied {
            return InitError::Permission(pid, text);
        }
        InitError::Sampler(pid, text)
    }
}

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
