//! OS thread ids of Python threads whose interpreter does not record them (CPython before
//! 3.11, read through py-spy without libunwind).
//!
//! There a thread state's `thread_id` is the thread's `pthread_self()`: the address of the C
//! library's thread descriptor (`struct pthread`), which holds the kernel's thread id. Where
//! it holds it is found once per target by calibration: the offset at which every Python
//! thread's descriptor holds a distinct thread id of the target, as /proc lists them. Each
//! thread's id is read once, when it is first met, and read again when it is no longer a
//! thread of the target (a descriptor is reused by the next thread after one exits).
//!
//! `OnCpu` gives each thread py-spy reads its OS thread id and the OS's run state through the
//! map, and says where the states of a sample came from (`Stats::on_cpu`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use py_spy::StackTrace;

use crate::process::memory::read_upto;
use crate::process::runstate::{Futex, ThreadStates};
use crate::rules::{wait_of, Wait};
use crate::stack::{RunState, Trace};

/// Bytes of each descriptor that calibration looks at.
const SPAN: usize = 2048;
/// Offsets of the thread id that are known to be right, preferred when several fit: glibc on
/// x86_64 (`tid` after the 704-byte TCB header and the list links), musl on 64-bit machines.
const KNOWN: [usize; 2] = [0x2d0, 48];
/// How often threads whose descriptor holds no thread id of the target are read again.
const LOST_RETRY: Duration = Duration::from_secs(1);
/// Thread ids checked against /proc kept at most (they are cleared past this).
const MAX_CHECKED: usize = 4096;

/// What the map says of a Python thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mapped {
    /// Its OS thread id.
    Tid(i32),
    /// It exited while it was read: its descriptor holds 0 or -1 (glibc's marks of an exited
    /// and a joined thread) or the id it had, which is no thread any more; that id, if known.
    Exited(Option<i32>),
    /// No mapping: `ThreadMap::failure` says why.
    Unknown,
}

/// Maps the `pthread_t` of a target's Python threads to their OS thread ids.
pub(crate) struct ThreadMap {
    pid: i32,
    /// Where the thread id lies in a descriptor, once calibrated.
    offset: Option<usize>,
    /// Why some threads have no OS thread id: the last calibration's or read's failure.
    failure: Option<String>,
    /// The threads the last calibration failed with; tried again when they change.
    tried: Vec<u64>,
    tids: HashMap<u64, i32>,
    /// Ids of threads forgotten since the threads last changed, to tell an exit.
    last: HashMap<u64, i32>,
    /// Threads that exited (with their last id) as the last update found them.
    exited: HashMap<u64, Option<i32>>,
    /// Threads whose descriptor held no thread id of the target, and since when.
    lost: HashSet<u64>,
    lost_since: Option<Instant>,
    /// Thread ids (as some interpreter knows them) checked against /proc: a thread of the
    /// target as this sidecar sees it, or not.
    checked: HashMap<i32, bool>,
}

impl ThreadMap {
    pub(crate) fn new(pid: i32) -> Self {
        ThreadMap {
            pid,
            offset: None,
            failure: None,
            tried: Vec::new(),
            tids: HashMap::new(),
            last: HashMap::new(),
            exited: HashMap::new(),
            lost: HashSet::new(),
            lost_since: None,
            checked: HashMap::new(),
        }
    }

    /// The OS thread id of the Python thread whose `pthread_t` is `pthread`; `all` holds
    /// those of every Python thread in the sample (calibration uses them all).
    pub(crate) fn tid(&mut self, pthread: u64, all: &[u64]) -> Mapped {
        if let Some(&tid) = self.tids.get(&pthread) {
            return Mapped::Tid(tid);
        }
        // a thread without an id is read again when threads change, and at most once per
        // LOST_RETRY while it stays so (another thread may have taken its descriptor)
        let retry = self.lost_since.is_some_and(|at| at.elapsed() >= LOST_RETRY);
        if !self.lost.contains(&pthread) || retry {
            self.update(all);
        }
        if let Some(&tid) = self.tids.get(&pthread) {
            Mapped::Tid(tid)
        } else if let Some(&last) = self.exited.get(&pthread) {
            Mapped::Exited(last)
        } else {
            Mapped::Unknown
        }
    }

