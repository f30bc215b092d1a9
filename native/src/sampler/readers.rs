//! The readers of one target: py-spy, which attaches and finds the interpreter, and the own
//! walker where it applies; py-spy's traces folded like the walker's, and the check that the
//! two agree before the walker is trusted.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use py_spy::config::LockingStrategy;
use py_spy::{Config, PythonSpy, StackTrace};
use rustc_hash::FxBuildHasher;

use super::threadmap::{innermost_wait, OnCpu};
use super::windows::Options;
use crate::process::attach::{attach_spy, InitError};
use crate::process::memory::{usize_at, Batch, MemoryReads};
use crate::process::runstate::Futex;
use crate::rules::{format_frame, Wait};
use crate::stack::{GilRole, RunState, Stack, Trace};
use crate::walker::gil::{Gil, GilRead};
use crate::walker::{gil_of, gil_source, Walker};

/// What the walker has read of its target so far: its memory, and the run states of its
/// threads from /proc (how many, the time they took, and the file they come from).
pub(crate) struct WalkerReads {
    pub memory: MemoryReads,
    pub states: u64,
    pub state_nanos: u64,
    pub state_file: &'static str,
}

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
    stacks: HashMap<Vec<Arc<str>>, Stack>,
    stack_bytes: usize,
}

impl FrameCache {
    fn fold(&mut self, trace: &StackTrace) -> Stack {
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
        let stack = Stack::new(joined);
        self.stacks.insert(parts, stack.clone());
        self.stack_bytes += cost;
        stack
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

impl Readers {
    /// Attaches to `pid` (started at `started`): py-spy, and the walker when asked for, where
    /// it applies and agrees with py-spy. Also says which reader reads, and why.
    pub(crate) fn attach(
        pid: i32,
        started: u64,
        options: &Options,
    ) -> Result<(Readers, String), InitError> {
        // Blocking mode stops the Python threads itself (see `read_stopped`).
        let config = Config {
            blocking: LockingStrategy::NonBlocking,
            sampling_rate: options.rate_hz.round().max(1.0) as u64,
            collect_thread_names: true,
            ..Config::default()
        };
        let mut spy = match attach_spy(pid, &config) {
            Ok(spy) => spy,
            Err(err) => {
                return Err(InitError::classify(pid, started, &err));
            }
        };
        let mut cache = FrameCache::default();
        let (walker, reader) = if options.walker {
            match checked_walker(&mut spy, &mut cache, options.gil) {
                Ok(found) => found,
                Err(reason) => {
                    return Err(InitError::Sampler(pid, reason));
                }
            }
        } else {
            (None, "py-spy (asked for)".to_string())
        };
        // py-spy's own GIL holder comes from an offset some builds do not match: read as
        // the walker does (None: the walker reads it)
        let gil = walker.is_none().then(|| gil_of(&spy, options.gil));
        let mut os = OnCpu::new(pid);
        let mut walker = walker;
        os.set_cpu_waits(options.cpu_wait);
        if let Some(walker) = walker.as_mut() {
            walker.set_cpu_waits(options.cpu_wait);
        }
        let readers = Readers {
            spy,
            walker,
            gil,
            cache,
            names: HashMap::default(),
            named: HashSet::default(),
            last_lookup: None,
            os,
        };
        Ok((readers, reader))
    }

    /// Whether runnable threads are told waiting for a CPU (`ThreadStates::set_cpu_waits`).
    pub(crate) fn set_cpu_waits(&mut self, on: bool) {
        self.os.set_cpu_waits(on);
        if let Some(walker) = self.walker.as_mut() {
            walker.set_cpu_waits(on);
        }
    }

    /// The target's Python version, as py-spy found it.
    pub(crate) fn version(&self) -> String {
        self.spy.version.to_string()
    }

    /// The walker's reads of the target so far (none through py-spy).
    pub(crate) fn walker_reads(&self) -> Option<WalkerReads> {
        self.walker.as_ref().map(|w| WalkerReads {
            memory: w.reads(),
            states: w.state_reads(),
            state_nanos: w.state_nanos(),
            state_file: w.state_file(),
        })
    }

    /// The walker, where it reads this target.
    pub(crate) fn walker_mut(&mut self) -> Option<&mut Walker> {
        self.walker.as_mut()
    }

    /// Thread names met so far.
    pub(crate) fn names(&self) -> &HashMap<u64, String, FxBuildHasher> {
        &self.names
    }

    /// A task scanner for the target (CPython 3.11+, asyncio imported), as `options` ask.
    pub(crate) fn task_scanner(
        &self,
        options: crate::tasks::ScanOptions,
    ) -> anyhow::Result<crate::tasks::TaskScanner> {
        crate::tasks::TaskScanner::new(&self.spy, options)
    }

    /// Where the last sample's on-CPU states came from.
    pub(crate) fn on_cpu(&self) -> &str {
        self.os.source()
    }

    /// Where waits for a CPU come from (`Stats::cpu_wait`).
    pub(crate) fn cpu_wait(&self) -> &str {
        match &self.walker {
            Some(walker) => walker.cpu_wait_source(),
            None => self.os.cpu_wait_source(),
        }
    }

    /// Where the GIL's holder and waiters come from (`Stats::gil`).
    pub(crate) fn gil(&self) -> &str {
        match (&self.walker, &self.gil) {
            (Some(walker), _) => walker.gil_source(),
            (None, Some(gil)) => gil_source(gil, self.os.futex_readable()),
            (None, None) => "not read (no reader for it)",
        }
    }
}

/// The readers of one target: py-spy always (it attached, and it knows thread names), and
/// the walker when it applies and agreed with py-spy at attach.
pub(crate) struct Readers {
    spy: PythonSpy,
    walker: Option<Walker>,
    /// Without the walker: the target's GIL and GC state, when it can be read (None: the
    /// walker reads them).
    gil: Option<Result<Gil, String>>,
    cache: FrameCache,
    names: HashMap<u64, String, FxBuildHasher>,
    /// Threads whose names are known (the walker does not read names).
    named: HashSet<u64, FxBuildHasher>,
    last_lookup: Option<Instant>,
    /// Thread ids and on-CPU states from the OS, and where they could not be had.
    os: OnCpu,
}

impl Readers {
    pub(crate) fn read(&mut self, run_state: RunState<'_>) -> anyhow::Result<Vec<Trace>> {
        match self.walker.as_mut() {
            Some(walker) => {
                let traces = walker.read(run_state)?;
                self.os.walker_read(walker.guessed());
                Ok(traces)
            }
            None => {
                self.os.begin();
                let gil = self.gil.as_ref().and_then(|gil| gil.as_ref().ok());
                let held = gil.and_then(|gil| Some((gil, read_gil(self.spy.pid, gil)?)));
                let os = Some((&mut self.os, &run_state));
                let traces = spy_read(&mut self.spy, &mut self.cache, &mut self.names, os, held)?;
                self.os.spy_read(&traces);
                Ok(traces)
            }
        }
    }

    /// Looks up the names of threads the walker has no name for, at most once a second (py-spy
    /// reads them from the `threading` module). A thread is done with once its name is known:
    /// a program just started has no `threading` yet, and its threads are named once it has.
    pub(crate) fn lookup_names(&mut self, traces: &[Trace]) {
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
        if spy_read(&mut self.spy, &mut self.cache, &mut self.names, None, None).is_ok() {
            if self.named.len() > 100_000 {
                self.named.clear();
            }
            let names = &self.names;
            let known = traces
                .iter()
                .map(|t| t.tid)
                .filter(|tid| names.contains_key(tid));
            self.named.extend(known);
        }
    }
}

/// The GIL's state now, and the holder's `pthread_t` (0 when none holds it); None when it
/// reads torn.
fn read_gil(pid: i32, gil: &Gil) -> Option<(GilRead, u64)> {
    let pieces = gil.pieces();
    let batch = Batch::read(pid, &pieces[..1 + usize::from(pieces[1].1 > 0)]);
    let read = gil.parse(|(at, len)| batch.get(at, len))?;
    if read.holder == 0 {
        return Some((read, 0));
    }
    let at = read.holder + gil.tstate_thread_id;
    let holder = Batch::read(pid, &[(at, 8)]);
    Some((read, usize_at(holder.get(at, 8)?, 0) as u64))
}

/// One read through py-spy, folded like the walker's; with `os`, thread ids and on-CPU states
/// come from the OS where they can (`OnCpu::thread`); with `held`, the GIL's holder (by its
/// `pthread_t`) is marked, and the collector's thread, and, while another thread holds it, an
/// off-CPU thread outside a lock's wait whose futex lies in the GIL as waiting for it.
fn spy_read(
    spy: &mut PythonSpy,
    cache: &mut FrameCache,
    names: &mut HashMap<u64, String, FxBuildHasher>,
    mut os: Option<(&mut OnCpu, &RunState<'_>)>,
    held: Option<(&Gil, (GilRead, u64))>,
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
            let (tid, active, cpu_wait) = match os.as_mut() {
                Some((os, run_state)) => os.thread(trace, &pthreads, run_state),
                None => (
                    trace.os_thread_id.unwrap_or(trace.thread_id),
                    trace.active,
                    false,
                ),
            };
            if let Some(name) = &trace.thread_name {
                if names.get(&tid) != Some(name) {
                    names.insert(tid, name.clone());
                }
            }
            let mut role = GilRole::None;
            if let Some((gil, (_, holder))) = held.filter(|(_, (read, _))| read.holder != 0) {
                if holder == trace.thread_id {
                    role = GilRole::Holds;
                } else if !active && innermost_wait(trace) != Wait::Lock {
                    if let Some((os, _)) = os.as_mut() {
                        if matches!(os.futex(tid as i32), Futex::At(at) if gil.is_gil_futex(at)) {
                            role = GilRole::Waits;
                        }
                    }
                }
            }
            Trace {
                tid,
                active,
                cpu_wait,
                stack: (!trace.frames.is_empty()).then(|| cache.fold(trace)),
                gil: role,
                gc: role == GilRole::Holds && held.is_some_and(|(_, (read, _))| read.collecting),
                contexts: 0,
            }
        })
        .collect())
}

