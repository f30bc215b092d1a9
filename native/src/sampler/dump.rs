//! `sidecar dump`: every Python thread of a process, once, with its frames (and their
//! locals when asked for), through the same readers as the sampler.
//!
//! By default the target runs on while it is read. The walker's reads are checked as a
//! sample's are (a chain of frames torn by the thread moving on is read again), and each
//! dump is followed by a second read: a thread whose stack differs in it was running on, and
//! is named as such (its frames are those of the first read, a stack it was in). With
//! `blocking`, the threads are stopped for the read, locals included, and let go. A read that
//! fails is tried again, a few times, before the dump gives up.
//!
//! Where the walker does not read the target (CPython 3.8–3.10), py-spy reads it, locals too.

use std::collections::HashMap;

use py_spy::config::LockingStrategy;
use py_spy::{Config, StackTrace};

use super::readers::Readers;
use super::runner::read_stopped;
use super::windows::Options;
use crate::process::attach::{attach_spy, InitError};
use crate::process::procfs::start_time;
use crate::process::runstate::ThreadStates;
use crate::rules::format_frame;
use crate::stack::{RunState, Stack, Trace};
use crate::walker::{DumpedFrame, DumpedThread, Walker, UNREADABLE};

/// Reads tried before a dump gives up.
const TRIES: u32 = 5;

/// How long a dump watches a thread found on CPU for a CPU it waits for: past a scheduler tick
/// of any kernel (`crate::process::cpuwait`), so that a thread that got no CPU at all in it
/// waited for one.
const CPU_WATCH: std::time::Duration = std::time::Duration::from_millis(15);

/// What a dump read.
pub struct Dump {
    pub version: String,
    /// Which reader read it, and why (as the sampler says it).
    pub reader: String,
    pub threads: Vec<DumpedThread>,
    pub names: HashMap<u64, String>,
    /// Reads it took (each a dump and, unless blocking, the read after it).
    pub reads: u32,
    /// Threads whose stack the read after the dump found changed: they ran on.
    pub moving: Vec<u64>,
    /// How long the threads were stopped (blocking).
    pub pause: Option<f64>,
}

/// One dump of `pid`, its threads stopped for it when `blocking`; with `locals`, each frame's
/// locals, str and bytes cut at that many characters.
pub fn dump(pid: i32, blocking: bool, locals: Option<usize>) -> Result<Dump, InitError> {
    let Some(started) = start_time(pid) else {
        return Err(InitError::NoProcess(pid));
    };
    let options = Options {
        pid,
        rate_hz: 100.0,
        blocking,
        window: 1.0,
        max_pending: 1,
        walker: true,
        shared_clock: false,
        tasks_hz: 0.0,
        task_scan: Default::default(),
        gil: true,
        stall_s: 0.0,
        cpu_wait: true,
        slow_s: 0.0,
    };
    let (mut readers, reader) = Readers::attach(pid, started, &options)?;
    let version = readers.version();
    let (threads, reads, moving, pause) = match readers.walker_mut() {
        Some(walker) if blocking => stopped(pid, |known| walker.read_dump(known, locals))?,
        Some(walker) => running(pid, walker, locals)?,
        None => spy_dump(pid, started, &mut readers, blocking, locals)?,
    };
    let traces: Vec<Trace> = threads.iter().map(|t| t.trace.clone()).collect();
    readers.lookup_names(&traces);
    let names = readers
        .names()
        .iter()
        .map(|(tid, name)| (*tid, name.clone()))
        .collect();
    Ok(Dump {
        version,
        reader,
        threads,
        names,
        reads,
        moving,
        pause,
    })
}

type Read = (Vec<DumpedThread>, u32, Vec<u64>, Option<f64>);

/// The target running: a dump, then a read to see which threads ran on, and which of those
/// waited for a CPU (`watch_cpu`).
fn running(pid: i32, walker: &mut Walker, locals: Option<usize>) -> Result<Read, InitError> {
    let mut read = fewest_moving(pid, || {
        let dumped = walker.read_dump(RunState::Read, locals)?;
        let after = walker.read(RunState::Read)?;
        let moving = dumped
            .iter()
            .map(|t| &t.trace)
            .filter(|t| !after.iter().any(|a| a.tid == t.tid && text(a) == text(t)))
            .map(|t| t.tid)
            .collect();
        Ok((dumped, moving))
    })?;
    watch_cpu(&mut read, || walker.read(RunState::Read));
    Ok(read)
}

/// Where a thread of `read` was on CPU, one more read (`again`) after `CPU_WATCH` tells
/// whether it waited for a CPU all that time; a failed read leaves them on CPU.
fn watch_cpu(read: &mut Read, mut again: impl FnMut() -> anyhow::Result<Vec<Trace>>) {
    if !read.0.iter().any(|t| t.trace.active) {
        return;
    }
    std::thread::sleep(CPU_WATCH);
    if let Ok(later) = again() {
        for thread in read.0.iter_mut().filter(|t| t.trace.active) {
            thread.trace.cpu_wait = later
                .iter()
                .any(|l| l.tid == thread.trace.tid && l.cpu_wait);
        }
    }
}