    /// The thread id cached for `pthread` is no thread of the target any more: the next
    /// `tid` reads it again (another thread may have the descriptor now).
    pub(crate) fn forget(&mut self, pthread: u64) {
        if let Some(tid) = self.tids.remove(&pthread) {
            self.last.insert(pthread, tid);
        }
    }

    /// Why some thread could not be mapped, when one could not.
    pub(crate) fn failure(&self) -> &str {
        self.failure
            .as_deref()
            .unwrap_or("no mapping of its threads")
    }

    /// Whether `tid` is a thread of the target as this sidecar's /proc sees it (not so when
    /// the interpreter runs in another PID namespace); each thread id is checked once.
    pub(crate) fn is_thread(&mut self, tid: i32) -> bool {
        if let Some(&known) = self.checked.get(&tid) {
            return known;
        }
        if self.checked.len() >= MAX_CHECKED {
            self.checked.clear();
        }
        let known = self.task_exists(tid);
        self.checked.insert(tid, known);
        known
    }

    /// Whether /proc has `tid` as a thread of the target now (a listing made while other
    /// threads exit can miss it).
    fn task_exists(&self, tid: i32) -> bool {
        tid > 0 && std::path::Path::new(&format!("/proc/{}/task/{tid}", self.pid)).exists()
    }

    /// Threads changed (one is new, or its id is stale): lists the target's threads, then
    /// calibrates if that is still to do, and reads the ids of threads without one.
    fn update(&mut self, all: &[u64]) {
        let mut threads: Vec<u64> = all.iter().copied().filter(|&p| p != 0).collect();
        threads.sort_unstable();
        threads.dedup();
        if self.offset.is_none() && self.failure.is_some() && self.tried == threads {
            return;
        }
        let Some(live) = tasks(self.pid) else {
            self.failure = Some("cannot list the target's threads".into());
            return;
        };
        self.lost.clear();
        self.lost_since = None;
        self.exited.clear();
        self.tids.retain(|p, _| threads.binary_search(p).is_ok());
        let offset = match self.offset {
            Some(offset) => offset,
            None => {
                let descriptors: Vec<Vec<u8>> = threads
                    .iter()
                    .map(|&p| read_upto(self.pid, p as usize, SPAN))
                    .collect();
                // a listing made while threads exit can miss live ones: a failed calibration
                // is tried once more against two listings together
                let calibrated = calibrate(&descriptors, &live).or_else(|_| {
                    let mut both = live.clone();
                    both.extend(tasks(self.pid).unwrap_or_default());
                    calibrate(&descriptors, &both)
                });
                match calibrated {
                    Ok(offset) => {
                        self.offset = Some(offset);
                        self.failure = None;
                        offset
                    }
                    Err(why) => {
                        self.failure = Some(why);
                        self.tried = threads;
                        return;
                    }
                }
            }
        };
        self.failure = None;
        for &pthread in &threads {
            if self.tids.contains_key(&pthread) {
                continue;
            }
            let value = read_upto(self.pid, pthread as usize + offset, 4);
            let last = self.last.get(&pthread).copied();
            match i32_at(&value, 0) {
                Some(tid) if live.contains(&tid) || self.task_exists(tid) => {
                    self.tids.insert(pthread, tid);
                }
                Some(tid) if tid <= 0 || Some(tid) == last => {
                    self.exited.insert(pthread, last);
                }
                _ => {
                    self.failure = Some(format!(
                        "a thread's descriptor holds no thread id of the target at offset {offset}"
                    ));
                    self.lost.insert(pthread);
                }
            }
        }
        self.last.clear();
        self.lost_since = (!self.lost.is_empty()).then(Instant::now);
    }
}

/// Why on-CPU states are estimated when the interpreter's thread ids are no threads of the
/// target as this sidecar's /proc sees them.
const ELSEWHERE: &str =
    "the interpreter's thread ids are not the target's threads here: another PID namespace?";

/// Thread ids and on-CPU states from the OS for what py-spy reads, and where they come from.
pub(crate) struct OnCpu {
    /// `pthread_t` to OS thread id, for interpreters that keep no OS thread id.
    map: ThreadMap,
    states: ThreadStates,
    /// Why this sample's states are not all the OS's; None when they are.
    estimated: Option<String>,
    /// `Stats::on_cpu` as of the last sample.
    source: String,
}

