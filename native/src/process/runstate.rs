//! The run state of a target's threads, on CPU or not, read from /proc at each sample through
//! files kept open: one read per thread and sample instead of an open, a read and a close.
//!
//! Two files tell it. A thread's `stat` gives its state letter (R: running or runnable) on
//! every kernel, but the kernel formats all of its 52 fields for each read. Its `syscall` reads
//! "running" for a thread that is running or runnable, and for one asleep the system call it
//! waits in (or -1 outside one), taken from its saved registers: the same line between on CPU
//! and not, for less of the kernel's time when the thread sleeps (`benchmarks.versions`
//! measures both). It holds nothing for a reader without ptrace access to the target (the read
//! fails) and is readable by the target's owner only, and kernels without the tracehook
//! (outside x86, arm64 and the like) lack it; so `syscall` stands in for `stat` only once it
//! has named the system call of a thread of this target whose `stat` showed it asleep. Until
//! then `stat` is read, and `syscall` beside it for a thread found asleep, `SYSCALL_TRIES`
//! times at most.
//!
//! Either way a thread that is runnable but waiting for a CPU reads as running, as it does in
//! `stat`: which runnable threads wait is `super::cpuwait`'s, from their `schedstat`. `wchan`, which names the kernel function a sleeping thread waits in, is not used: it
//! reads "0" (as if running) for a thread that has gone to sleep while the scheduler still
//! keeps it queued (the delayed dequeue of Linux 6.12+), which made a target sleeping 5,000
//! times a second read 15.7 % on CPU where `stat` and `syscall` read 14.1 and 14.0; and it
//! costs the kernel an unwind of the sleeping thread's stack and a symbol lookup per read.
//! What `syscall` costs instead is a wait while a thread that is going to sleep is still on its
//! CPU, a few microseconds, and only at that instant; and, as it takes the lock that guards the
//! target's credentials, a wait while the target starts another program (`execve`), after
//! which it is another process and its sampling ends.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use rustc_hash::FxBuildHasher;

use super::cpuwait::CpuWaits;
use super::procfs::after_name;

/// How much of a stat file is read: the state follows the PID and the command name, which the
/// kernel cuts at 15 bytes for a user thread (64 for kernel threads), so it lies in this.
const STAT_HEAD: usize = 96;

/// How much of a syscall file is read: the call's number and its first argument (a futex's
/// address), `NR 0xADDRESS ` in at most 4 + 19 bytes, with room to spare.
const SYSCALL_HEAD: usize = 40;

/// How many sleeping threads' `syscall` is read beside their `stat` before `stat` is kept for
/// good: a thread its `stat` found asleep may have woken before its `syscall` is read, so one
/// "running" does not yet tell that the file cannot name its system calls.
const SYSCALL_TRIES: u32 = 32;

/// Which file gives the states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// `stat`, with so many tries of `syscall` left.
    Stat(u32),
    /// `syscall`: it named a sleeping thread's system call.
    Syscall,
}

/// What a thread's `syscall` file says of a futex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Futex {
    /// Asleep in `futex(2)` on this address.
    At(usize),
    /// Running, or asleep in another system call or outside one.
    No,
    /// The file cannot be read (no ptrace access to the target, a kernel without it, a
    /// thread gone).
    Unreadable,
}

pub(crate) struct ThreadStates {
    pid: i32,
    /// Each thread's open file of the source in use.
    files: HashMap<i32, File, FxBuildHasher>,
    /// Each thread's `syscall` file while the source is `stat` (`futex`).
    syscalls: HashMap<i32, File, FxBuildHasher>,
    /// What the last read of a `syscall` file said of a futex, and whose it was.
    last_futex: Option<(i32, Futex)>,
    /// Reads of `syscall` files for a futex that succeeded, and that failed.
    futex_reads: (u64, u64),
    source: Source,
    /// Time spent in the reads of the files so far, timed around each.
    nanos: u64,
    /// Which runnable threads wait for a CPU, and whether that is read now.
    cpu: CpuWaits,
    cpu_on: bool,
}

