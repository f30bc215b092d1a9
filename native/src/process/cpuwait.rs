//! Which runnable threads wait for a CPU: the kernel's own accounting of each thread,
//! `/proc/PID/task/TID/schedstat` (nanoseconds on a CPU, nanoseconds waiting on a run queue,
//! times it got a CPU), read for the threads a sample found runnable.
//!
//! A thread's `stat` says R for a thread running and for one the kernel keeps waiting, runnable,
//! for a CPU: a container at its CPU limit (CFS throttling) or more runnable threads than
//! cores. Its `schedstat` tells them apart, but late: the time on a CPU grows at each scheduler
//! tick and when the thread leaves its CPU, the time waiting only when the wait ends (the thread
//! gets a CPU). So a sample's verdict is a ledger per thread, in nanoseconds:
//!
//! - a runnable thread whose counters have not moved for longer than a scheduler tick
//!   (`NO_TICK`) has had no CPU all that time: it waits now. The sample counts as a wait of
//!   the time it stands for (since the last sample), owed by the kernel until it posts it;
//! - otherwise the waits the kernel posted since the thread's last reading are credited, and
//!   the sample counts as a wait while the credit covers half the time it stands for.
//!
//! Over a span the samples that wait then sum to the waiting the kernel counted, as error
//! diffusion sums to its input, and a throttled period's samples wait where they were taken. A
//! kernel without scheduler statistics reads "0 0 0" (or has no file): that is said
//! (`CpuWaits::source`), and no sample is ever said to wait.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use rustc_hash::FxBuildHasher;

/// How much of a schedstat file is read: three decimal numbers of at most 20 digits.
const SCHEDSTAT_HEAD: usize = 72;

/// Longer than a scheduler tick of any kernel's `HZ` (100 and up): a running thread's time on
/// a CPU moves within it.
const NO_TICK: u64 = 12_000_000;

/// The most a ledger holds either way (ns): waits posted long ago do not become samples much
/// later, nor does a wait owed for long go on counting.
const LEDGER_BOUND: i64 = 1_000_000_000;

/// What a thread's schedstat says: ns on a CPU, ns waiting for one, times it got one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Schedstat {
    pub(crate) run: u64,
    pub(crate) wait: u64,
    pub(crate) slices: u64,
}

/// Whether the kernel tells waits, as far as the reads so far say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Told {
    /// Not read yet.
    Unknown,
    Yes,
    /// The file reads "0 0 0" (scheduler statistics off) or cannot be opened.
    Off(&'static str),
}

/// A thread's ledger.
struct Thread {
    file: File,
    last: Schedstat,
    /// When the counters were last seen to move.
    moved: Instant,
    /// Waits the kernel posted less waits counted by samples (ns).
    credit: i64,
    /// Its counters moved unseen since `last` (`CpuWaits::restart`): the next reading is as
    /// a first one.
    stale: bool,
}

pub(crate) struct CpuWaits {
    pid: i32,
    threads: HashMap<i32, Thread, FxBuildHasher>,
    told: Told,
    /// The sample now and the one before: what a sample stands for.
    now: Instant,
    ticked: bool,
    /// The time since the last sample (ns).
    since: u64,
    nanos: u64,
}

impl CpuWaits {
    pub(crate) fn new(pid: i32) -> Self {
        CpuWaits {
            pid,
            threads: HashMap::default(),
            told: Told::Unknown,
            now: Instant::now(),
            ticked: false,
            since: 0,
            nanos: 0,
        }
    }

    /// A new sample begins: the time since the last one is what each of its samples stands
    /// for (the first stands for none).
    pub(crate) fn tick(&mut self) {
        let now = Instant::now();
        if self.ticked {
            self.since = now.duration_since(self.now).as_nanos().min(1_000_000_000) as u64;
        }
        self.ticked = true;
        self.now = now;
    }

    /// Whether the runnable thread `tid` waits for a CPU in this sample. False where the kernel
    /// does not tell, and at a thread's first reading.
    pub(crate) fn waits(&mut self, tid: i32) -> bool {
        if matches!(self.told, Told::Off(_)) {
            return false;
        }
        let thread = match self.threads.entry(tid) {
            Entry::Occupied(thread) => thread.into_mut(),
            Entry::Vacant(slot) => {
                let path = format!("/proc/{}/task/{tid}/schedstat", self.pid);
                let file = match File::open(path) {
                    Ok(file) => file,
                    Err(e) => {
                        // a thread gone says nothing; a file the kernel lacks says it all
                        if e.kind() == std::io::ErrorKind::NotFound && self.told == Told::Unknown {
                            let task = format!("/proc/{}/task/{tid}", self.pid);
                            if std::path::Path::new(&task).exists() {
                                self.told = Told::Off(
                                    "no schedstat file: a kernel without CONFIG_SCHED_INFO",
                                );
                            }
                        }
                        return false;
                    }
                };
                let Some(first) = read_schedstat(&file, &mut self.nanos) else {
                    return false;
                };
                if first == Schedstat::default() {
                    self.told = Told::Off("schedstat reads 0 0 0: scheduler statistics are off");
                    return false;
                }
                self.told = Told::Yes;
                slot.insert(Thread {
                    file,
                    last: first,
                    moved: self.now,
                    credit: 0,
                    stale: false,
                });
                return false;
            }
        };
        let Some(now) = read_schedstat(&thread.file, &mut self.nanos) else {
            self.threads.remove(&tid);
            return false;
        };
        if thread.stale {
            (thread.last, thread.moved, thread.credit) = (now, self.now, 0);
            thread.stale = false;
            return false;
        }
        thread.step(now, self.now, self.since)
    }

