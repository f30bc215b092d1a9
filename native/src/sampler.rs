//! The sampling session: reads one target's Python stacks at a fixed rate, on a native thread
//! of its own or on the shared clock (`crate::clock`), and aggregates them into windows of
//! unique stacks with counts.
//!
//! Nothing here touches Python objects: the thread runs without the GIL and the Python side
//! only ever sees the aggregated windows through `drain()`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use py_spy::config::LockingStrategy;
use py_spy::{Config, PythonSpy, StackTrace};

use crate::errors::InitError;
use crate::fxhash::FxBuild;
use crate::threadmap::OnCpu;
use crate::walker::{MemoryReads, RunState, Trace, Walker};

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
}

/// One thread's stack as seen in one sample, the aggregation key of a window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub thread_id: u64,
    pub on_cpu: bool,
    pub gil: bool,
    pub stack: Arc<str>,
}

/// Unique stacks with counts over `[start, end)` (unix seconds).
#[derive(Debug, Clone)]
pub struct Window {
    pub start: f64,
    pub end: f64,
    /// Sampling ticks that produced stacks during the window.
    pub samples: u64,
    pub stacks: HashMap<StackKey, u64, FxBuild>,
    pub thread_names: HashMap<u64, String>,
}

impl Window {
    fn new(start: f64, length: f64) -> Self {
        Window {
            start,
            end: start + length,
            samples: 0,
            stacks: HashMap::default(),
            thread_names: HashMap::new(),
        }
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
    /// Blocking mode: how long the target's Python threads stayed stopped per sample.
    pub pauses: PauseStats,
    pub last_error: Option<String>,
    /// Which reader reads the stacks, and why when it is not the walker.
    pub reader: String,
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

    fn add(&mut self, seconds: f64) {
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

struct Shared {
    pending: VecDeque<Window>,
    current: Option<Window>,
    stats: Stats,
    end: End,
}

pub struct Session {
    pub options: Options,
    pub python_version: String,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    handle: Mutex<Option<JoinHandle<()>>>,
    /// Disconnected once the session's runner is dropped (wherever it ticked).
    done: Mutex<Option<mpsc::Receiver<()>>>,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

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
struct Liveness {
    pid: i32,
    started: u64,
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl Liveness {
    fn open(pid: i32, started: u64) -> Self {
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

    fn same_process(&self) -> bool {
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

/// Formats a frame like py-spy's raw output: `function (file:line)`. Semicolons separate
/// frames in folded text, so they cannot appear inside one.
///
/// A read torn by the target changing under it can yield control characters; they are never
/// in real names and would make folded text look binary and SVG invalid, so they become U+FFFD.
pub(crate) fn format_frame(name: &str, file: &str, line: i32) -> String {
    let text = format!("{name} ({file}:{line})");
    if !text
        .chars()
        .any(|c| c == ';' || (c.is_control() && c != '\t'))
    {
        return text;
    }
    text.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' => ' ',
            '\t' => c,
            c if c.is_control() => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// How many times a torn read of a running target is read again within the same tick.
const TORN_READ_RETRIES: u64 = 2;
/// The longest a sampling thread sleeps at once, so that it sees stop() promptly.
pub(crate) const MAX_SLEEP: Duration = Duration::from_millis(50);
/// How long stop() waits for the shared clock to let go of a session's runner.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// What the frame and stack caches may hold, in bytes (about): a bound on size, not count,
/// because 50,000 stacks 2,000 frames deep are gigabytes.
const FRAME_CACHE_BYTES: usize = 16 << 20;
const STACK_CACHE_BYTES: usize = 32 << 20;

/// Caches formatted frames: code objects, file and function names rarely change between samples.
#[derive(Default)]
struct FrameCache {
    /// file → function → line → formatted frame: lookups borrow, so a hit allocates nothing.
    frames: HashMap<String, HashMap<String, HashMap<i32, Arc<str>>>>,
    frame_bytes: usize,
    stacks: HashMap<Vec<Arc<str>>, Arc<str>>,
    stack_bytes: usize,
}

impl FrameCache {
    fn fold(&mut self, trace: &StackTrace) -> Arc<str> {
        let mut parts: Vec<Arc<str>> = Vec::with_capacity(trace.frames.len());
        for frame in trace.frames.iter().rev() {
            let file = frame.short_filename.as_deref().unwrap_or(&frame.filename);
            parts.push(self.frame(file, &frame.name, frame.line));
        }
        if let Some(stack) = self.stacks.get(&parts) {
            return stack.clone();
        }
        let joined: Arc<str> = Arc::from(
            parts
                .iter()
                .map(|p| p.as_ref())
                .collect::<Vec<_>>()
                .join(";"),
        );
        // Bound the caches so a target that generates code cannot grow them forever.
        let cost = joined.len() + parts.len() * std::mem::size_of::<Arc<str>>() + 64;
        if self.stack_bytes + cost > STACK_CACHE_BYTES {
            self.stacks.clear();
            self.stack_bytes = 0;
        }
        self.stacks.insert(parts, joined.clone());
        self.stack_bytes += cost;
        joined
    }

    fn frame(&mut self, file: &str, name: &str, line: i32) -> Arc<str> {
        if let Some(text) = self
            .frames
            .get(file)
            .and_then(|names| names.get(name))
            .and_then(|lines| lines.get(&line))
        {
            return text.clone();
        }
        let text: Arc<str> = Arc::from(format_frame(name, file, line));
        let cost = 2 * text.len() + 128;
        if self.frame_bytes + cost > FRAME_CACHE_BYTES {
            self.frames.clear();
            self.frame_bytes = 0;
        }
        self.frames
            .entry(file.to_string())
            .or_default()
            .entry(name.to_string())
            .or_default()
            .insert(line, text.clone());
        self.frame_bytes += cost;
        text
    }
}

impl Session {
    /// Attaches to `pid` on a new thread and starts sampling. Returns once the first read of
    /// the target's stacks succeeded, or with the reason it could not.
    pub fn start(options: Options) -> Result<Session, InitError> {
        let pid = options.pid;
        let Some(started) = start_time(pid) else {
            return Err(InitError::NoProcess(pid));
        };
        let shared = Arc::new(Mutex::new(Shared {
            pending: VecDeque::new(),
            current: None,
            stats: Stats::default(),
            end: End::Running,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<String, InitError>>();
        let (done_tx, done_rx) = mpsc::channel::<()>();

        let thread_shared = shared.clone();
        let thread_stop = stop.clone();
        let thread_options = options.clone();
        let handle = std::thread::Builder::new()
            .name(format!("sidecar-sampler-{pid}"))
            .spawn(move || {
                // Blocking mode stops the Python threads itself (see `read_stopped`).
                let config = Config {
                    blocking: LockingStrategy::NonBlocking,
                    sampling_rate: thread_options.rate_hz.round().max(1.0) as u64,
                    collect_thread_names: true,
                    ..Config::default()
                };
                let mut spy = match PythonSpy::retry_new(pid, &config, 3) {
                    Ok(spy) => spy,
                    Err(err) => {
                        let _ = ready_tx.send(Err(InitError::classify(pid, started, &err)));
                        return;
                    }
                };
                let mut cache = FrameCache::default();
                let (walker, reader) = if thread_options.walker {
                    match checked_walker(&mut spy, &mut cache) {
                        Ok(found) => found,
                        Err(reason) => {
                            let _ = ready_tx.send(Err(InitError::Sampler(pid, reason)));
                            return;
                        }
                    }
                } else {
                    (None, "py-spy (asked for)".to_string())
                };
                {
                    let mut state = thread_shared.lock().unwrap_or_else(|e| e.into_inner());
                    state.stats.reader = reader;
                    let clock = if thread_options.shared_clock {
                        "shared"
                    } else {
                        "own"
                    };
                    state.stats.clock = clock.into();
                }
                let _ = ready_tx.send(Ok(spy.version.to_string()));
                let readers = Readers {
                    spy,
                    walker,
                    cache,
                    names: HashMap::new(),
                    named: HashSet::new(),
                    last_lookup: None,
                    os: OnCpu::new(pid),
                };
                let runner = Runner {
                    readers,
                    period: Duration::from_secs_f64(1.0 / thread_options.rate_hz),
                    next: Instant::now(),
                    python_threads: Vec::new(),
                    states: ThreadStates::new(pid),
                    process: remoteprocess::Process::new(pid),
                    liveness: Liveness::open(pid, started),
                    started,
                    shared: thread_shared,
                    stop: thread_stop,
                    _done: done_tx,
                    options: thread_options,
                };
                if runner.options.shared_clock {
                    // the clock thread takes it; should it be gone, the runner stays here
                    if let Err(runner) = crate::clock::enqueue(Box::new(runner)) {
                        runner.note_clock("own (the shared clock is not running)");
                        run_alone(*runner);
                    }
                } else {
                    run_alone(runner);
                }
            })
            .map_err(|e| InitError::Other(format!("cannot start the sampling thread: {e}")))?;

        let python_version = match ready_rx.recv() {
            Ok(Ok(version)) => version,
            Ok(Err(err)) => {
                let _ = handle.join();
                return Err(err);
            }
            Err(_) => {
                let _ = handle.join();
                return Err(InitError::Other(
                    "the sampling thread died while attaching".into(),
                ));
            }
        };
        Ok(Session {
            options,
            python_version,
            shared,
            stop,
            handle: Mutex::new(Some(handle)),
            done: Mutex::new(Some(done_rx)),
        })
    }

    /// Completed windows, oldest first; with `flush`, the window in progress too.
    pub fn drain(&self, flush: bool) -> Vec<Window> {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<Window> = shared.pending.drain(..).collect();
        if flush {
            if let Some(current) = shared.current.take() {
                if current.samples > 0 {
                    out.push(current);
                }
            }
        }
        out
    }

    /// How the session stands, without copying its counters.
    pub fn end(&self) -> End {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.end.clone()
    }

    /// Where the session ticks (`Stats::clock`), without copying the other counters.
    pub fn clock(&self) -> String {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.stats.clock.clone()
    }

    /// Where on-CPU states come from (`Stats::on_cpu`), without copying the other counters.
    pub fn on_cpu(&self) -> String {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.stats.on_cpu.clone()
    }

    pub fn stats(&self) -> (Stats, End) {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        (shared.stats.clone(), shared.end.clone())
    }

    /// Stops the sampling thread and waits for it; the target is never left stopped because
    /// every ptrace lock is released before a tick ends.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let handle = self.handle.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        // on the shared clock, the runner outlives the thread that attached it
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(done) = done {
            let _ = done.recv_timeout(STOP_TIMEOUT);
        }
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if shared.end == End::Running {
            shared.end = End::Stopped;
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop();
    }
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
    pub(crate) fn keep(&mut self, alive: &[i32]) {
        if self.files.len() > alive.len() {
            let alive: HashSet<i32> = alive.iter().copied().collect();
            self.files.retain(|tid, _| alive.contains(tid));
        }
    }
}

/// Blocking mode: stops only the threads that ran Python in the previous sample (all threads
/// on the first one), reads the stacks, and lets them go; returns the pause length.
///
/// Each thread's on-CPU state is read before it is stopped (a stopped thread never reads as
/// running) and handed to `read`. A Python thread born since the previous sample is read
/// without being stopped once, and stopped from the next sample on. Stops are ptrace seize +
/// interrupt: if the sidecar dies meanwhile, the kernel detaches and the threads run on.
///
/// Thread ids come from the interpreter and are those of the target's PID namespace; when
/// they are not threads of the target as seen here (a target in another PID namespace), the
/// whole process is stopped instead, so no other thread is ever touched.
fn read_stopped(
    process: &remoteprocess::Process,
    python_threads: &mut Vec<i32>,
    states: &mut ThreadStates,
    read: impl FnOnce(&HashMap<i32, bool>) -> anyhow::Result<Vec<Trace>>,
) -> (anyhow::Result<Vec<Trace>>, Option<f64>) {
    let mut running: HashMap<i32, bool> = python_threads
        .iter()
        .filter_map(|&tid| states.running(tid).map(|r| (tid, r)))
        .collect();
    if running.len() != python_threads.len() {
        python_threads.clear();
    }
    if python_threads.is_empty() {
        // the whole process stops: every thread's state is read before, as it is not after
        for tid in process
            .threads()
            .iter()
            .flatten()
            .filter_map(|t| t.id().ok())
        {
            if let Some(r) = states.running(tid) {
                running.insert(tid, r);
            }
        }
    }
    let began = Instant::now();
    let mut thread_locks = Vec::with_capacity(python_threads.len());
    let mut process_lock = None;
    if python_threads.is_empty() {
        match process.lock() {
            Ok(lock) => process_lock = Some(lock),
            Err(err) => {
                return (
                    Err(anyhow::anyhow!("failed to suspend process: {err}")),
                    None,
                )
            }
        }
    } else {
        for &tid in python_threads.iter() {
            let lock = remoteprocess::Thread::new(tid).and_then(|thread| thread.lock());
            match lock {
                Ok(lock) => thread_locks.push(lock),
                Err(remoteprocess::Error::NixError(nix_err)) if nix_err as i32 == libc::ESRCH => {}
                Err(err) => {
                    drop(thread_locks);
                    return (
                        Err(anyhow::anyhow!("failed to suspend thread {tid}: {err}")),
                        None,
                    );
                }
            }
        }
    }
    let result = read(&running);
    drop(thread_locks);
    drop(process_lock);
    let pause = began.elapsed().as_secs_f64();
    if let Ok(traces) = &result {
        python_threads.clear();
        python_threads.extend(traces.iter().map(|t| t.tid as i32));
        states.keep(python_threads);
    }
    (result, Some(pause))
}

/// The readers of one target: py-spy always (it attached, and it knows thread names), and
/// the walker when it applies and agreed with py-spy at attach.
struct Readers {
    spy: PythonSpy,
    walker: Option<Walker>,
    cache: FrameCache,
    names: HashMap<u64, String>,
    /// Threads whose names were looked up (the walker does not read names).
    named: HashSet<u64>,
    last_lookup: Option<Instant>,
    /// Thread ids and on-CPU states from the OS, and where they could not be had.
    os: OnCpu,
}

impl Readers {
    fn read(&mut self, run_state: RunState<'_>) -> anyhow::Result<Vec<Trace>> {
        match self.walker.as_mut() {
            Some(walker) => {
                let traces = walker.read(run_state)?;
                self.os.walker_read(&traces);
                Ok(traces)
            }
            None => {
                self.os.begin();
                let os = Some((&mut self.os, &run_state));
                let traces = spy_read(&mut self.spy, &mut self.cache, &mut self.names, os)?;
                self.os.spy_read(&traces);
                Ok(traces)
            }
        }
    }

    /// Looks up the names of threads the walker met for the first time, at most once a second
    /// (py-spy reads them from the `threading` module).
    fn lookup_names(&mut self, traces: &[Trace]) {
        if self.walker.is_none() || traces.iter().all(|t| self.named.contains(&t.tid)) {
            return;
        }
        if self
            .last_lookup
            .is_some_and(|at| at.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last_lookup = Some(Instant::now());
        if spy_read(&mut self.spy, &mut self.cache, &mut self.names, None).is_ok() {
            if self.named.len() > 100_000 {
                self.named.clear();
            }
            self.named.extend(traces.iter().map(|t| t.tid));
        }
    }
}

/// One read through py-spy, folded like the walker's; with `os`, thread ids and on-CPU states
/// come from the OS where they can (`OnCpu::thread`).
fn spy_read(
    spy: &mut PythonSpy,
    cache: &mut FrameCache,
    names: &mut HashMap<u64, String>,
    mut os: Option<(&mut OnCpu, &RunState<'_>)>,
) -> anyhow::Result<Vec<Trace>> {
    let traces = spy.get_stack_traces()?;
    // the pthread_t of threads whose interpreter keeps no OS thread id (CPython < 3.11)
    let pthreads: Vec<u64> = traces
        .iter()
        .filter(|t| t.os_thread_id.is_none())
        .map(|t| t.thread_id)
        .collect();
    Ok(traces
        .iter()
        .map(|trace| {
            let (tid, active) = match os.as_mut() {
                Some((os, run_state)) => os.thread(trace, &pthreads, run_state),
                None => (trace.os_thread_id.unwrap_or(trace.thread_id), trace.active),
            };
            if let Some(name) = &trace.thread_name {
                if names.get(&tid) != Some(name) {
                    names.insert(tid, name.clone());
                }
            }
            Trace {
                tid,
                owns_gil: trace.owns_gil,
                active,
                stack: (!trace.frames.is_empty()).then(|| cache.fold(trace)),
            }
        })
        .collect())
}

/// The walker, if it applies to this target and reads the same stacks as py-spy: both read
/// the running target back to back until one pair agrees on every thread (an idle thread
/// agrees at once; a busy one within a few tries).
/// Err says why the target is refused: no reader reads it right.
fn checked_walker(
    spy: &mut PythonSpy,
    cache: &mut FrameCache,
) -> Result<(Option<Walker>, String), String> {
    let mut walker = match Walker::new(spy) {
        Ok(walker) => walker,
        Err(why) if why.refuse => return Err(why.reason),
        Err(why) => return Ok((None, format!("py-spy ({})", why.reason))),
    };
    let mut names = HashMap::new();
    let key = |traces: Vec<Trace>| {
        let mut key: Vec<(u64, Option<Arc<str>>)> =
            traces.into_iter().map(|t| (t.tid, t.stack)).collect();
        key.sort();
        key
    };
    let mut last = String::from("no read succeeded");
    for _ in 0..100 {
        let theirs = spy_read(spy, cache, &mut names, None);
        let ours = walker.read(RunState::Read);
        match (theirs, ours) {
            (Ok(theirs), Ok(ours)) => {
                if key(theirs) == key(ours) {
                    let reader = format!(
                        "walker (Python {}, offsets from {})",
                        spy.version,
                        walker.layout_source()
                    );
                    return Ok((Some(walker), reader));
                }
                last = "the stacks differed".into();
            }
            (_, Err(err)) => last = format!("{err:#}"),
            (Err(_), _) => {}
        }
    }
    Ok((None, format!("py-spy (walker check failed: {last})")))
}

/// The same process still runs: same start time, and not a zombie waiting to be reaped.
fn process_alive(pid: i32, started: u64) -> bool {
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

/// Sleeps of ordinary threads may end up to 50 µs late (the kernel's default timer slack,
/// which batches wakeups); a sampler's ticks should not.
pub(crate) fn precise_sleeps() {
    // SAFETY: PR_SET_TIMERSLACK takes a number of nanoseconds and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
}

/// One target's sampling between ticks: its readers, schedule and the windows it fills. A
/// runner ticks on its own thread (`run_alone`) or beside others on the shared clock
/// (`crate::clock`). Dropping it ends the session: the window in progress is flushed, and
/// `Session::stop` learns of it through `_done`.
pub(crate) struct Runner {
    readers: Readers,
    options: Options,
    started: u64,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    period: Duration,
    /// When the next tick is due.
    pub(crate) next: Instant,
    python_threads: Vec<i32>,
    states: ThreadStates,
    process: Result<remoteprocess::Process, remoteprocess::Error>,
    liveness: Liveness,
    _done: mpsc::Sender<()>,
}

impl Runner {
    pub(crate) fn period(&self) -> Duration {
        self.period
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub(crate) fn pid(&self) -> i32 {
        self.options.pid
    }

    /// Says in the stats where the runner ticks now.
    pub(crate) fn note_clock(&self, clock: &str) {
        let mut state = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        state.stats.clock = clock.to_string();
    }

    /// One tick, due now: reads, folds and counts a sample. False once the target is gone.
    pub(crate) fn tick(&mut self) -> bool {
        let options = &self.options;
        let period_s = self.period.as_secs_f64();
        let now = Instant::now();
        let lag = now.saturating_duration_since(self.next).as_secs_f64();
        let mut missed = 0u64;
        if lag >= period_s {
            missed = (lag / period_s) as u64;
            self.next += self.period * missed as u32;
        }
        self.next += self.period;

        let readers = &mut self.readers;
        let read_start = Instant::now();
        let mut retried = 0u64;
        let (result, pause) = match (&self.process, options.blocking) {
            (Ok(process), true) => read_stopped(
                process,
                &mut self.python_threads,
                &mut self.states,
                |running| readers.read(RunState::Known(running)),
            ),
            (Err(err), true) => (Err(anyhow::anyhow!("cannot stop the target: {err}")), None),
            (_, false) => {
                let mut result = readers.read(RunState::Read);
                // A running target can change its frames while they are read; such a torn
                // read fails more often for deep, busy stacks, so dropping it would bias the
                // profile toward idle. It is read again at once, a bounded number of times.
                while result.is_err() && retried < TORN_READ_RETRIES {
                    retried += 1;
                    result = readers.read(RunState::Read);
                }
                (result, None)
            }
        };
        let read = read_start.elapsed().as_secs_f64();
        let wall = unix_now();
        // A read without error proves nothing about whom it read: a new process on the same
        // PID (another start time) reads fine, even at the same addresses without ASLR. So
        // every read is checked, and a read of another process is never kept.
        if !self.liveness.same_process() && start_time(options.pid) != Some(self.started) {
            let mut state = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            state.end = End::Exited;
            return false;
        }

        // Fold outside the lock, so drain() never waits on it.
        let fold_start = Instant::now();
        let mut folded: Vec<(u64, StackKey)> = Vec::new();
        let mut empty = 0u64;
        if let Ok(traces) = &result {
            readers.lookup_names(traces);
            for trace in traces {
                let Some(stack) = &trace.stack else {
                    empty += 1;
                    continue;
                };
                let key = StackKey {
                    thread_id: trace.tid,
                    on_cpu: trace.active,
                    gil: trace.owns_gil,
                    stack: stack.clone(),
                };
                folded.push((trace.tid, key));
            }
        }
        let fold = fold_start.elapsed().as_secs_f64();

        let mut guard = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *guard;
        state.stats.missed += missed;
        state.stats.retried += retried;
        state.stats.lag_sum += lag;
        state.stats.lag_max = state.stats.lag_max.max(lag);
        if lag > period_s / 4.0 {
            state.stats.late += 1;
        }
        state.stats.read_sum += read;
        if let Some(walker) = &readers.walker {
            state.stats.memory_reads = walker.reads();
            state.stats.state_reads = walker.state_reads();
        }
        if result.is_ok() && state.stats.on_cpu != readers.os.source() {
            state.stats.on_cpu = readers.os.source().to_string();
        }
        state.stats.read_max = state.stats.read_max.max(read);
        if let Some(pause) = pause {
            state.stats.pauses.add(pause);
        }

        if let Err(err) = result {
            if !process_alive(options.pid, self.started) {
                state.end = End::Exited;
                return false;
            }
            state.stats.errors += 1;
            state.stats.last_error = Some(format!("{err:#}"));
            return true;
        }

        let window_start = (wall / options.window).floor() * options.window;
        let rotate = match &state.current {
            Some(w) => w.start != window_start,
            None => true,
        };
        if rotate {
            if let Some(done) = state.current.take() {
                if done.samples > 0 {
                    state.pending.push_back(done);
                }
            }
            while state.pending.len() > options.max_pending {
                if let Some(old) = state.pending.pop_front() {
                    state.stats.dropped_windows += 1;
                    state.stats.dropped_samples += old.samples;
                }
            }
            state.current = Some(Window::new(window_start, options.window));
        }
        let window = state.current.as_mut().expect("window was just set");
        window.samples += 1;
        state.stats.samples += 1;
        state.stats.empty += empty;
        state.stats.traces += folded.len() as u64;
        state.stats.fold_sum += fold;
        for (thread_id, key) in folded {
            if let Some(name) = readers.names.get(&thread_id) {
                window
                    .thread_names
                    .entry(thread_id)
                    .or_insert_with(|| name.clone());
            }
            *window.stacks.entry(key).or_insert(0) += 1;
        }
        true
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let mut state = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(done) = state.current.take() {
            if done.samples > 0 {
                state.pending.push_back(done);
            }
        }
        if state.end == End::Running {
            state.end = End::Stopped;
        }
    }
}

/// A runner on a thread of its own, until it is stopped or its target is gone.
pub(crate) fn run_alone(mut runner: Runner) {
    precise_sleeps();
    while !runner.stopped() {
        let now = Instant::now();
        if now < runner.next {
            // Sleep in short slices so stop() is answered promptly even at low rates.
            std::thread::sleep((runner.next - now).min(MAX_SLEEP));
            continue;
        }
        if !runner.tick() {
            break;
        }
    }
}
