//! What the sampler reads of /proc: a process's start time and whether it still runs, and
//! the run state of its threads through stat files kept open.

use std::collections::{HashMap, HashSet};

use rustc_hash::FxBuildHasher;

/// Field 22 of /proc/PID/stat: the start time in clock ticks since boot. A PID plus its start
/// time names one process; a reused PID has a different start time.
pub fn start_time(pid: i32) -> Option<u64> {
    state_and_start(pid).map(|(_, started)| started)
}

/// The state (field 3) and the start time (field 22) of /proc/PID/stat, from one read.
fn state_and_start(pid: i32) -> Option<(u8, u64)> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let rest = std::str::from_utf8(after_name(&stat)?).ok()?;
    Some((rest.as_bytes()[0], rest.split(' ').nth(19)?.parse().ok()?))
}

/// The fields of a stat file after the command name (field 2), from the state on: the name is
/// in parentheses and may hold ')' and spaces, and no later field holds ')'. None when `stat`
/// ends before the state.
fn after_name(stat: &[u8]) -> Option<&[u8]> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2..).filter(|rest| !rest.is_empty())
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
    files: HashMap<i32, std::fs::File, FxBuildHasher>,
}

/// How much of a stat file is read: the state follows the PID and the command name, which the
/// kernel cuts at 15 bytes for a user thread (64 for kernel threads), so it lies in this.
const STAT_HEAD: usize = 96;

impl ThreadStates {
    pub(crate) fn new(pid: i32) -> Self {
        ThreadStates {
            pid,
            files: HashMap::default(),
        }
    }

    /// Is the thread on CPU? (state R in its stat; the name may contain ')' and spaces)
    /// None when `tid` is not a thread of the target as this sidecar's /proc sees it.
    pub(crate) fn running(&mut self, tid: i32) -> Option<bool> {
        use std::collections::hash_map::Entry;
        use std::os::unix::fs::FileExt;
        let file = match self.files.entry(tid) {
            Entry::Occupied(file) => file.into_mut(),
            Entry::Vacant(slot) => {
                let path = format!("/proc/{}/task/{tid}/stat", self.pid);
                slot.insert(std::fs::File::open(path).ok()?)
            }
        };
        let mut buf = [0u8; STAT_HEAD];
        let Ok(n) = file.read_at(&mut buf, 0) else {
            self.files.remove(&tid);
            return None;
        };
        state_is_running(&buf[..n])
    }

    /// Closes the files of threads not in `alive`.
    pub(crate) fn keep(&mut self, alive: impl ExactSizeIterator<Item = i32>) {
        if self.files.len() > alive.len() {
            let alive: HashSet<i32> = alive.collect();
            self.files.retain(|tid, _| alive.contains(tid));
        }
    }
}

/// Whether the head of a stat file (`PID (NAME) STATE ...`) says running (R): the state
/// follows the last ')' (a name may hold ')' and spaces, and no later field does). None when
/// the head holds no state.
fn state_is_running(head: &[u8]) -> Option<bool> {
    after_name(head).map(|rest| rest[0] == b'R')
}

/// The same process still runs: same start time, and not a zombie waiting to be reaped.
pub(crate) fn process_alive(pid: i32, started: u64) -> bool {
    match state_and_start(pid) {
        Some((state, start)) => start == started && !matches!(state, b'Z' | b'X' | b'x'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_is_read_after_the_last_parenthesis_of_the_head() {
        assert_eq!(state_is_running(b"42 (python3) R 1 42 42 0 -1"), Some(true));
        assert_eq!(
            state_is_running(b"42 (python3) S 1 42 42 0 -1"),
            Some(false)
        );
        // a thread name may hold ')' and spaces
        assert_eq!(state_is_running(b"7 (a) R (b) ) S 1 7"), Some(false));
        assert_eq!(state_is_running(b"7 (a) S (b) ) R 1 7"), Some(true));
        // a head cut before the state says nothing
        assert_eq!(state_is_running(b"7 (worker)"), None);
        assert_eq!(state_is_running(b"7 (worker"), None);
        assert_eq!(state_is_running(b""), None);
    }

    #[test]
    fn a_thread_of_this_process_reads_as_running_and_a_sleeping_one_not() {
        let pid = std::process::id() as i32;
        let mut states = ThreadStates::new(pid);
        // this thread runs while it reads its own state
        // SAFETY: gettid takes no arguments.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        assert_eq!(states.running(me), Some(true));
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, wait) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: as above.
            tx.send(unsafe { libc::syscall(libc::SYS_gettid) } as i32)
                .expect("sent");
            wait.recv().ok();
        });
        let tid = rx.recv().expect("its thread id");
        // it blocks in recv: asleep once it got there
        let asleep = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            states.running(tid) == Some(false)
        });
        assert!(asleep, "a thread blocked in recv reads as not running");
        assert_eq!(states.running(i32::MAX), None, "no such thread");
        stop.send(()).expect("stopped");
        sleeper.join().expect("joined");
    }

    #[test]
    fn a_process_is_alive_until_it_exits_even_before_it_is_reaped() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep starts");
        let pid = child.id() as i32;
        let started = start_time(pid).expect("a start time");
        assert!(process_alive(pid, started));
        assert!(
            !process_alive(pid, started + 1),
            "another start time: another process"
        );
        child.kill().expect("killed");
        // a zombie until reaped: its stat file still reads, with state Z
        let dead = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            !process_alive(pid, started)
        });
        assert!(dead, "a killed child not yet reaped reads as gone");
        assert_eq!(start_time(pid), Some(started), "its stat file still reads");
        child.wait().expect("reaped");
        assert!(!process_alive(pid, started));
    }

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