    /// Begins again after a span without reads (`ThreadStates::set_cpu_waits`): every ledger
    /// begins afresh at its next reading, as a first one (its counters moved meanwhile
    /// unseen), and the next sample stands for nothing. The files stay open; what the kernel
    /// was found to tell, and the time spent reading, stay too.
    pub(crate) fn restart(&mut self) {
        for thread in self.threads.values_mut() {
            thread.stale = true;
        }
        self.ticked = false;
        self.since = 0;
    }

    /// Forgets the threads not in `alive`.
    pub(crate) fn keep(&mut self, alive: &HashSet<i32>) {
        self.threads.retain(|tid, _| alive.contains(tid));
    }

    /// Where waits for a CPU come from, for `Stats::cpu_wait`: "schedstat", why not, or that
    /// no runnable thread was read yet.
    pub(crate) fn source(&self) -> &'static str {
        match self.told {
            Told::Yes => "schedstat",
            Told::Off(why) => why,
            Told::Unknown => "not read yet (no thread found runnable)",
        }
    }

    /// Threads with a ledger.
    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }

    /// Time spent reading the files (ns).
    pub(crate) fn nanos(&self) -> u64 {
        self.nanos
    }
}

impl Thread {
    /// The verdict of a sample at `at`, standing for the `since` ns since the last one, that
    /// read `now`.
    fn step(&mut self, now: Schedstat, at: Instant, since: u64) -> bool {
        let ran = now.run != self.last.run || now.slices != self.last.slices;
        let posted = now.wait.saturating_sub(self.last.wait);
        self.last = now;
        if ran || posted > 0 {
            self.moved = at;
        }
        let waits = if !ran && at.duration_since(self.moved).as_nanos() as u64 > NO_TICK {
            true
        } else {
            self.credit = (self.credit + posted.min(LEDGER_BOUND as u64) as i64).min(LEDGER_BOUND);
            since > 0 && 2 * self.credit >= since as i64
        };
        if waits {
            self.credit = (self.credit - since as i64).max(-LEDGER_BOUND);
        }
        waits
    }
}

/// The thread's schedstat now, timed into `nanos`; None when it cannot be read (gone).
fn read_schedstat(file: &File, nanos: &mut u64) -> Option<Schedstat> {
    let mut head = [0u8; SCHEDSTAT_HEAD];
    let started = Instant::now();
    let read = file.read_at(&mut head, 0);
    *nanos += started.elapsed().as_nanos() as u64;
    parse_schedstat(&head[..read.ok()?])
}

