//! What a sampling session fills and reports: the options it runs with, windows of unique
//! stacks with counts, and the counters it keeps instead of hiding problems.

use std::collections::{HashMap, VecDeque};

use super::requests::SlowRequest;
use super::stalls::Stall;
use crate::process::memory::MemoryReads;
use crate::stack::Stack;
use crate::tasks::ScanOptions;
use rustc_hash::FxBuildHasher;

/// What the sampler was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub pid: i32,
    pub rate_hz: f64,
    pub blocking: bool,
    /// Window length in seconds; windows are aligned to multiples of it on the wall clock.
    pub window: f64,
    /// Completed windows kept while nobody drains them; the oldest are dropped past this.
    pub max_pending: usize,
    /// Read with sidecar's own frame walker where it applies (CPython 3.11), else py-spy's.
    pub walker: bool,
    /// Tick on the clock thread shared by every sampler that asks for it (one wakeup per
    /// tick for all their targets) instead of on a thread of its own.
    pub shared_clock: bool,
    /// Task scans per second, on the same schedule as the stacks; 0 for none.
    pub tasks_hz: f64,
    /// What the task scanner is asked to do (its bound, its cache of chains).
    pub task_scan: ScanOptions,
    /// Read who holds and who waits for the GIL, and the collector's flag (the benchmarks
    /// measure what that costs against samplers without).
    pub gil: bool,
    /// The shortest stall of an event loop kept, in seconds (`super::stalls`); 0 looks for
    /// none (the benchmarks measure what looking costs against samplers without).
    pub stall_s: f64,
    /// Tell the runnable threads that wait for a CPU (`crate::process::cpuwait`; the
    /// benchmarks measure what that costs against samplers without).
    pub cpu_wait: bool,
    /// The shortest slow request kept, in seconds (`super::requests`, from the task scans);
    /// 0 follows none.
    pub slow_s: f64,
}

/// One thread's stack as seen in one sample, the aggregation key of a window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub thread_id: u64,
    pub on_cpu: bool,
    /// Waiting for the GIL another thread holds.
    pub gil: bool,
    /// Collecting garbage.
    pub gc: bool,
    /// On CPU as the OS says, but waiting for a CPU.
    pub cpu_wait: bool,
    pub stack: Stack,
}

/// A window's row as handed out: thread, on CPU, waiting for the GIL, collecting garbage,
/// waiting for a CPU, folded text, samples.
pub type Row<'a> = (u64, bool, bool, bool, bool, &'a str, u64);
/// A row without its samples: what twins are merged by.
type RowKey<'a> = (u64, bool, bool, bool, bool, &'a str);

/// Who held the GIL while a thread waited for it: the waiter and its stack, the holder (0:
/// none, the GIL being handed over) and its stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HolderKey {
    pub waiter: u64,
    pub waiter_stack: Stack,
    pub holder: u64,
    pub holder_stack: Option<Stack>,
}

/// A window's holder row as handed out: waiter, its folded text, holder, its folded text
/// (empty without Python frames), samples.
pub type HolderRow<'a> = (u64, &'a str, u64, &'a str, u64);

/// Unique stacks with counts over `[start, end)` (unix seconds).
#[derive(Debug, Clone)]
pub struct Window {
    pub start: f64,
    pub end: f64,
    /// Sampling ticks that produced stacks during the window.
    pub samples: u64,
    pub stacks: HashMap<StackKey, u64, FxBuildHasher>,
    pub thread_names: HashMap<u64, String, FxBuildHasher>,
    /// Samples of threads waiting for the GIL, by who held it.
    pub gil_holders: HashMap<HolderKey, u64, FxBuildHasher>,
    /// Task stacks (folded, leaf `[running]`, `[ready]` or `[waiting]`) with task-samples,
    /// and the task scans that counted them.
    pub tasks: HashMap<String, u64, FxBuildHasher>,
    pub task_scans: u64,
    /// Tasks those scans found past their bound and did not read, summed over the scans.
    pub task_unread: u64,
    /// The stalls of its event loops that ended in it (at most `super::stalls::MAX_STALLS`,
    /// the longest), and how many more ended in it.
    pub stalls: Vec<Stall>,
    pub stalls_dropped: u64,
    /// The slow requests that ended in it (at most `super::requests::MAX_SLOW`, the
    /// longest), and how many more did.
    pub slow_requests: Vec<SlowRequest>,
    pub slow_requests_dropped: u64,
}

