//! Attaching py-spy to a target, and why it failed, told apart so Python gets the right
//! exception.

use std::time::Duration;

use py_spy::{Config, PythonSpy};

use super::procfs::start_time;

#[derive(Debug)]
pub enum InitError {
    NoProcess(i32),
    Permission(i32, String),
    Sampler(i32, String),
    Other(String),
}

pub const PERMISSION_FIX: &str =
    "run sidecar as root or grant it CAP_SYS_PTRACE; in Kubernetes add \
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
        if text.contains("Failed to find a python interpreter") {
            if let Some(why) = unreadable_python(pid) {
                return InitError::Other(format!("PID {pid}: {why}"));
            }
        }
        InitError::Sampler(pid, text)
    }
}

/// Why a process that runs Python had no interpreter py-spy could check, where its /proc says
/// it runs Python: py-spy checks each candidate by reading every thread's stack, and refuses
/// more than `PY_SPY_MOST` threads or a stack deeper than `PY_SPY_MOST` frames (the last
/// attempt holds the threads stopped, so a torn read is not the cause). None for a process
/// whose maps name no Python.
fn unreadable_python(pid: i32) -> Option<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let python = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter_map(|path| path.rsplit('/').next())
        .find(|name| name.starts_with("libpython3") || name.starts_with("python3"))?
        .to_owned();
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |dir| dir.count());
    let read = format!("it runs Python ({python}) but its interpreter could not be read");
    let refuses = "py-spy's reader, with which sidecar finds the interpreter, refuses a process \
of more than 4,096 threads or a stack deeper than 4,096 frames";
    Some(if threads > PY_SPY_MOST {
        format!("{read}: {refuses}, and it has more threads than that")
    } else {
        format!("{read} (a stack too deep, or memory damaged?): {refuses}")
    })
}

/// The most threads, and frames of a thread, py-spy's check of an interpreter reads.
const PY_SPY_MOST: usize = 4096;

/// Attachments py-spy is given to find the interpreter, and tries of the first read of each.
const ATTACH_TRIES: u32 = 3;
const FIRST_READ_TRIES: u32 = 100;
const FIRST_READ_PAUSE: Duration = Duration::from_millis(5);

/// py-spy attached to `pid`, once a read of every thread's stack succeeded. A read does not
/// stop the target, and a thread that runs on under it tears it (a frame's code object freed
/// or moved as it was read): the threads of a busy target tear many reads in a row. So each
/// attachment reads again, for up to half a second, before the last error refuses the target.
///
/// py-spy checks the interpreter it finds by reading a stack, which a target that changes its
/// stacks faster than a read can tear, and then reports no interpreter at all ("Failed to find
/// a python interpreter in the .data section"). So the last attachment holds the target's
/// threads stopped while py-spy finds it (ptrace seize + interrupt, as blocking mode).
pub(crate) fn attach_spy(pid: i32, config: &Config) -> anyhow::Result<PythonSpy> {
    let mut last = anyhow::anyhow!("py-spy did not attach");
    for attempt in 1..=ATTACH_TRIES {
        // (2.5-9.4 ms here; should the threads not stop, py-spy tries as before)
        let stopped = (attempt == ATTACH_TRIES)
            .then(|| remoteprocess::Process::new(pid).and_then(|p| p.lock()))
            .and_then(Result::ok);
        let attached = PythonSpy::new(pid, config);
        drop(stopped);
        match attached {
            Ok(mut spy) => {
                for _ in 0..FIRST_READ_TRIES {
                    match spy.get_stack_traces() {
                        Ok(_) => return Ok(spy),
                        Err(err) => last = err,
                    }
                    std::thread::sleep(FIRST_READ_PAUSE);
                }
                return Err(last);
            }
            Err(err) => last = err,
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(last)
}
