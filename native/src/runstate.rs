//! The run state of a target's threads, on CPU or not, read from /proc at each sample through
//! files kept open: one read per thread and sample instead of an open, a read and a close.
//!
//! Two files tell it. A thread's `stat` gives its state letter (R: running or runnable) on
//! every kernel, but the kernel formats all of its 52 fields for each read. Its `wchan` names
//! the kernel function a sleeping thread waits in, and reads "0" for one that is running,
//! runnable or being woken: the same line between on CPU and not, for less of the kernel's
//! time (`benchmarks.versions` measures both). It also reads "0", though, where the kernel
//! cannot name a wait: built without kallsyms, with an unwinder that cannot walk a sleeping
//! thread's stack (older kernels without frame pointers), or for a reader without ptrace
//! access to the target. So `wchan` stands in for `stat` only once it has named the wait of a
//! thread of this target whose `stat` showed it asleep. Until then `stat` is read, and `wchan`
//! beside it for a thread found asleep, `WCHAN_TRIES` times at most.
//!
//! Either way a thread counts as on CPU when runnable but waiting for a CPU, as it does in
//! `stat`; and through `wchan`, a main thread that has exited while others run on (a zombie
//! until the process ends) reads as running, where `stat` says Z.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use rustc_hash::FxBuildHasher;

use crate::procfs::after_name;

/// How much of a stat file is read: the state follows the PID and the command name, which the
/// kernel cuts at 15 bytes for a user thread (64 for kernel threads), so it lies in this.
const STAT_HEAD: usize = 96;

/// How many sleeping threads' `wchan` is read beside their `stat` before `stat` is kept for
/// good: a thread its `stat` found asleep may have woken before its `wchan` is read, so one
/// "0" does not yet tell that the kernel names no waits.
const WCHAN_TRIES: u32 = 32;

/// Which file gives the states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// `stat`, with so many tries of `wchan` left.
    Stat(u32),
    /// `wchan`: it named a sleeping thread's wait.
    Wchan,
}

pub(crate) struct ThreadStates {
    pid: i32,
    /// Each thread's open file of the source in use.
    files: HashMap<i32, File, FxBuildHasher>,
    source: Source,
    /// Time spent in the reads of the files so far, timed around each.
    nanos: u64,
}

impl ThreadStates {
    pub(crate) fn new(pid: i32) -> Self {
        ThreadStates {
            pid,
            files: HashMap::default(),
            source: Source::Stat(WCHAN_TRIES),
            nanos: 0,
        }
    }

    /// Is the thread on CPU (running or runnable)? None when `tid` is not a thread of the
    /// target as this sidecar's /proc sees it.
    pub(crate) fn running(&mut self, tid: i32) -> Option<bool> {
        if self.source == Source::Wchan {
            let mut head = [0u8; 2];
            let n = self.read(tid, "wchan", &mut head)?;
            return wchan_is_running(&head[..n]);
        }
        let mut head = [0u8; STAT_HEAD];
        let n = self.read(tid, "stat", &mut head)?;
        let running = state_is_running(&head[..n]);
        if let (Some(false), Source::Stat(tries @ 1..)) = (running, self.source) {
            self.source = if names_a_wait(self.pid, tid) {
                // the stat files go; each thread's wchan is opened at its next read
                self.files.clear();
                Source::Wchan
            } else {
                Source::Stat(tries - 1)
            };
        }
        running
    }

    /// The start of the file `name` of thread `tid` into `buf`, from the file kept open (or
    /// opened now); its length. None when the thread is gone or not the target's.
    fn read(&mut self, tid: i32, name: &str, buf: &mut [u8]) -> Option<usize> {
        let file = match self.files.entry(tid) {
            Entry::Occupied(file) => file.into_mut(),
            Entry::Vacant(slot) => {
                let path = format!("/proc/{}/task/{tid}/{name}", self.pid);
                slot.insert(File::open(path).ok()?)
            }
        };
        let started = Instant::now();
        let read = file.read_at(buf, 0);
        self.nanos += started.elapsed().as_nanos() as u64;
        match read {
            Ok(n) => Some(n),
            Err(_) => {
                self.files.remove(&tid);
                None
            }
        }
    }

    /// Time spent reading the files so far (ns): the kernel's share of the run states.
    pub(crate) fn nanos(&self) -> u64 {
        self.nanos
    }

    /// The file the states come from now: "stat" or "wchan".
    pub(crate) fn file(&self) -> &'static str {
        match self.source {
            Source::Stat(_) => "stat",
            Source::Wchan => "wchan",
        }
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

/// Whether the start of a wchan file says running: "0" alone (no kernel symbol is "0" or
/// begins with a digit). None when it is empty.
fn wchan_is_running(head: &[u8]) -> Option<bool> {
    (!head.is_empty()).then(|| head == b"0")
}

/// Whether the thread's wchan file names the kernel function it waits in.
fn names_a_wait(pid: i32, tid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/task/{tid}/wchan"))
        .is_ok_and(|wchan| wchan_is_running(&wchan) == Some(false))
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
    fn a_wchan_reads_running_as_0_and_asleep_as_a_name() {
        assert_eq!(wchan_is_running(b"0"), Some(true));
        assert_eq!(wchan_is_running(b"do"), Some(false));
        assert_eq!(wchan_is_running(b"hrtimer_nanosleep"), Some(false));
        assert_eq!(wchan_is_running(b""), None);
    }

    /// This process's own thread (running while it reads) and one blocked in `recv`.
    fn with_a_sleeper(check: impl FnOnce(i32, i32)) {
        // SAFETY: gettid takes no arguments.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, wait) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: as above.
            tx.send(unsafe { libc::syscall(libc::SYS_gettid) } as i32)
                .expect("sent");
            wait.recv().ok();
        });
        let tid = rx.recv().expect("its thread id");
        check(me, tid);
        stop.send(()).expect("stopped");
        sleeper.join().expect("joined");
    }

    #[test]
    fn a_thread_of_this_process_reads_as_running_and_a_sleeping_one_not() {
        with_a_sleeper(|me, tid| {
            let mut states = ThreadStates::new(std::process::id() as i32);
            assert_eq!(states.running(me), Some(true));
            // it blocks in recv: asleep once it got there
            let asleep = (0..200).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(5));
                states.running(tid) == Some(false)
            });
            assert!(asleep, "a thread blocked in recv reads as not running");
            assert_eq!(states.running(i32::MAX), None, "no such thread");
        });
    }

    #[test]
    fn wchan_stands_in_for_stat_once_it_named_a_sleeping_threads_wait() {
        with_a_sleeper(|me, tid| {
            let pid = std::process::id() as i32;
            // what this kernel says of the sleeper, read straight from its files
            let asleep_in_stat = (0..200).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(5));
                let stat = std::fs::read(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
                state_is_running(&stat) == Some(false)
            });
            assert!(asleep_in_stat);
            let named = names_a_wait(pid, tid);
            let mut states = ThreadStates::new(pid);
            assert_eq!(states.file(), "stat");
            assert_eq!(states.running(tid), Some(false));
            if named {
                assert_eq!(states.file(), "wchan", "it named the wait: wchan stands in");
                // running and asleep read as they did through stat
                assert_eq!(states.running(me), Some(true));
                assert_eq!(states.running(tid), Some(false));
                assert_eq!(states.running(i32::MAX), None, "no such thread");
            } else {
                // a kernel that names no waits: stat stays, after its tries
                for _ in 0..2 * WCHAN_TRIES {
                    assert_eq!(states.running(tid), Some(false));
                }
                assert_eq!(states.file(), "stat");
            }
        });
    }
}