impl Window {
    pub(crate) fn new(start: f64, length: f64) -> Self {
        Window {
            start,
            end: start + length,
            samples: 0,
            stacks: HashMap::default(),
            thread_names: HashMap::default(),
            gil_holders: HashMap::default(),
            tasks: HashMap::default(),
            task_scans: 0,
            task_unread: 0,
            stalls: Vec::new(),
            stalls_dropped: 0,
            slow_requests: Vec::new(),
            slow_requests_dropped: 0,
        }
    }

    /// Its counts by thread, state and folded text: keys whose stacks are twins (the same
    /// text cached twice) are one row.
    pub fn rows(&self) -> Vec<Row<'_>> {
        let mut rows: HashMap<RowKey<'_>, u64, FxBuildHasher> = HashMap::default();
        for (key, &count) in &self.stacks {
            let text = key.stack.text();
            let at = (
                key.thread_id,
                key.on_cpu,
                key.gil,
                key.gc,
                key.cpu_wait,
                text,
            );
            *rows.entry(at).or_insert(0) += count;
        }
        rows.into_iter()
            .map(|((thread, on_cpu, gil, gc, cpu_wait, text), count)| {
                (thread, on_cpu, gil, gc, cpu_wait, text, count)
            })
            .collect()
    }

    /// Its GIL holders, twins merged by text as in `rows`.
    pub fn holder_rows(&self) -> Vec<HolderRow<'_>> {
        let mut rows: HashMap<(u64, &str, u64, &str), u64, FxBuildHasher> = HashMap::default();
        for (key, &count) in &self.gil_holders {
            let holder_text = key.holder_stack.as_ref().map_or("", |s| s.text());
            let at = (key.waiter, key.waiter_stack.text(), key.holder, holder_text);
            *rows.entry(at).or_insert(0) += count;
        }
        rows.into_iter()
            .map(|((waiter, stack, holder, holder_stack), count)| {
                (waiter, stack, holder, holder_stack, count)
            })
            .collect()
    }
}

/// Counters the sampler reports instead of hiding problems.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Ticks that read the target's stacks successfully.
    pub samples: u64,
    /// Thread stacks recorded (a tick yields one per Python thread).
    pub traces: u64,
    /// Ticks whose read failed while the target was still alive.
    pub errors: u64,
    /// Reads that failed while the target ran and were read again at once.
    pub retried: u64,
    /// Ticks that started more than a quarter period after their deadline.
    pub late: u64,
    /// Ticks skipped entirely because the sampler fell a whole period behind.
    pub missed: u64,
    /// Thread stacks with no Python frame (threads that never ran Python code).
    pub empty: u64,
    /// Completed windows dropped because nobody drained them in time.
    pub dropped_windows: u64,
    /// Samples inside those dropped windows.
    pub dropped_samples: u64,
    pub lag_sum: f64,
    pub lag_max: f64,
    /// Time spent reading stacks (seconds), summed and worst case.
    pub read_sum: f64,
    pub read_max: f64,
    /// Time spent folding stacks into text (seconds, summed).
    pub fold_sum: f64,
    /// Time the stall detector took, timed around each of its calls (ns, summed): the
    /// benchmarks' measure of its own work.
    pub stall_nanos: u64,
    /// When the oldest stall in progress began, as of the last sample (`Stalls::stalled_since`).
    pub stalled_since: Option<f64>,
    /// Blocking mode: how long the target's Python threads stayed stopped per sample.
    pub pauses: PauseStats,
    pub last_error: Option<String>,
    /// Which reader reads the stacks, and why when it is not the walker.
    pub reader: String,
    /// Where the GIL's holder and waiters come from, and what is missing (`walker::gil_source`).
    pub gil: String,
    /// Where waits for a CPU come from: "schedstat", or why none is told (`cpuwait`).
    pub cpu_wait: String,
    /// Where the last sample's on-CPU states came from: "os" when all from the OS, else
    /// "estimated (why)" (py-spy's guess from the innermost frame); empty before a sample.
    pub on_cpu: String,
    /// Where the session ticks: "own" (a thread of its own), "shared" (the shared clock), or
    /// why it is on a thread of its own after asking for the shared clock.
    pub clock: String,
    /// The walker's reads of the target's memory so far (none through py-spy).
    pub memory_reads: MemoryReads,
    /// Thread run states the walker read from /proc so far (a thread in a known wait is idle
    /// without one).
    pub state_reads: u64,
    /// The time those reads took (ns), timed around each.
    pub state_nanos: u64,
    /// The /proc file those run states come from: "stat", or "syscall" once it named a
    /// sleeping thread's system call (`runstate`); empty through py-spy.
    pub state_file: &'static str,
    /// Task scans done, task-samples they counted, tasks left out because a read of them
    /// tore, tasks past a scan's bound, scans that failed and why the last one did.
    pub task_scans: u64,
    pub task_samples: u64,
    pub task_torn: u64,
    pub task_unread: u64,
    pub task_errors: u64,
    pub task_last_error: Option<String>,
    /// Requests' tasks whose request a scan left out (it changed as it was read): their
    /// task-samples have no route frame.
    pub task_requests_torn: u64,
    /// Requests in flight not followed for slow requests: seen while
    /// `super::requests::MAX_TRACKED` were.
    pub slow_requests_untracked: u64,
}

