//! What one read of a thread's `/proc/PID/task/TID/schedstat` costs, alone: the kernel's part
//! of the read that tells the threads waiting for a CPU (`src/process/cpuwait.rs`), against the
//! other reads and calls a sample makes around it.
//!
//!     schedstat [CALLS]
//!
//! Starts two threads of its own, one spinning (always runnable, as the read's worst case
//! finds it) and one asleep in a pipe's read, and times in this thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) batches of CALLS (default 20,000) of each of:
//! - `schedstat_spinning`, `schedstat_sleeping`: a `pread` of the first 72 bytes of the
//!   thread's `schedstat`, from a file kept open (as the sampler reads it);
//! - `stat_spinning`, `syscall_spinning`: the same of its `stat` (96 bytes) and `syscall` (40),
//!   the files the sampler reads a thread's run state from;
//! - `getppid`: a system call that does nothing, the floor of any call;
//! - `instant_now`: one `Instant::now()`;
//! - `open_missing`: the path of a thread that is not there formatted and opened (it fails).
//!
//! The batches go round in turns, 15 turns; it prints one JSON object, each figure in ns per
//! call: the median turn and the least.

use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::os::unix::io::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Instant;

const TURNS: usize = 15;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which lives on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// A `pread` of the first `len` bytes of `file`, as the sampler reads.
fn pread(file: &File, len: usize) {
    let mut buf = [0u8; 128];
    black_box(file.read_at(&mut buf[..len], 0).ok());
}

fn main() {
    let calls: u64 = std::env::args()
        .nth(1)
        .map_or(20_000, |a| a.parse().expect("CALLS is a number"));
    let pid = std::process::id();

    let (spinning, done) = (
        Arc::new(AtomicI32::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let spinner = std::thread::spawn({
        let (spinning, done) = (Arc::clone(&spinning), Arc::clone(&done));
        move || {
            spinning.store(gettid(), Ordering::Release);
            while !done.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        }
    });
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "a pipe");
    // SAFETY: both descriptors are this process's, each owned once.
    let (mut reader, writer) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    let sleeping = Arc::new(AtomicI32::new(0));
    let sleeper = std::thread::spawn({
        let sleeping = Arc::clone(&sleeping);
        move || {
            sleeping.store(gettid(), Ordering::Release);
            let mut byte = [0u8; 1];
            let _ = reader.read(&mut byte);
        }
    });
    let tid_of = |t: &AtomicI32| loop {
        match t.load(Ordering::Acquire) {
            0 => std::thread::yield_now(),
            tid => break tid,
        }
    };
    let (spin_tid, sleep_tid) = (tid_of(&spinning), tid_of(&sleeping));
    std::thread::sleep(std::time::Duration::from_millis(50)); // the sleeper is in its read
    let open = |tid: i32, name: &str| {
        File::open(format!("/proc/{pid}/task/{tid}/{name}")).expect("a file of this process")
    };
    let (spin_sched, sleep_sched) = (open(spin_tid, "schedstat"), open(sleep_tid, "schedstat"));
    let (spin_stat, spin_syscall) = (open(spin_tid, "stat"), open(spin_tid, "syscall"));

    type Case<'a> = (&'static str, Box<dyn Fn() + 'a>);
    let cases: Vec<Case<'_>> = vec![
        ("schedstat_spinning", Box::new(|| pread(&spin_sched, 72))),
        ("schedstat_sleeping", Box::new(|| pread(&sleep_sched, 72))),
        ("stat_spinning", Box::new(|| pread(&spin_stat, 96))),
        ("syscall_spinning", Box::new(|| pread(&spin_syscall, 40))),
        // SAFETY: getppid takes no arguments.
        (
            "getppid",
            Box::new(|| {
                black_box(unsafe { libc::getppid() });
            }),
        ),
        (
            "instant_now",
            Box::new(|| {
                black_box(Instant::now());
            }),
        ),
        (
            "open_missing",
            Box::new(|| {
                let path = format!("/proc/{pid}/task/{}/schedstat", i32::MAX);
                black_box(File::open(path).is_err());
            }),
        ),
    ];
    let mut turns: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for _ in 0..TURNS {
        for (i, (_, case)) in cases.iter().enumerate() {
            let started = thread_cpu_ns();
            for _ in 0..calls {
                case();
            }
            turns[i].push((thread_cpu_ns() - started) as f64 / calls as f64);
        }
    }
    done.store(true, Ordering::Relaxed);
    drop(writer); // the sleeper's read returns
    spinner.join().expect("joined");
    sleeper.join().expect("joined");

    let figures: Vec<String> = cases
        .iter()
        .zip(&mut turns)
        .map(|((name, _), ns)| {
            ns.sort_by(f64::total_cmp);
            format!(
                "\"{name}\": {{\"median_ns\": {:.1}, \"least_ns\": {:.1}}}",
                ns[ns.len() / 2],
                ns[0]
            )
        })
        .collect();
    println!(
        "{{\"calls\": {calls}, \"turns\": {TURNS}, {}}}",
        figures.join(", ")
    );
}