impl OnCpu {
    pub(crate) fn new(pid: i32) -> Self {
        OnCpu {
            map: ThreadMap::new(pid),
            states: ThreadStates::new(pid),
            estimated: None,
            source: String::new(),
        }
    }

    /// A thread's OS thread id, its on-CPU state and whether it waits for a CPU
    /// (`ThreadStates::waits_for_cpu`, where the OS's run state was read now). The id is the
    /// interpreter's (3.11+) or the map's; the state combines the OS's run state with the wait rule as the walker's
    /// `read_all` (walker/mod.rs) does: a thread in a known wait is idle, any other is on CPU when the OS says
    /// it runs. Without either, py-spy's thread id and guess stay, and `estimated` says why;
    /// a thread that exited while it was read keeps the guess too, without that.
    pub(crate) fn thread(
        &mut self,
        trace: &StackTrace,
        pthreads: &[u64],
        run_state: &RunState<'_>,
    ) -> (u64, bool, bool) {
        let mut mapped = match trace.os_thread_id {
            Some(tid) => Mapped::Tid(tid as i32),
            None => self.map.tid(trace.thread_id, pthreads),
        };
        let mut running = None;
        if let Mapped::Tid(tid) = mapped {
            running = self.running(tid, run_state);
            if running.is_none() && trace.os_thread_id.is_none() {
                // the thread mapped to this descriptor exited; another may have it now
                self.map.forget(trace.thread_id);
                mapped = self.map.tid(trace.thread_id, pthreads);
                if let Mapped::Tid(tid) = mapped {
                    running = self.running(tid, run_state);
                }
            }
        }
        match (mapped, running) {
            (Mapped::Tid(tid), Some(running)) => {
                // any known wait is idle here, a poll too: py-spy's stacks are read well before
                // this state, and a loop woken from its poll each millisecond read runnable
                // 0.24 of the time where the kernel counted 0.09 (the walker reads both at once)
                let active = running && !innermost_waits(trace);
                let read_now = matches!(run_state, RunState::Read);
                let cpu_wait = read_now && active && self.states.waits_for_cpu(tid);
                (tid as u64, active, cpu_wait)
            }
            // a thread the map or this /proc knew, gone since it was read
            (Mapped::Tid(tid), None) if trace.os_thread_id.is_none() || self.map.is_thread(tid) => {
                (tid as u64, trace.active, false)
            }
            (Mapped::Exited(last), _) => (
                last.map_or(trace.thread_id, |t| t as u64),
                trace.active,
                false,
            ),
            (mapped, _) => {
                if self.estimated.is_none() {
                    let why = match mapped {
                        Mapped::Unknown => self.map.failure(),
                        _ => ELSEWHERE,
                    };
                    self.estimated = Some(why.to_string());
                }
                (
                    trace.os_thread_id.unwrap_or(trace.thread_id),
                    trace.active,
                    false,
                )
            }
        }
    }

    /// The run state as the sample knows it (read before the threads were stopped) or reads
    /// it now; None when `tid` is no thread of the target.
    fn running(&mut self, tid: i32, run_state: &RunState<'_>) -> Option<bool> {
        match run_state {
            RunState::Known(known) => known.get(&tid).copied(),
            RunState::Read => None,
        }
        .or_else(|| self.states.running(tid))
    }

    /// What the thread's /proc `syscall` file says of a futex now (`ThreadStates::futex`).
    pub(crate) fn futex(&mut self, tid: i32) -> Futex {
        self.states.futex(tid)
    }

    /// Whether its futex reads can tell (`ThreadStates::futex_readable`).
    pub(crate) fn futex_readable(&self) -> bool {
        self.states.futex_readable()
    }

    /// `Stats::on_cpu` as of the last sample: "os", or "estimated (why)"; empty before one.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// After a sample of the walker, which reads the OS's run states itself: `guessed` when
    /// some thread's could not be read (`Walker::guessed`).
    pub(crate) fn walker_read(&mut self, guessed: bool) {
        self.estimated = guessed.then(|| ELSEWHERE.to_string());
        self.settle();
    }

    /// Before a read through py-spy, whose threads go through `thread`.
    pub(crate) fn begin(&mut self) {
        self.estimated = None;
        self.states.tick();
    }