/// Reads (`read`: the threads, and those that ran on as they were read) again while a thread
/// ran on and tries are left (a thread that waits reads the same twice at once; a busy one
/// may never), keeping the read with the fewest threads that moved.
fn fewest_moving(
    pid: i32,
    mut read: impl FnMut() -> anyhow::Result<(Vec<DumpedThread>, Vec<u64>)>,
) -> Result<Read, InitError> {
    let mut best: Option<(Vec<DumpedThread>, Vec<u64>)> = None;
    let mut last = String::new();
    let mut reads = 0;
    while reads < TRIES {
        reads += 1;
        match read() {
            Ok((threads, moving)) => {
                let still = moving.is_empty();
                if best.as_ref().is_none_or(|(_, m)| moving.len() < m.len()) {
                    best = Some((threads, moving));
                }
                if still {
                    break;
                }
            }
            Err(err) => last = format!("{err:#}"),
        }
    }
    match best {
        Some((threads, moving)) => Ok((threads, reads, moving, None)),
        None => Err(unread(pid, reads, &last)),
    }
}

/// The threads stopped for each read (`dump_read`), until one reads.
fn stopped(
    pid: i32,
    mut dump_read: impl FnMut(RunState<'_>) -> anyhow::Result<Vec<DumpedThread>>,
) -> Result<Read, InitError> {
    let process = remoteprocess::Process::new(pid)
        .map_err(|err| InitError::Other(format!("PID {pid}: {err}")))?;
    let mut states = ThreadStates::new(pid);
    let mut python_threads = Vec::new();
    let mut last = String::new();
    for reads in 1..=TRIES {
        let mut dumped = None;
        let (result, pause) = read_stopped(&process, &mut python_threads, &mut states, |known| {
            let threads = dump_read(RunState::Known(known))?;
            let traces = threads.iter().map(|t| t.trace.clone()).collect();
            dumped = Some(threads);
            Ok(traces)
        });
        match (result, dumped) {
            (Ok(_), Some(threads)) => return Ok((threads, reads, Vec::new(), pause)),
            (Err(err), _) => last = format!("{err:#}"),
            (Ok(_), None) => last = "no read".into(),
        }
    }
    Err(unread(pid, TRIES, &last))
}

/// Through py-spy, where the walker does not read the target (CPython 3.8–3.10): the
/// sampler's read (thread ids, states, the GIL) beside py-spy's own traces, which hold each
/// frame's parts and locals, thread by thread. A thread whose stacks differ in the two ran on
/// between them; the reads are tried again while one does and tries are left.
fn spy_dump(
    pid: i32,
    started: u64,
    readers: &mut Readers,
    blocking: bool,
    locals: Option<usize>,
) -> Result<Read, InitError> {
    let config = Config {
        blocking: LockingStrategy::NonBlocking,
        dump_locals: u64::from(locals.is_some()),
        ..Config::default()
    };
    let mut spy =
        attach_spy(pid, &config).map_err(|err| InitError::classify(pid, started, &err))?;
    let mut both = |run_state: RunState<'_>| -> anyhow::Result<(Vec<DumpedThread>, Vec<u64>)> {
        let ours = readers.read(run_state)?;
        let theirs = spy.get_stack_traces()?;
        if ours.len() != theirs.len() {
            anyhow::bail!("the threads changed between two reads");
        }
        let mut moving = Vec::new();
        let threads = ours
            .into_iter()
            .zip(&theirs)
            .map(|(trace, spy_trace)| {
                let thread = spy_thread(trace, spy_trace);
                if text(&thread.trace) != Some(folded(&thread.frames).as_str()) {
                    moving.push(thread.trace.tid);
                }
                thread
            })
            .collect();
        Ok((threads, moving))
    };
    if blocking {
        return stopped(pid, |known| both(known).map(|(threads, _)| threads));
    }
    let mut read = fewest_moving(pid, || both(RunState::Read))?;
    watch_cpu(&mut read, || readers.read(RunState::Read));
    Ok(read)
}

/// A thread as the sampler read it, with py-spy's frames of it (and their locals).
fn spy_thread(trace: Trace, spy_trace: &StackTrace) -> DumpedThread {
    let file = |f: &py_spy::Frame| f.short_filename.clone().unwrap_or(f.filename.clone());
    let frames = spy_trace
        .frames
        .iter()
        .map(|f| DumpedFrame {
            function: f.name.clone(),
            file: file(f),
            line: f.line,
            locals: f.locals.as_ref().map(|locals| {
                Ok(locals
                    .iter()
                    .map(|l| {
                        let repr = l.repr.clone().unwrap_or_else(|| UNREADABLE.into());
                        (l.name.clone(), repr)
                    })
                    .collect())
            }),
        })
        .collect();
    DumpedThread { trace, frames }
}

/// Frames (innermost first) folded as the sampler folds a stack.
fn folded(frames: &[DumpedFrame]) -> String {
    let parts: Vec<String> = frames
        .iter()
        .rev()
        .map(|f| format_frame(&f.function, &f.file, f.line))
        .collect();
    parts.join(";")
}

fn text(trace: &Trace) -> Option<&str> {
    trace.stack.as_ref().map(Stack::text)
}

fn unread(pid: i32, tries: u32, last: &str) -> InitError {
    InitError::Other(format!(
        "PID {pid}: no whole read of its threads in {tries} tries (the last: {last})"
    ))
}