/// Pairs of reads of the running target the walker check makes, and then pairs read with its
/// threads stopped.
const CHECK_TRIES: u32 = 100;
const STOPPED_CHECK_TRIES: u32 = 3;

/// The walker, if it applies to this target and reads the same stacks as py-spy: both read
/// the running target back to back until one pair agrees on every thread (an idle thread
/// agrees at once; a busy one within a few tries).
///
/// A thread whose stack changes faster than two reads (a deep recursion that never rests,
/// its frames in chunks of data stack given back as they are read) can tear every one of
/// them. Then both read with the target's threads stopped, a pair at a time, so they read one
/// instant: the stops are ptrace seize + interrupt, as blocking mode's, and last one pair's
/// reads (1-6 ms for a stack 700 frames deep, most of it py-spy's read of each frame); the
/// reader then says how long they were stopped.
/// Err says why the target is refused: no reader reads it right.
fn checked_walker(
    spy: &mut PythonSpy,
    cache: &mut FrameCache,
    gil: bool,
) -> Result<(Option<Walker>, String), String> {
    let mut walker = match Walker::new(spy, gil) {
        Ok(walker) => walker,
        Err(why) if why.refuse => return Err(why.reason),
        Err(why) => return Ok((None, format!("py-spy ({})", why.reason))),
    };
    let mut names = HashMap::default();
    let mut last = String::from("no read succeeded");
    let mut agree = |spy: &mut PythonSpy, walker: &mut Walker, last: &mut String| {
        let theirs = spy_read(spy, cache, &mut names, None, None);
        let ours = walker.read(RunState::Read);
        match (theirs, ours) {
            (Ok(theirs), Ok(ours)) if check_key(&theirs) == check_key(&ours) => true,
            (Ok(_), Ok(_)) => {
                *last = "the stacks differed".into();
                false
            }
            (_, Err(err)) => {
                *last = format!("{err:#}");
                false
            }
            (Err(_), _) => false,
        }
    };
    let reader = |spy: &PythonSpy, walker: &Walker, how: &str| {
        format!(
            "walker (Python {}, offsets from {}{how})",
            spy.version,
            walker.layout_source()
        )
    };
    for _ in 0..CHECK_TRIES {
        if agree(spy, &mut walker, &mut last) {
            let reader = reader(spy, &walker, "");
            return Ok((Some(walker), reader));
        }
    }
    for _ in 0..STOPPED_CHECK_TRIES {
        let began = Instant::now();
        let lock = match spy.process.lock() {
            Ok(lock) => lock,
            Err(err) => {
                last = format!("{last}; its threads could not be stopped for it: {err}");
                break;
            }
        };
        let agreed = agree(spy, &mut walker, &mut last);
        drop(lock);
        if agreed {
            let stopped_ms = began.elapsed().as_secs_f64() * 1e3;
            let how = format!(
                "; checked with the threads stopped for {stopped_ms:.1} ms, as they changed \
                 under every read"
            );
            let reader = reader(spy, &walker, &how);
            return Ok((Some(walker), reader));
        }
    }
    Ok((None, format!("py-spy (walker check failed: {last})")))
}

/// What the walker check compares of a read: every thread's id and folded stack.
fn check_key(traces: &[Trace]) -> Vec<(u64, Option<&str>)> {
    let mut key: Vec<(u64, Option<&str>)> = traces
        .iter()
        .map(|t| (t.tid, t.stack.as_ref().map(|s| s.text())))
        .collect();
    key.sort();
    key
}