/// `RUN WAIT SLICES\n`; None for anything else.
pub(crate) fn parse_schedstat(text: &[u8]) -> Option<Schedstat> {
    let text = std::str::from_utf8(text).ok()?;
    let mut fields = text.split_ascii_whitespace().map(|f| f.parse::<u64>().ok());
    let (Some(Some(run)), Some(Some(wait)), Some(Some(slices))) =
        (fields.next(), fields.next(), fields.next())
    else {
        return None;
    };
    Some(Schedstat { run, wait, slices })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    /// A thread that has run once, read now: when, its counters, its ledger.
    fn started() -> (Instant, Schedstat, Thread) {
        let (at, last) = (
            Instant::now(),
            Schedstat {
                run: 1,
                wait: 0,
                slices: 1,
            },
        );
        let file = File::open("/proc/self/schedstat").expect("a schedstat file");
        (
            at,
            last,
            Thread {
                file,
                last,
                moved: at,
                credit: 0,
                stale: false,
            },
        )
    }

    #[test]
    fn a_schedstat_line_is_three_numbers() {
        assert_eq!(
            parse_schedstat(b"1862345678 5910000000 4312\n"),
            Some(Schedstat {
                run: 1_862_345_678,
                wait: 5_910_000_000,
                slices: 4312
            })
        );
        assert_eq!(parse_schedstat(b"0 0 0\n"), Some(Schedstat::default()));
        assert_eq!(parse_schedstat(b"12 34"), None);
        assert_eq!(parse_schedstat(b"12 x 5"), None);
        assert_eq!(parse_schedstat(b""), None);
    }

    /// A thread throttled 80 ms of every 100 (a quota of 0.2 CPU), sampled every 10 ms: its
    /// counters stand still while it is throttled and the wait is posted when it runs again.
    #[test]
    fn a_throttled_threads_samples_wait_for_the_share_the_kernel_counts() {
        let (mut at, mut stat, mut t) = started();
        let mut waits = 0;
        for period in 0..20u64 {
            for tick in 0..10u64 {
                at += Duration::from_millis(10);
                if tick < 2 {
                    // on a CPU: the ticks move its time; the first posts the wait just ended
                    stat.run += 10 * MS;
                    if tick == 0 && period > 0 {
                        stat.wait += 80 * MS;
                        stat.slices += 1;
                    }
                }
                waits += u32::from(t.step(stat, at, 10 * MS));
            }
        }
        // 160 of 200 samples waited: within a sample or two
        assert!(
            (158..=162).contains(&waits),
            "{waits} of 200 samples waited"
        );
    }

    /// Two threads sharing one CPU, switched every 4 ms (a 250 Hz kernel): each waits about
    /// half the time, posted in small pieces as it gets the CPU back.
    #[test]
    fn a_thread_sharing_its_cpu_waits_about_half_its_samples() {
        let (mut at, mut stat, mut t) = started();
        let mut waits = 0;
        let mut clock = 0u64; // ms, the thread runs in even 4 ms slots
        for _ in 0..1000 {
            for _ in 0..10 {
                clock += 1;
                let slot = (clock - 1) / 4;
                if slot.is_multiple_of(2) {
                    stat.run += MS;
                    if (clock - 1).is_multiple_of(4) && clock > 1 {
                        stat.wait += 4 * MS;
                        stat.slices += 1;
                    }
                }
            }
            at += Duration::from_millis(10);
            waits += u32::from(t.step(stat, at, 10 * MS));
        }
        assert!(
            (480..=520).contains(&waits),
            "{waits} of 1000 samples waited"
        );
    }

    #[test]
    fn a_running_thread_never_waits() {
        let (mut at, mut stat, mut t) = started();
        for _ in 0..500 {
            at += Duration::from_millis(10);
            stat.run += 10 * MS;
            assert!(!t.step(stat, at, 10 * MS));
        }
        // sampled faster than the kernel's tick: its counters stand still between two
        for _ in 0..500 {
            at += Duration::from_millis(1);
            if at.duration_since(t.moved) >= Duration::from_millis(4) {
                stat.run += 4 * MS;
            }
            assert!(!t.step(stat, at, MS));
        }
    }

    /// Turned off and on again (a benchmark's crossover): the first reading after says
    /// nothing, as at a thread's first, and its file stays open.
    #[test]
    fn a_restart_begins_each_ledger_afresh() {
        let mut waits = CpuWaits::new(std::process::id() as i32);
        // SAFETY: gettid takes no arguments.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        waits.tick();
        assert!(!waits.waits(tid), "a first reading says nothing");
        waits.tick();
        waits.waits(tid);
        if waits.source() != "schedstat" {
            return; // a kernel without scheduler statistics: nothing is ever said to wait
        }
        let thread = waits.threads.get_mut(&tid).expect("a ledger");
        // as if the kernel had posted a long wait meanwhile, unseen
        thread.credit = LEDGER_BOUND;
        waits.restart();
        waits.tick();
        assert!(
            !waits.waits(tid),
            "the first reading after a restart says nothing"
        );
        assert_eq!(waits.len(), 1, "its file stays open");
        let thread = &waits.threads[&tid];
        assert!(!thread.stale);
        assert_eq!(thread.credit, 0, "what was owed before is forgotten");
        assert_eq!(
            waits.since, 0,
            "the sample after a restart stands for nothing"
        );
    }

    #[test]
    fn this_processs_threads_are_read_and_a_running_one_does_not_wait() {
        let mut waits = CpuWaits::new(std::process::id() as i32);
        // SAFETY: gettid takes no arguments.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        waits.tick();
        assert!(!waits.waits(tid), "a first reading says nothing");
        let mut waited = 0;
        for _ in 0..50 {
            let spin = Instant::now();
            while spin.elapsed() < Duration::from_millis(2) {
                std::hint::spin_loop();
            }
            waits.tick();
            waited += u32::from(waits.waits(tid));
        }
        assert!(matches!(
            waits.source(),
            "schedstat" | "schedstat reads 0 0 0: scheduler statistics are off"
        ));
        // this thread ran all along, but a loaded machine may have kept it waiting some
        assert!(
            waited < 50,
            "{waited} of 50 samples of a spinning thread waited"
        );
        assert!(!waits.waits(i32::MAX), "no such thread");
    }
}