impl ThreadStates {
    pub(crate) fn new(pid: i32) -> Self {
        ThreadStates {
            pid,
            files: HashMap::default(),
            syscalls: HashMap::default(),
            last_futex: None,
            futex_reads: (0, 0),
            source: Source::Stat(SYSCALL_TRIES),
            nanos: 0,
            cpu: CpuWaits::new(pid),
            cpu_on: true,
        }
    }

    /// Whether runnable threads are told waiting for a CPU from their `schedstat`; without,
    /// none is said to wait and nothing is read (the benchmarks measure what the read costs
    /// against samplers without, and turn it on and off in one sampler). Turned on again, it
    /// begins afresh (`CpuWaits::restart`).
    pub(crate) fn set_cpu_waits(&mut self, on: bool) {
        if on && !self.cpu_on {
            self.cpu.restart();
        }
        self.cpu_on = on;
    }

    /// A sample begins (`CpuWaits::tick`).
    pub(crate) fn tick(&mut self) {
        if self.cpu_on {
            self.cpu.tick();
        }
    }

    /// Whether the thread `tid`, found running (runnable), waits for a CPU
    /// (`CpuWaits::waits`); false when not asked.
    pub(crate) fn waits_for_cpu(&mut self, tid: i32) -> bool {
        self.cpu_on && self.cpu.waits(tid)
    }

    /// Where waits for a CPU come from (`CpuWaits::source`), or that they are not read.
    pub(crate) fn cpu_wait_source(&self) -> &'static str {
        if self.cpu_on {
            self.cpu.source()
        } else {
            "not read (asked not to)"
        }
    }

    /// Is the thread on CPU (running or runnable)? None when `tid` is not a thread of the
    /// target as this sidecar's /proc sees it.
    pub(crate) fn running(&mut self, tid: i32) -> Option<bool> {
        if self.source == Source::Syscall {
            // the kernel formats the whole line whatever is read: the futex comes with it
            let mut head = [0u8; SYSCALL_HEAD];
            let Some(n) = self.read(tid, "syscall", &mut head) else {
                self.last_futex = Some((tid, Futex::Unreadable));
                return None;
            };
            self.last_futex = Some((tid, futex_of(&head[..n])));
            return syscall_is_running(&head[..n]);
        }
        let mut head = [0u8; STAT_HEAD];
        let n = self.read(tid, "stat", &mut head)?;
        let running = state_is_running(&head[..n]);
        if let (Some(false), Source::Stat(tries @ 1..)) = (running, self.source) {
            self.source = if names_a_syscall(self.pid, tid) {
                // the stat files go; each thread's syscall is opened at its next read
                self.files.clear();
                Source::Syscall
            } else {
                Source::Stat(tries - 1)
            };
        }
        running
    }

    /// What the thread's `syscall` file says of a futex now: taken from the read `running`
    /// just made of it where it was that file, read otherwise.
    pub(crate) fn futex(&mut self, tid: i32) -> Futex {
        let futex = match self.last_futex.take() {
            Some((last, futex)) if last == tid => futex,
            _ => {
                let mut head = [0u8; SYSCALL_HEAD];
                let files = match self.source {
                    Source::Syscall => &mut self.files,
                    Source::Stat(_) => &mut self.syscalls,
                };
                match read_kept(files, self.pid, tid, "syscall", &mut head, &mut self.nanos) {
                    Some(n) => futex_of(&head[..n]),
                    None => Futex::Unreadable,
                }
            }
        };
        match futex {
            Futex::Unreadable => self.futex_reads.1 += 1,
            _ => self.futex_reads.0 += 1,
        }
        futex
    }

    /// Whether `futex` can tell: false once its reads failed and none succeeded (a reader
    /// without ptrace access to the target as its owner, a kernel without the file); a read
    /// that fails because the thread just exited does not make it so.
    pub(crate) fn futex_readable(&self) -> bool {
        self.futex_reads.0 > 0 || self.futex_reads.1 == 0
    }

    /// The start of the file `name` of thread `tid` into `buf`, from the file kept open (or
    /// opened now); its length. None when the thread is gone or not the target's.
    fn read(&mut self, tid: i32, name: &str, buf: &mut [u8]) -> Option<usize> {
        read_kept(&mut self.files, self.pid, tid, name, buf, &mut self.nanos)
    }

    /// Time spent reading the files so far (ns): the kernel's share of the run states, with
    /// the waits for a CPU.
    pub(crate) fn nanos(&self) -> u64 {
        self.nanos + self.cpu.nanos()
    }

    /// The file the states come from now: "stat" or "syscall".
    pub(crate) fn file(&self) -> &'static str {
        match self.source {
            Source::Stat(_) => "stat",
            Source::Syscall => "syscall",
        }
    }

    /// Closes the files of threads not in `alive`.
    pub(crate) fn keep(&mut self, alive: impl ExactSizeIterator<Item = i32>) {
        if self.files.len().max(self.cpu.len()) > alive.len() {
            let alive: HashSet<i32> = alive.collect();
            self.files.retain(|tid, _| alive.contains(tid));
            self.syscalls.retain(|tid, _| alive.contains(tid));
            self.cpu.keep(&alive);
        }
    }
}