/// Pause lengths of blocking mode: sum, worst case and the most recent ones for percentiles.
#[derive(Debug, Clone, Default)]
pub struct PauseStats {
    pub count: u64,
    pub sum: f64,
    pub max: f64,
    recent: VecDeque<f32>,
}

impl PauseStats {
    const KEEP: usize = 4096;

    pub(crate) fn add(&mut self, seconds: f64) {
        self.count += 1;
        self.sum += seconds;
        self.max = self.max.max(seconds);
        if self.recent.len() == Self::KEEP {
            self.recent.pop_front();
        }
        self.recent.push_back(seconds as f32);
    }

    /// The `pct` percentile (0..=100) of the recent pauses, in seconds.
    pub fn percentile(&self, pct: f64) -> f64 {
        if self.recent.is_empty() {
            return 0.0;
        }
        let mut sorted: Vec<f32> = self.recent.iter().copied().collect();
        sorted.sort_by(f32::total_cmp);
        let rank = ((pct / 100.0) * (sorted.len() - 1) as f64).round() as usize;
        f64::from(sorted[rank.min(sorted.len() - 1)])
    }
}

/// Why the sampling thread stopped, if it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    Running,
    Stopped,
    Exited,
}

/// What a session shares between its runner and its Python handle.
pub(crate) struct Shared {
    pub(crate) pending: VecDeque<Window>,
    pub(crate) current: Option<Window>,
    pub(crate) stats: Stats,
    pub(crate) end: End,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn twins_are_one_row_and_other_keys_stay_apart() {
        const WORK: &str = "main (app.py:1);work (app.py:9)";
        let text: Arc<str> = Arc::from(WORK);
        let (first, twin) = (Stack::new(text.clone()), Stack::new(text));
        assert_ne!(first, twin);
        let other = Stack::new(Arc::from("main (app.py:1)"));
        let key = |stack: &Stack, on_cpu: bool| StackKey {
            thread_id: 7,
            on_cpu,
            gil: false,
            gc: false,
            cpu_wait: false,
            stack: stack.clone(),
        };
        let mut window = Window::new(0.0, 1.0);
        window.stacks.insert(key(&first, true), 3);
        window.stacks.insert(key(&twin, true), 2);
        window.stacks.insert(key(&first, false), 1);
        window.stacks.insert(key(&other, true), 4);
        let mut rows = window.rows();
        rows.sort();
        assert_eq!(
            rows,
            vec![
                (7, false, false, false, false, WORK, 1),
                (7, true, false, false, false, "main (app.py:1)", 4),
                (7, true, false, false, false, WORK, 5),
            ]
        );
    }
}