    /// Whether runnable threads are told waiting for a CPU (`ThreadStates::set_cpu_waits`).
    pub(crate) fn set_cpu_waits(&mut self, on: bool) {
        self.states.set_cpu_waits(on);
    }

    /// Where waits for a CPU come from (`ThreadStates::cpu_wait_source`).
    pub(crate) fn cpu_wait_source(&self) -> &'static str {
        self.states.cpu_wait_source()
    }

    /// After a read through py-spy: closes the state files of threads gone.
    pub(crate) fn spy_read(&mut self, traces: &[Trace]) {
        let alive: Vec<i32> = traces.iter().map(|t| t.tid as i32).collect();
        self.states.keep(alive.iter().copied());
        self.settle();
    }

    /// Notes where the sample's states came from.
    fn settle(&mut self) {
        let same = match &self.estimated {
            None => self.source == "os",
            Some(why) => self
                .source
                .strip_prefix("estimated (")
                .and_then(|s| s.strip_suffix(')'))
                .is_some_and(|s| s == why),
        };
        if !same {
            self.source = match &self.estimated {
                None => "os".to_string(),
                Some(why) => format!("estimated ({why})"),
            };
        }
    }
}

/// The thread's innermost frame is a known wait (`crate::rules::wait_of`).
fn innermost_waits(trace: &StackTrace) -> bool {
    innermost_wait(trace) != Wait::No
}

/// Which known wait the thread's innermost frame is (`crate::rules::wait_of`).
pub(crate) fn innermost_wait(trace: &StackTrace) -> Wait {
    trace
        .frames
        .first()
        .map_or(Wait::No, |frame| wait_of(&frame.name, &frame.filename))
}

/// The offset of the thread id in a thread descriptor: where every one of `descriptors` holds
/// a distinct thread id of `live` (4-byte aligned); a known offset when several fit.
pub(crate) fn calibrate(descriptors: &[Vec<u8>], live: &HashSet<i32>) -> Result<usize, String> {
    if descriptors.is_empty() {
        return Err("no Python thread to calibrate the thread ids with".into());
    }
    let len = descriptors.iter().map(Vec::len).min().unwrap_or(0);
    let fits: Vec<usize> = (0..len.saturating_sub(3))
        .step_by(4)
        .filter(|&at| {
            let mut seen = HashSet::new();
            descriptors.iter().all(|d| {
                i32_at(d, at).is_some_and(|tid| tid > 0 && live.contains(&tid) && seen.insert(tid))
            })
        })
        .collect();
    if let Some(&known) = KNOWN.iter().find(|k| fits.contains(k)) {
        return Ok(known);
    }
    match fits[..] {
        [only] => Ok(only),
        [] => Err(
            "no offset of the threads' pthread descriptors holds their thread ids: \
             another C library, or another PID namespace?"
                .into(),
        ),
        _ => Err(format!(
            "{} offsets of the threads' pthread descriptors could hold their thread ids",
            fits.len()
        )),
    }
}

fn i32_at(buf: &[u8], at: usize) -> Option<i32> {
    let bytes: [u8; 4] = buf.get(at..at + 4)?.try_into().ok()?;
    Some(i32::from_le_bytes(bytes))
}