/// The start of the file `name` of thread `tid` of `pid` into `buf`, from the file `files`
/// keeps open (or opened now), timed into `nanos`; its length. None when the thread is gone or
/// not the target's.
fn read_kept(
    files: &mut HashMap<i32, File, FxBuildHasher>,
    pid: i32,
    tid: i32,
    name: &str,
    buf: &mut [u8],
    nanos: &mut u64,
) -> Option<usize> {
    let file = match files.entry(tid) {
        Entry::Occupied(file) => file.into_mut(),
        Entry::Vacant(slot) => {
            let path = format!("/proc/{pid}/task/{tid}/{name}");
            slot.insert(File::open(path).ok()?)
        }
    };
    let started = Instant::now();
    let read = file.read_at(buf, 0);
    *nanos += started.elapsed().as_nanos() as u64;
    match read {
        Ok(n) => Some(n),
        Err(_) => {
            files.remove(&tid);
            None
        }
    }
}

/// Whether the head of a stat file (`PID (NAME) STATE ...`) says running (R): the state
/// follows the last ')' (a name may hold ')' and spaces, and no later field does). None when
/// the head holds no state.
fn state_is_running(head: &[u8]) -> Option<bool> {
    after_name(head).map(|rest| rest[0] == b'R')
}

/// Whether the start of a syscall file says running: "running", where a sleeping thread's
/// begins with its system call's number or with -1 (asleep outside one). None when it is empty
/// or begins otherwise.
fn syscall_is_running(head: &[u8]) -> Option<bool> {
    match head.first()? {
        b'r' => Some(true),
        b'0'..=b'9' | b'-' => Some(false),
        _ => None,
    }
}

/// What the start of a syscall file (`NR ARG1 ...`, or "running") says of a futex.
fn futex_of(head: &[u8]) -> Futex {
    let text = String::from_utf8_lossy(head);
    let mut fields = text.split_ascii_whitespace();
    let (Some(number), Some(first)) = (fields.next(), fields.next()) else {
        return match head.first() {
            Some(_) => Futex::No,
            None => Futex::Unreadable,
        };
    };
    if number.parse::<i64>().ok() != Some(libc::SYS_futex) {
        return Futex::No;
    }
    match first
        .strip_prefix("0x")
        .and_then(|hex| usize::from_str_radix(hex, 16).ok())
    {
        Some(address) => Futex::At(address),
        None => Futex::No,
    }
}

