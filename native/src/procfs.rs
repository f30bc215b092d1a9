//! What the sampler reads of /proc: a process's start time and whether it still runs, and
//! the run state of its threads through stat files kept open.

use std::collections::{HashMap, HashSet};

/// Field 22 of /proc/PID/stat: the start time in clock ticks since boot. A PID plus its start
/// time names one process; a reused PID has a different start time.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Tells whether the target still runs, cheaply enough to ask after every read: a pidfd
/// (Linux 5.3+) polls readable once the process has exited, and a PID is not given to another
/// process while the first one lives, so a read followed by "still running" read the target.
/// Without pidfds, the start time in /proc is compared instead.
pub(crate) struct Liveness {
    pid: i32,
    started: u64,
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl Liveness {
    pub(crate) fn open(pid: i32, started: u64) -> Self {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes a PID and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let pidfd = (fd >= 0).then(|| {
            // SAFETY: the descriptor was just returned to us and is owned by nobody else.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }
        });
        let liveness = Liveness {
            pid,
            started,
            pidfd,
        };
        // The pidfd names whatever process has the PID now: make sure it is the target.
        if liveness.pidfd.is_some() && start_time(pid) != Some(started) {
            return Liveness {
                pidfd: None,
                ..liveness
            };
        }
        liveness
    }

    pub(crate) fn same_process(&self) -> bool {
        use std::os::fd::AsRawFd;
        match &self.pidfd {
            Some(fd) => {
                let mut poll = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, zero timeout.
                let ready = unsafe { libc::poll(&mut poll, 1, 0) };
                ready == 0
            }
            None => start_time(self.pid) == Some(self.started),
        }
    }
}

/// `Liveness::same_process` of several targets, their pidfds polled in one system call (the
/// shared clock reads its targets one after another, then asks once whether they still run).
pub(crate) fn same_processes(all: &[&Liveness]) -> Vec<bool> {
    use std::os::fd::AsRawFd;
    let mut polls: Vec<libc::pollfd> = all
        .iter()
        .filter_map(|l| l.pidfd.as_ref())
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `polls` holds valid pollfds for the length given; zero timeout.
    let ready = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, 0) };
    let mut polled = polls.iter();
    all.iter()
        .map(|l| match (&l.pidfd, ready) {
            // readable once the process has exited
            (Some(_), 0..) => polled.next().is_some_and(|p| p.revents == 0),
            _ => l.same_process(),
        })
        .collect()
}

/// The run state (on CPU or not) of a target's threads, through /proc stat files kept open:
/// one read per thread and sample instead of an open, a read and a close.
pub(crate) struct ThreadStates {
    pid: i32,
    files: HashMap<i32, std::fs::File>,
}

impl ThreadStates {
    pub(crate) fn new(pid: i32) -> Self {
        ThreadStates {
            pid,
            files: HashMap::new(),
        }
    }

    /// Is the thread on CPU? (state R in its stat; the name may contain ')' and spaces)
    /// None when `tid` is not a thread of the target as this sidecar's /proc sees it.
    pub(crate) fn running(&mut self, tid: i32) -> Option<bool> {
        use std::os::unix::fs::FileExt;
        if !self.files.contains_key(&tid) {
            let path = format!("/proc/{}/task/{tid}/stat", self.pid);
            self.files.insert(tid, std::fs::File::open(path).ok()?);
        }
        let mut buf = [0u8; 512];
        let Ok(n) = self.files.get(&tid)?.read_at(&mut buf, 0) else {
            self.files.remove(&tid);
            return None;
        };
        let stat = &buf[..n];
        let close = stat.iter().rposition(|&b| b == b')')?;
        stat.get(close + 2).map(|&state| state == b'R')
    }

    /// Closes the files of threads not in `alive`.
    pub(crate) fn keep(&mut self, alive: impl ExactSizeIterator<Item = i32>) {
        if self.files.len() > alive.len() {
            let alive: HashSet<i32> = alive.collect();
            self.files.retain(|tid, _| alive.contains(tid));
        }
    }
}

/// The same process still runs: same start time, and not a zombie waiting to be reaped.
pub(crate) fn process_alive(pid: i32, started: u64) -> bool {
    if start_time(pid) != Some(started) {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat.get(i + 2..i + 3))
        .unwrap_or("X");
    !matches!(state, "Z" | "X" | "x")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_poll_tells_which_of_several_targets_still_run() {
        let open = |pid: u32| {
            let pid = pid as i32;
            Liveness::open(pid, start_time(pid).expect("a start time"))
        };
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep starts");
        let (me, other) = (open(std::process::id()), open(child.id()));
        assert!(other.pidfd.is_some(), "this kernel gives pidfds");
        assert_eq!(same_processes(&[&me, &other, &me]), [true, true, true]);
        child.kill().expect("killed");
        child.wait().expect("reaped");
        assert_eq!(same_processes(&[&me, &other, &me]), [true, false, true]);
        assert_eq!(same_processes(&[]), Vec::<bool>::new());
    }
}