/// The target's thread ids, as /proc lists them.
fn tasks(pid: i32) -> Option<HashSet<i32>> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(fields: &[(usize, i32)]) -> Vec<u8> {
        // pointers and small flags around, as in a real descriptor
        let mut d: Vec<u8> = (0..SPAN / 8)
            .flat_map(|i| (0x7f00_dead_0000u64 + 64 * i as u64).to_le_bytes())
            .collect();
        d[16..20].copy_from_slice(&1i32.to_le_bytes());
        for &(at, value) in fields {
            d[at..at + 4].copy_from_slice(&value.to_le_bytes());
        }
        d
    }

    #[test]
    fn calibration_finds_the_offset_where_every_thread_holds_its_id() {
        let live: HashSet<i32> = [4000, 4001, 4002, 4003].into();
        let threads = [
            descriptor(&[(0x2d0, 4000), (100, 4001)]),
            descriptor(&[(0x2d0, 4002), (100, 4001)]),
            descriptor(&[(0x2d0, 4003), (100, 7)]),
        ];
        assert_eq!(calibrate(&threads, &live), Ok(0x2d0));
        // musl's place, with another offset fitting by chance: the known one wins
        let musl = [
            descriptor(&[(48, 4000), (200, 4003)]),
            descriptor(&[(48, 4001), (200, 4002)]),
        ];
        assert_eq!(calibrate(&musl, &live), Ok(48));
        // another library: the one offset that fits
        let other = [descriptor(&[(64, 4002)]), descriptor(&[(64, 4003)])];
        assert_eq!(calibrate(&other, &live), Ok(64));
    }

    #[test]
    fn calibration_fails_rather_than_guess() {
        let live: HashSet<i32> = [4000, 4001].into();
        // ids of another PID namespace: none of them is a thread here
        let elsewhere = [descriptor(&[(0x2d0, 1)]), descriptor(&[(0x2d0, 9)])];
        assert!(calibrate(&elsewhere, &live).is_err());
        // two threads holding the same id is not a mapping
        let same = [descriptor(&[(64, 4000)]), descriptor(&[(64, 4000)])];
        assert!(calibrate(&same, &live).is_err());
        // two unknown offsets fit: no guess between them
        let two = [descriptor(&[(64, 4000), (96, 4001)])];
        assert!(calibrate(&two, &live).unwrap_err().contains("2 offsets"));
        assert!(calibrate(&[], &live).is_err());
        // a descriptor shorter than the offset cannot fit there
        let short = [descriptor(&[(0x2d0, 4000)])[..0x2d0].to_vec()];
        assert!(calibrate(&short, &live).is_err());
    }

    /// This thread's `pthread_t` and OS thread id.
    fn own_ids() -> (u64, i32) {
        // SAFETY: both calls only return the calling thread's ids.
        unsafe { (libc::pthread_self() as u64, libc::gettid()) }
    }

    #[test]
    fn this_process_maps_its_own_threads() {
        // the test's own threads: their pthread_self() against the ids the kernel gives them
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let done_rx = std::sync::Arc::new(std::sync::Mutex::new(done_rx));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let tx = tx.clone();
                let done_rx = done_rx.clone();
                std::thread::spawn(move || {
                    tx.send(own_ids()).unwrap();
                    let _ = done_rx.lock().unwrap().recv();
                })
            })
            .collect();
        let ids: Vec<(u64, i32)> = (0..3).map(|_| rx.recv().unwrap()).collect();
        let pid = std::process::id() as i32;
        let mut map = ThreadMap::new(pid);
        let all: Vec<u64> = ids.iter().map(|i| i.0).collect();
        for &(pthread, tid) in &ids {
            assert_eq!(map.tid(pthread, &all), Mapped::Tid(tid));
        }
        assert!(map.offset.is_some());
        if cfg!(all(target_env = "gnu", target_arch = "x86_64")) {
            assert_eq!(map.offset, Some(0x2d0));
        }
        assert!(map.is_thread(ids[0].1));
        assert!(!map.is_thread(-1));
        drop(done_tx);
        for handle in handles {
            handle.join().unwrap();
        }
        // once they exited, their descriptors tell so (glibc marks the id, or it is stale),
        // unless a thread another test started since took the descriptor: then it maps to
        // that thread, which is live
        let (pthread, tid) = ids[0];
        map.forget(pthread);
        match map.tid(pthread, &all) {
            Mapped::Tid(other) => {
                assert_ne!(other, tid);
                assert!(map.task_exists(other), "{other} is no live thread");
            }
            mapped => assert_eq!(mapped, Mapped::Exited(Some(tid))),
        }
    }

    #[test]
    fn a_descriptor_taken_by_another_thread_maps_to_it() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            tx.send(own_ids()).unwrap();
            let _ = done_rx.recv();
        });
        let (pthread, tid) = rx.recv().unwrap();
        let mut map = ThreadMap::new(std::process::id() as i32);
        assert_eq!(map.tid(pthread, &[pthread]), Mapped::Tid(tid));
        // as if an earlier thread with this descriptor had been mapped, and then exited
        map.tids.insert(pthread, i32::MAX);
        assert_eq!(map.tid(pthread, &[pthread]), Mapped::Tid(i32::MAX));
        map.forget(pthread);
        assert_eq!(map.tid(pthread, &[pthread]), Mapped::Tid(tid));
        drop(done_tx);
        handle.join().unwrap();
    }
}