/// Whether the thread's syscall file names the system call it sleeps in.
fn names_a_syscall(pid: i32, tid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/task/{tid}/syscall"))
        .is_ok_and(|syscall| syscall_is_running(&syscall) == Some(false))
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
    fn a_syscall_file_names_the_futex_a_thread_sleeps_on() {
        let futex = format!("{} 0x7f3a2c001028 0x189 0x0 0x0 0x7ffd", libc::SYS_futex);
        assert_eq!(futex_of(futex.as_bytes()), Futex::At(0x7f3a_2c00_1028));
        assert_eq!(futex_of(b"running\n"), Futex::No);
        assert_eq!(futex_of(b"232 0x3 0x7ffd 0x80"), Futex::No);
        assert_eq!(futex_of(b"-1 0x7ffe 0x4011"), Futex::No);
        assert_eq!(futex_of(b""), Futex::Unreadable);
    }

    #[test]
    fn a_syscall_file_reads_running_as_such_and_asleep_as_a_call() {
        assert_eq!(syscall_is_running(b"running\n"), Some(true));
        assert_eq!(syscall_is_running(b"ru"), Some(true));
        // read(2) is call 0 on x86-64; -1: asleep outside a system call
        assert_eq!(syscall_is_running(b"0 0x3 0x7ffd"), Some(false));
        assert_eq!(
            syscall_is_running(b"230 0x1 0x1 0x7ffe1bb3ae90"),
            Some(false)
        );
        assert_eq!(syscall_is_running(b"-1 0x7ffe 0x4011"), Some(false));
        assert_eq!(syscall_is_running(b""), None);
        assert_eq!(syscall_is_running(b"?"), None);
    }

    /// A thread of this process that spins (running, or runnable while others have the CPUs)
    /// and one blocked in `recv`. Not the reading thread itself: its `syscall` file names the
    /// very read (a sampler never reads its own thread's state).
    fn with_threads(check: impl FnOnce(i32, i32)) {
        use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
        use std::sync::Arc;
        // SAFETY (both): gettid takes no arguments.
        let gettid = || unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        let (spinning, done) = (
            Arc::new(AtomicI32::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let spinner = std::thread::spawn({
            let (spinning, done) = (Arc::clone(&spinning), Arc::clone(&done));
            // no system call once its id is out, so nothing it does can put it to sleep
            move || {
                spinning.store(gettid(), Ordering::Release);
                while !done.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            }
        });
        let spinning = loop {
            match spinning.load(Ordering::Acquire) {
                0 => std::thread::yield_now(),
                tid => break tid,
            }
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, wait) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            tx.send(gettid()).expect("sent");
            wait.recv().ok();
        });
        let tid = rx.recv().expect("its thread id");
        check(spinning, tid);
        done.store(true, Ordering::Relaxed);
        stop.send(()).expect("stopped");
        spinner.join().expect("joined");
        sleeper.join().expect("joined");
    }

    #[test]
    fn a_thread_of_this_process_reads_as_running_and_a_sleeping_one_not() {
        with_threads(|spinning, tid| {
            let mut states = ThreadStates::new(std::process::id() as i32);
            assert_eq!(states.running(spinning), Some(true));
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
    fn syscall_stands_in_for_stat_once_it_named_a_sleeping_threads_call() {
        with_threads(|spinning, tid| {
            let pid = std::process::id() as i32;
            // what this kernel says of the sleeper, read straight from its files
            let asleep_in_stat = (0..200).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(5));
                let stat = std::fs::read(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
                state_is_running(&stat) == Some(false)
            });
            assert!(asleep_in_stat);
            let named = names_a_syscall(pid, tid);
            let mut states = ThreadStates::new(pid);
            assert_eq!(states.file(), "stat");
            assert_eq!(states.running(tid), Some(false));
            if named {
                assert_eq!(
                    states.file(),
                    "syscall",
                    "it named the call: syscall stands in"
                );
                // running and asleep read as they did through stat
                assert_eq!(states.running(spinning), Some(true));
                assert_eq!(states.running(tid), Some(false));
                assert_eq!(states.running(i32::MAX), None, "no such thread");
            } else {
                // a kernel (or a reader) that cannot name them: stat stays, after its tries
                for _ in 0..2 * SYSCALL_TRIES {
                    assert_eq!(states.running(tid), Some(false));
                }
                assert_eq!(states.file(), "stat");
            }
        });
    }
}
