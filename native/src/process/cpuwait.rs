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
//!
//! A thread that ran all the time between each two of its last `STEADY` readings, sampled
//! runnable at each sample, with waits posted for under a quarter of that time (a wake-up's
//! wait on the run queue, as a thread that takes the GIL back from another posts it), is read
//! at every `SPACING`-th sample only, and the samples between stand as running: the steady
//! spinner, the read's worst case, costs a quarter of the reads.
//! A wait that begins meanwhile is not lost: the next reading finds the counters still (a
//! wait now, and reads at every sample again), and the kernel posts the whole wait when it
//! ends, which the ledger then counts on later samples. Only where it is placed can move, by
//! `SPACING` samples at most, and only at the end of a steady run; a thread that waits often
//! (a throttled container, a shared CPU) never gets steady and is read at every sample.

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

/// Readings in a row that found the thread on a CPU all along since the one before, waits
/// posted for under a quarter of that time, before it is read less often.
const STEADY: u32 = 10;

/// A steady thread is read at every this many samples.
const SPACING: u32 = 4;

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
    /// When the counters were last seen to move, and last read.
    moved: Instant,
    read: Instant,
    /// Waits the kernel posted less waits counted by samples (ns).
    credit: i64,
    /// Its counters moved unseen since `last` (`CpuWaits::restart`): the next reading is as
    /// a first one.
    stale: bool,
    /// Readings in a row that found it on a CPU all along, little waited (`STEADY`).
    steady: u32,
    /// The sample it was last asked of (`CpuWaits::samples`), and how many samples in a row
    /// it was left unread since its last reading.
    asked: u64,
    unread: u32,
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
    /// Samples begun so far.
    samples: u64,
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
            samples: 0,
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
        self.samples += 1;
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
                slot.insert(Thread::new(file, first, self.now, self.samples));
                return false;
            }
        };
        if thread.spare(self.samples) {
            return false;
        }
        let Some(now) = read_schedstat(&thread.file, &mut self.nanos) else {
            self.threads.remove(&tid);
            return false;
        };
        if thread.stale {
            (thread.last, thread.moved, thread.read) = (now, self.now, self.now);
            (thread.credit, thread.steady) = (0, 0);
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
    fn new(file: File, first: Schedstat, at: Instant, sample: u64) -> Self {
        Thread {
            file,
            last: first,
            moved: at,
            read: at,
            credit: 0,
            stale: false,
            steady: 0,
            asked: sample,
            unread: 0,
        }
    }

    /// Whether the sample numbered `sample` leaves the thread unread: a steady thread between
    /// its readings, asked at each sample since the last.
    fn spare(&mut self, sample: u64) -> bool {
        let in_a_row = self.asked + 1 == sample;
        self.asked = sample;
        if in_a_row && self.steady >= STEADY && self.unread + 1 < SPACING {
            self.unread += 1;
            return true;
        }
        if !in_a_row {
            self.steady = 0;
        }
        self.unread = 0;
        false
    }

    /// The verdict of a sample at `at`, standing for the `since` ns since the last one, that
    /// read `now`.
    fn step(&mut self, now: Schedstat, at: Instant, since: u64) -> bool {
        let ran = now.run != self.last.run || now.slices != self.last.slices;
        let posted = now.wait.saturating_sub(self.last.wait);
        // on a CPU all the time since the last reading, a scheduler tick or so aside, and a
        // small part of it waiting for one (the run queue's wait of a wake-up)
        let elapsed = at.duration_since(self.read).as_nanos() as u64;
        let all_along = now.run.saturating_sub(self.last.run) + NO_TICK >= elapsed
            && posted.saturating_mul(4) < elapsed;
        (self.last, self.read) = (now, at);
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
        self.steady = if all_along && !waits {
            self.steady.saturating_add(1)
        } else {
            0
        };
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
        (at, last, Thread::new(file, last, at, 0))
    }

    /// The counters of a thread throttled 80 ms of every 100 (a quota of 0.2 CPU) at 10 ms
    /// `tick` of `period`: on a CPU the first two ticks, which move its time, the first of
    /// them posting the wait just ended.
    fn throttled(stat: &mut Schedstat, period: u64, tick: u64) {
        if tick < 2 {
            stat.run += 10 * MS;
            if tick == 0 && period > 0 {
                stat.wait += 80 * MS;
                stat.slices += 1;
            }
        }
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
                throttled(&mut stat, period, tick);
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

    /// A sample of the ledger `t` at sample number `n`, as `CpuWaits::waits` takes it: left
    /// unread if steady, else read; Some(verdict) when read.
    fn sample(t: &mut Thread, n: u64, stat: Schedstat, at: Instant) -> Option<bool> {
        (!t.spare(n)).then(|| t.step(stat, at, 10 * MS))
    }

    /// A steady spinner is read at one sample in `SPACING` once it has run at `STEADY` readings
    /// in a row; asked again after a sample without it (asleep then), at every sample again.
    #[test]
    fn a_steady_thread_is_read_less_often() {
        let (mut at, mut stat, mut t) = started();
        let mut reads = 0;
        for n in 1..=410u64 {
            at += Duration::from_millis(10);
            stat.run += 10 * MS;
            if let Some(waits) = sample(&mut t, n, stat, at) {
                assert!(!waits);
                reads += 1;
            }
        }
        assert_eq!(reads, STEADY as u64 + 400 / SPACING as u64);
        // not asked at sample 411 (it slept): read at the next ones, until steady again
        for n in 412..412 + u64::from(STEADY) {
            at += Duration::from_millis(10);
            stat.run += 10 * MS;
            assert_eq!(sample(&mut t, n, stat, at), Some(false), "sample {n}");
        }
    }

    /// A steady spinner throttled from some instant on, 80 ms of every 100: its waits are told
    /// as a thread's read at every sample are, within a few samples, and the samples left
    /// unread once it has no CPU are fewer than `SPACING`: it is read at every sample after.
    #[test]
    fn a_steady_thread_throttled_waits_its_share() {
        let (mut at, mut stat, mut t) = started();
        let mut n = 0u64;
        for _ in 0..100 {
            n += 1;
            at += Duration::from_millis(10);
            stat.run += 10 * MS;
            sample(&mut t, n, stat, at);
        }
        let (mut waits, mut unread) = (0, 0);
        for period in 0..20u64 {
            for tick in 0..10u64 {
                n += 1;
                at += Duration::from_millis(10);
                throttled(&mut stat, period, tick);
                match sample(&mut t, n, stat, at) {
                    Some(told) => waits += u32::from(told),
                    // a sample left unread while the thread has no CPU stands as running
                    None => unread += u32::from(tick >= 2),
                }
            }
        }
        assert!(
            (156..=162).contains(&waits),
            "{waits} of 200 samples waited"
        );
        assert!(unread < SPACING, "{unread} samples throttled and unread");
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
