//! What the sampler reads of /proc about a process: its start time and whether it still runs
//! (its threads' run states are `runstate`'s).

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
pub(crate) fn after_name(stat: &[u8]) -> Option<&[u8]> {
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
/// Kept from tick to tick, so that asking allocates nothing.
#[derive(Default)]
pub(crate) struct Polls {
    fds: Vec<libc::pollfd>,
    same: Vec<bool>,
}

impl Polls {
    /// For each of `all`, in order, whether it is still the same process.
    pub(crate) fn same_processes<'a, I>(&mut self, all: I) -> &[bool]
    where
        I: Iterator<Item = &'a Liveness> + Clone,
    {
        use std::os::fd::AsRawFd;
        self.fds.clear();
        self.fds.extend(
            all.clone()
                .filter_map(|l| l.pidfd.as_ref())
                .map(|fd| libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }),
        );
        // SAFETY: `fds` holds valid pollfds for the length given; zero timeout.
        let ready = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, 0) };
        let mut polled = self.fds.iter();
        self.same.clear();
        self.same.extend(all.map(|l| match (&l.pidfd, ready) {
            // readable once the process has exited
            (Some(_), 0..) => polled.next().is_some_and(|p| p.revents == 0),
            _ => l.same_process(),
        }));
        &self.same
    }
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
        let mut polls = Polls::default();
        let all = [&me, &other, &me];
        assert_eq!(
            polls.same_processes(all.iter().copied()),
            [true, true, true]
        );
        child.kill().expect("killed");
        child.wait().expect("reaped");
        assert_eq!(
            polls.same_processes(all.iter().copied()),
            [true, false, true]
        );
        assert!(polls.same_processes(std::iter::empty()).is_empty());
    }
}
