//! The asyncio tasks of a CPython 3.11–3.15 process, read from its memory: each live task's
//! name, its await chain (its coroutine, the coroutine that one awaits, ... down to the future
//! the innermost one waits on), the task it awaits, and its state (`running`, `ready`,
//! `waiting`).
//!
//! The pieces, by concern: `layout` (where each version keeps the task, future and coroutine
//! fields, and where its registry is), `objects` (types, dicts, sets and names in the target),
//! `attributes` (an instance's attribute by name: what a request's objects hold),
//! `requests` (the request a request's task serves: method, path, route, start, trace id),
//! `registry` (finding the live tasks: `asyncio.tasks`' registry up to 3.13, the `_asyncio`
//! module's task lists from 3.14), `chain` (the tasks' await chains and states, kept from one
//! scan to the next while unchanged), `running` (the coroutines a running task is in, from its
//! thread's frames), `gather` (the tasks a `gather` or a `TaskGroup` waits for, on 3.11–3.13,
//! whose tasks do not say which task awaits them), `timers` (tasks whose sleep is over, due
//! to run while the loop is busy elsewhere), `clock` (the clock of the loops' timers, which the
//! scan times its reads by). Code objects and frames are formatted by the walker's `objects`,
//! so a task's frames read like a thread's. A sampler's scans on a thread of their own are
//! `crate::sampler::task_ticks`.

mod attributes;
mod chain;
mod clock;
mod gather;
mod layout;
mod objects;
mod registry;
mod requests;
mod running;
mod timers;
mod tornado;

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use anyhow::{bail, Result};
use py_spy::PythonSpy;

use crate::budget::{self, Charge};
use crate::process::memory::{read, Batch};
use crate::walker::objects::{Code, ShortFiles};
use crate::walker::{layout_of, Layout};
pub use chain::TaskState;
use chain::{read_tasks, ChainCache, FirstRead, RawTask};
pub use layout::TaskLayout;
use layout::{Registry, ASYNCIO_DEBUG_WORDS};
use objects::{task_name, Types};
use registry::{asyncio_debug, find_sets, list_tasks, set_tasks, Sets};
pub use requests::Request;
use rustc_hash::FxBuildHasher as FxBuild;

/// Tasks read per scan at most: past it, a slice of them (a different one each scan, so that
/// every task is read in turn) and a count of the rest.
pub const MAX_TASKS: usize = 20_000;

/// What a scanner is asked to do beyond the defaults: a lower bound than `MAX_TASKS` (tests:
/// a few hundred tasks past it instead of 20,000), and whether the await chains of the last
/// scan are kept (the benchmark's legs without it read every chain again).
#[derive(Debug, Clone, Copy)]
pub struct ScanOptions {
    /// Tasks read per scan at most: 1 to `MAX_TASKS`.
    pub bound: usize,
    pub chain_cache: bool,
}

impl Default for ScanOptions {
    fn default() -> ScanOptions {
        ScanOptions {
            bound: MAX_TASKS,
            chain_cache: true,
        }
    }
}
/// Tasks found per scan at most (their addresses only): past it, the lists of 3.14+ are not
/// followed further, and what they still hold is neither read nor counted.
const MAX_FOUND: usize = 200_000;
/// How deep one task's awaiting tasks are followed for its folded stack.
const MAX_AWAITERS: usize = 32;
const CODE_CACHE_BYTES: usize = 16 << 20;

/// One live task in one scan.
#[derive(Debug, Clone)]
pub struct Task {
    /// The task object's address: an id within the scan.
    pub id: usize,
    pub name: String,
    pub state: TaskState,
    /// `function (file:line)` of each coroutine of its await chain, outermost first.
    pub frames: Vec<Arc<str>>,
    /// What the innermost coroutine awaits: "Task", "Future", or None (nothing, or an
    /// awaitable of another kind).
    pub future: Option<&'static str>,
    /// The task it awaits.
    pub awaits: Option<usize>,
    /// The task that awaits it when it does not say so itself (`gather`, `TaskGroup`).
    pub awaited_by: Option<usize>,
    /// The request it serves, for a task of a request's root (`requests`).
    pub request: Option<Request>,
}

/// What one scan found, and what it left out.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub tasks: Vec<Task>,
    /// Tasks left out because a read of them tore (freed or changed as they were read).
    pub torn: u64,
    /// Tasks past the scan's bound (`MAX_TASKS`), not read.
    pub unread: u64,
    /// Requests' tasks whose request was left out: it changed as it was read, or its reads
    /// did not check out.
    pub requests_torn: u64,
    /// When the scan's requests were read, on the clocks their starts are kept on (unix
    /// seconds, monotonic seconds): `Started::at`.
    pub clocks: (f64, f64),
}

/// A scan's task-samples (one per task it read) as a profile counts them: by distinct folded
/// stack, with the tasks it left out; and the task running as it began (its name and folded
/// stack), with when that was (unix seconds), for the stalls it may have held.
#[derive(Debug, Clone, Default)]
pub struct TaskSamples {
    pub stacks: Vec<(String, u64)>,
    pub running: Vec<(String, String)>,
    pub at: f64,
    /// Tasks left out because a read of them tore.
    pub torn: u64,
    /// Tasks past the scan's bound, not read.
    pub unread: u64,
    /// Requests' tasks whose request was left out (their stacks have no route frame).
    pub requests_torn: u64,
    /// Each request the scan read: what the slow requests are tracked from.
    pub seen: Vec<Seen>,
}

/// A request as one scan saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// Its task's address and name (`Task-N`): a task's name is not reused by the next one
    /// made at its address.
    pub task: (usize, String),
    pub request: Request,
    /// When it started (unix seconds), where its framework keeps that.
    pub started: Option<f64>,
    /// Its task's folded stack: an index into the scan's `stacks`.
    pub line: usize,
}

/// The route frames of a scan's requests' tasks: each task's tag, an index into `frames` + 1.
#[derive(Default)]
struct Routes {
    tags: HashMap<usize, u32, FxBuild>,
    frames: Vec<String>,
    /// The request of each request's task read, by the task's address.
    requests: HashMap<usize, Request, FxBuild>,
}

/// The process a scan reads and where its version keeps what the scan reads: what every
/// step of a scan is given (with the scanner's cache of types).
struct Target {
    pid: i32,
    layout: Layout,
    tl: TaskLayout,
    /// The interpreter state's address.
    interpreter: usize,
}

/// Reads the tasks of one target, scan after scan.
pub struct TaskScanner {
    target: Target,
    types: Types,
    sets: Option<Sets>,
    codes: HashMap<usize, Code, FxBuild>,
    code_bytes: Charge,
    files: ShortFiles,
    /// Scans so far: where the slice of a scan past `MAX_TASKS` starts.
    scans: usize,
    chains: ChainCache,
    /// The tasks the last scan found in the lists of 3.14+.
    found: Vec<usize>,
    /// Tasks read per scan at most (`ScanOptions::bound`).
    bound: usize,
    timers: timers::Timers,
    first: FirstRead,
    requests: requests::Requests,
}

/// The one line an older Python gets.
pub fn unsupported(version: &str) -> String {
    format!("asyncio tasks are read from CPython 3.11 on; this process runs Python {version}")
}

impl TaskScanner {
    /// A scanner for the process `spy` attached to, as `options` ask; fails in one line on
    /// versions before 3.11, free-threaded builds, or a target whose task registry cannot be
    /// found.
    pub fn new(spy: &PythonSpy, options: ScanOptions) -> Result<TaskScanner> {
        let version = &spy.version;
        let Some(tl) = TaskLayout::table(version.minor).filter(|_| version.major == 3) else {
            bail!(unsupported(&version.to_string()));
        };
        let layout = layout_of(spy)?;
        let interpreter = spy.addresses.interpreter_address;
        if interpreter == 0 {
            bail!("no interpreter found");
        }
        let mut tl = match tl.registry {
            Registry::Lists => {
                let at = asyncio_debug(spy.pid)?;
                let mut raw = vec![0u8; ASYNCIO_DEBUG_WORDS * 8];
                read(spy.pid, at, &mut raw)?;
                tl.with_asyncio_debug(&raw)?
            }
            _ => tl,
        };
        // the walker's coroutine object: its row, or what the target's debug offsets give
        tl.gen = layout.gen;
        let mut scanner = TaskScanner {
            target: Target {
                pid: spy.pid,
                layout,
                tl,
                interpreter,
            },
            types: Types::default(),
            sets: None,
            codes: HashMap::default(),
            code_bytes: Charge::new(&budget::CODES, CODE_CACHE_BYTES),
            files: ShortFiles::new(spy.pid, spy.dockerized),
            scans: 0,
            found: Vec::new(),
            bound: options.bound.clamp(1, MAX_TASKS),
            timers: timers::Timers::default(),
            first: FirstRead::default(),
            chains: ChainCache::new(options.chain_cache),
            requests: requests::Requests::default(),
        };
        scanner.find_registry()?;
        Ok(scanner)
    }

    fn find_registry(&mut self) -> Result<()> {
        if self.target.tl.registry != Registry::Lists && self.sets.is_none() {
            self.sets = Some(find_sets(&self.target, &mut self.types)?);
        }
        Ok(())
    }

    /// Every live task now, with its name, chain and state, and the request a request's
    /// task serves.
    pub fn scan(&mut self) -> Result<Scan> {
        let (raw, mut torn, unread) = self.read_all()?;
        let clocks = requests::clocks();
        let mut tasks = Vec::with_capacity(raw.len());
        let mut nameless = Vec::new();
        let mut requests_torn = 0;
        for task in &raw {
            let Ok(name) = task_name(
                self.target.pid,
                &self.target.layout,
                &mut self.types,
                task.name,
            ) else {
                nameless.push(task.address);
                continue;
            };
            let frames: Vec<Arc<str>> = task
                .frames
                .iter()
                .map(|&(code, offset)| frame_text(&mut self.codes, code, offset))
                .collect();
            let request = match self.request_of(task, frames.first()) {
                Some(Ok(request)) => Some(request),
                Some(Err(_)) => {
                    requests_torn += 1;
                    None
                }
                None => None,
            };
            tasks.push(Task {
                id: task.address,
                name,
                state: task.state,
                frames,
                future: task.future.map(|(_, kind)| match kind {
                    objects::Kind::Task => "Task",
                    _ => "Future",
                }),
                awaits: task.awaits,
                awaited_by: task.awaited_by,
                request,
            });
        }
        torn += nameless.len() as u64 + drop_awaited_by_torn(&mut tasks, &nameless);
        self.chains.keep(raw);
        Ok(Scan {
            tasks,
            torn,
            unread,
            requests_torn,
            clocks,
        })
    }

    /// The request of `task` when its outermost frame (`root`) is a request's root: None
    /// for other tasks.
    fn request_of(&mut self, task: &RawTask, root: Option<&Arc<str>>) -> Option<Result<Request>> {
        let framework = requests::framework_of(root?)?;
        let (coro, code) = task.root()?;
        let header = self.codes.get(&code)?.header.clone();
        let read = self
            .requests
            .read(&self.target, (coro, code, &header), framework);
        if let Err(e) = &read {
            if std::env::var_os("SIDECAR_DEBUG_REQUESTS").is_some() {
                eprintln!("request: {e:#}");
            }
        }
        Some(read)
    }

    /// The route frame (`rules::route_frame`) of each request's task of a scan, and the
    /// requests left out.
    fn routes(&mut self, raw: &[RawTask]) -> (Routes, u64) {
        let mut routes = Routes::default();
        let mut index: HashMap<String, u32, FxBuild> = HashMap::default();
        let mut torn = 0;
        for task in raw {
            let Some(&(code, offset)) = task.frames.first() else {
                continue;
            };
            let root = frame_text(&mut self.codes, code, offset);
            match self.request_of(task, Some(&root)) {
                Some(Ok(request)) => {
                    let frame =
                        crate::rules::route_frame(&request.method, request.route.as_deref());
                    let next = index.len() as u32 + 1;
                    let tag = *index.entry(frame.clone()).or_insert_with(|| {
                        routes.frames.push(frame);
                        next
                    });
                    routes.tags.insert(task.address, tag);
                    routes.requests.insert(task.address, request);
                }
                Some(Err(_)) => torn += 1,
                None => {}
            }
        }
        (routes, torn)
    }

    /// A scan's folded stacks with their task-samples, and the tasks it left out. Tasks are
    /// told apart by their chains' code objects and instructions, and each distinct line is
    /// written once, not once a task.
    pub fn scan_samples(&mut self) -> Result<TaskSamples> {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let (raw, torn, unread) = self.read_all()?;
        let (mut routes, requests_torn) = self.routes(&raw);
        let codes = &mut self.codes;
        let mut running = Vec::new();
        let mut placed: Vec<(usize, usize, usize)> = Vec::new();
        let stacks = fold_counts(
            &raw,
            |task| &task.frames,
            |task| routes.tags.get(&task.address).copied().unwrap_or(0),
            |task, line| {
                if routes.requests.contains_key(&task.address) {
                    placed.push((task.address, task.name, line));
                }
            },
            |task, chain, tag| {
                let mut line = String::new();
                if tag != 0 {
                    line.push_str(&routes.frames[tag as usize - 1]);
                    line.push(';');
                }
                for t in chain {
                    for &(code, offset) in &t.frames {
                        line.push_str(&frame_text(codes, code, offset));
                        line.push(';');
                    }
                }
                line.push_str(task.state.leaf());
                if task.state == TaskState::Running {
                    running.push((task.name, line.clone()));
                }
                line
            },
        );
        let target = &self.target;
        let running = running
            .into_iter()
            .filter_map(|(name, line)| {
                let name = task_name(target.pid, &target.layout, &mut self.types, name).ok()?;
                Some((name, line))
            })
            .collect();
        let (wall, mono) = requests::clocks();
        let mut seen = Vec::with_capacity(placed.len());
        for (address, name, line) in placed {
            let Some(request) = routes.requests.remove(&address) else {
                continue;
            };
            let Ok(name) = task_name(target.pid, &target.layout, &mut self.types, name) else {
                continue; // no name to tell it from the next task at its address
            };
            let started = request.started.map(|s| s.at(wall, mono).0);
            seen.push(Seen {
                task: (address, name),
                request,
                started,
                line,
            });
        }
        self.chains.keep(raw);
        Ok(TaskSamples {
            stacks,
            running,
            at,
            torn,
            unread,
            requests_torn,
            seen,
        })
    }

    /// Every live task's chain and state as read (its code objects loaded), with the tasks
    /// left out because a read of them tore and those past the scan's bound.
    fn read_all(&mut self) -> Result<(Vec<RawTask>, u64, u64)> {
        self.find_registry()?;
        let (mut addresses, mut torn) = match &mut self.sets {
            Some(sets) => set_tasks(self.target.pid, &mut self.types, sets, MAX_FOUND)?,
            None => {
                // the lists link the tasks through the tasks: the last scan's are read first
                self.timers.read_before(&self.target, &mut self.types);
                self.first.fill(&self.target, &self.chains, &self.found);
                list_tasks(&self.target, MAX_FOUND, &self.first.batch)?
            }
        };
        let found = addresses.len();
        if self.target.tl.registry == Registry::Lists {
            self.found.clone_from(&addresses);
        }
        if found > self.bound {
            // a different slice each scan (the addresses are sorted): over scans, all of them
            addresses.rotate_left(self.scans.wrapping_mul(self.bound) % found);
            addresses.truncate(self.bound);
        }
        self.scans += 1;
        let unread = (found - addresses.len()) as u64;
        if self.sets.is_some() {
            self.timers.read_before(&self.target, &mut self.types);
            self.first.fill(&self.target, &self.chains, &addresses);
        }
        let (mut raw, mut torn_tasks, read_at) = read_tasks(
            &self.target,
            &mut self.types,
            &mut self.chains,
            &addresses,
            &self.first,
        );
        if let Some(sets) = self.sets.as_mut().filter(|_| !torn_tasks.is_empty()) {
            // some task's address may not have been its hash's: the references are read again
            sets.distrust_hashes();
        }
        let (target, types) = (&self.target, &mut self.types);
        let ran = raw.iter().any(|t| t.state == TaskState::Running);
        torn_tasks.extend(running::add_running_chains(target, types, &mut raw));
        let known = &self.first.batch;
        let first = (&self.first.batch, self.first.at);
        self.timers
            .mark_due(target, types, &mut raw, read_at, first);
        gather::link_gathered(target, types, &mut raw);
        gather::link_awaiters(target, types, &mut raw, &torn_tasks);
        if unread == 0 {
            // awaited by a task the scan did not find (the registry read as it changed): its
            // stack would begin mid-chain, as if no task awaited it
            torn_tasks.extend(orphans(&mut raw, &torn_tasks));
        }
        tornado::add_runner_chains(target, types, known, &mut raw, &mut self.first.heads);
        if ran {
            // a task made eagerly by a running task, read before that one awaited it
            let since = gather::awaited_since_read(target, &raw);
            raw.retain(|t| !since.contains(&t.address));
            torn_tasks.extend(since);
        }
        torn += torn_tasks.len() as u64 + drop_awaited_by_torn(&mut raw, &torn_tasks);
        // a task whose frame names a code that cannot be read was read torn (its code freed,
        // or no code at all): it is left out, with the tasks it awaits, and the scan goes on
        let unreadable = self.load_codes(&raw);
        if !unreadable.is_empty() {
            let bad: Vec<usize> = raw
                .iter()
                .filter(|t| t.frames.iter().any(|(code, _)| unreadable.contains(code)))
                .map(|t| t.address)
                .collect();
            torn += bad.len() as u64 + drop_awaited_by_torn(&mut raw, &bad);
            raw.retain(|t| !bad.contains(&t.address));
        }
        Ok((raw, torn, unread))
    }

    /// Makes sure every code object the tasks' frames name is cached and still the one cached;
    /// returns those that could not be read.
    fn load_codes(&mut self, tasks: &[RawTask]) -> Vec<usize> {
        if self.code_bytes.over(0) {
            self.codes.clear();
            self.code_bytes.clear();
        }
        let (first, size) = (self.target.layout.code_first, self.target.layout.code_size);
        // the tasks' thousands of frames name a few codes: a code met lately is not collected
        // again (the rest are sorted out below)
        let mut recent = [0usize; 16];
        let mut codes: Vec<usize> = Vec::new();
        for &(code, _) in tasks.iter().flat_map(|t| &t.frames) {
            let seen = &mut recent[(code >> 4) % recent.len()];
            if *seen != code {
                *seen = code;
                codes.push(code);
            }
        }
        codes.sort_unstable();
        codes.dedup();
        let mut unreadable = Vec::new();
        let pieces: Vec<(usize, usize)> = codes.iter().map(|&c| (c + first, size)).collect();
        let batch = Batch::read_merged(self.target.pid, &pieces, objects::MERGE_GAP);
        for (&code, &(at, len)) in codes.iter().zip(&pieces) {
            let Some(header) = batch.get(at, len) else {
                continue; // freed: its frames read "? (?:0)" only if it is not cached
            };
            if self
                .codes
                .get(&code)
                .is_some_and(|c| c.header[..] == *header)
            {
                continue;
            }
            let Ok(loaded) = Code::load(
                self.target.pid,
                &self.target.layout,
                code,
                header,
                &mut self.files,
            ) else {
                self.codes.remove(&code);
                unreadable.push(code);
                continue;
            };
            self.code_bytes.add(loaded.cost());
            if let Some(old) = self.codes.insert(code, loaded) {
                self.code_bytes.sub(old.cost());
            }
        }
        unreadable
    }
}

/// A code object's frame text at an instruction, from the scan's cache of code objects.
fn frame_text(codes: &mut HashMap<usize, Code, FxBuild>, code: usize, offset: i64) -> Arc<str> {
    match codes.get_mut(&code) {
        Some(code) => code.frame(offset),
        None => Arc::from("? (?:0)"),
    }
}

/// What folding needs of a task of a scan (a `Task`, or a `RawTask` as read): who it is,
/// its state, and the task it awaits or that awaits it.
pub trait Linked {
    fn id(&self) -> usize;
    fn state(&self) -> TaskState;
    fn awaits(&self) -> Option<usize>;
    fn awaited_by(&self) -> Option<usize>;
}

/// `Linked` for a task type whose id is its field `$id`.
macro_rules! linked {
    ($task:ty, $id:ident) => {
        impl Linked for $task {
            fn id(&self) -> usize {
                self.$id
            }
            fn state(&self) -> TaskState {
                self.state
            }
            fn awaits(&self) -> Option<usize> {
                self.awaits
            }
            fn awaited_by(&self) -> Option<usize> {
                self.awaited_by
            }
        }
    };
}

linked!(Task, id);
linked!(RawTask, address);

/// The task awaiting each awaited task of a scan, by id: the first task that awaits it, else
/// what the task says awaits it (3.14+) or the task whose `gather` or `TaskGroup` holds it.
/// The awaiting task may be one the scan left out.
pub fn awaiters<T: Linked>(tasks: &[T]) -> HashMap<usize, usize, FxBuild> {
    let mut awaited_by: HashMap<usize, usize, FxBuild> =
        HashMap::with_capacity_and_hasher(tasks.len(), FxBuild);
    for task in tasks {
        if let Some(awaited) = task.awaits() {
            awaited_by.entry(awaited).or_insert(task.id());
        }
    }
    for task in tasks {
        if let Some(awaiter) = task.awaited_by() {
            awaited_by.entry(task.id()).or_insert(awaiter);
        }
    }
    awaited_by
}

/// Takes out of `tasks` those awaited by a task neither among them nor `torn`, and returns
/// their addresses.
fn orphans<T: Linked>(tasks: &mut Vec<T>, torn: &[usize]) -> Vec<usize> {
    let known: std::collections::HashSet<usize, FxBuild> = tasks
        .iter()
        .map(|t| t.id())
        .chain(torn.iter().copied())
        .collect();
    let mut out = Vec::new();
    tasks.retain(|task| {
        let orphan = task.awaited_by().is_some_and(|a| !known.contains(&a));
        if orphan {
            out.push(task.id());
        }
        !orphan
    });
    out
}

/// Leaves out the tasks that a task left out as torn awaits, directly or through others:
/// their folded stacks would begin in the middle of a chain, as if no task awaited them.
/// Returns how many were left out. (A task whose awaiting task is past the scan's bound
/// keeps its own chain: the scan never read that one.)
fn drop_awaited_by_torn<T: Linked>(tasks: &mut Vec<T>, torn: &[usize]) -> u64 {
    if torn.is_empty() {
        return 0;
    }
    let torn: std::collections::HashSet<usize, FxBuild> = torn.iter().copied().collect();
    let awaited_by = awaiters(tasks);
    let before = tasks.len();
    tasks.retain(|task| {
        let mut at = task.id();
        for _ in 0..MAX_AWAITERS {
            match awaited_by.get(&at) {
                Some(up) if torn.contains(up) => return false,
                Some(&up) => at = up,
                None => break,
            }
        }
        true
    });
    (before - tasks.len()) as u64
}

/// Each task of a scan with the chain its folded stack is made of: the tasks that await it,
/// outermost first, then the task itself.
fn chains<'a, T: Linked>(tasks: &'a [T], mut each: impl FnMut(&'a T, &[&'a T])) {
    let by_id: HashMap<usize, &T, FxBuild> = tasks.iter().map(|t| (t.id(), t)).collect();
    let awaited_by = awaiters(tasks);
    let mut chain = Vec::new();
    for task in tasks {
        chain.clear();
        chain.push(task);
        let mut at = task.id();
        while let Some(&up) = awaited_by.get(&at) {
            if chain.len() > MAX_AWAITERS || chain.iter().any(|t| t.id() == up) {
                break;
            }
            let Some(&awaiter) = by_id.get(&up) else {
                break;
            };
            chain.push(awaiter);
            at = up;
        }
        chain.reverse();
        each(task, &chain);
    }
}

/// The folded line of a task whose chain is `chain`: the route frame of the first request of
/// the chain, the frames of each, then its state.
fn line(task: &Task, chain: &[&Task]) -> String {
    let route = chain
        .iter()
        .find_map(|t| t.request.as_ref())
        .map(|r| crate::rules::route_frame(&r.method, r.route.as_deref()));
    let mut parts: Vec<&str> = route.iter().map(String::as_str).collect();
    for t in chain {
        parts.extend(t.frames.iter().map(|f| f.as_ref()));
    }
    parts.push(task.state.leaf());
    parts.join(";")
}

/// The folded stack of every task of a scan, in the scan's order: a request's route frame,
/// the chains of the tasks that await it (outermost first), its own chain, and its state's
/// leaf.
pub fn fold(tasks: &[Task]) -> Vec<String> {
    let mut out = Vec::with_capacity(tasks.len());
    chains(tasks, |task, chain| out.push(line(task, chain)));
    out
}

/// `fold`'s lines with their task-samples, each distinct line once, in the order first met:
/// tasks are told apart by their state, the first nonzero `tag` of their chain (a request's
/// route) and their chains' `frames` (any key that stands for a frame's text), and a line is
/// written (`line`, given that tag) once per distinct one; `placed` is told each task's line
/// (its index in the output).
pub fn fold_counts<T: Linked, K: Clone + Eq + Hash>(
    tasks: &[T],
    frames: impl Fn(&T) -> &[K],
    tag: impl Fn(&T) -> u32,
    mut placed: impl FnMut(&T, usize),
    mut line: impl FnMut(&T, &[&T], u32) -> String,
) -> Vec<(String, u64)> {
    let mut index: HashMap<(TaskState, u32, Vec<K>), usize, FxBuild> = HashMap::default();
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut key: (TaskState, u32, Vec<K>) = (TaskState::Ready, 0, Vec::new());
    chains(tasks, |task, chain| {
        key.0 = task.state();
        key.1 = chain.iter().map(|t| tag(t)).find(|&t| t != 0).unwrap_or(0);
        key.2.clear();
        for t in chain {
            key.2.extend_from_slice(frames(t));
        }
        if let Some(&i) = index.get(&key) {
            out[i].1 += 1;
            placed(task, i);
        } else {
            index.insert(key.clone(), out.len());
            placed(task, out.len());
            out.push((line(task, chain, key.1), 1));
        }
    });
    out
}

/// One scan of the tasks of `pid`: attaches (py-spy finds the interpreter), scans, and lets
/// go; the target is never stopped. A scan that tore as a whole is tried again, a few times.
pub fn snapshot(pid: i32) -> Result<(String, Scan), crate::process::attach::InitError> {
    use crate::process::attach::InitError;
    let Some(started) = crate::process::procfs::start_time(pid) else {
        return Err(InitError::NoProcess(pid));
    };
    let config = py_spy::Config {
        blocking: py_spy::config::LockingStrategy::NonBlocking,
        ..py_spy::Config::default()
    };
    let spy = crate::process::attach::attach_spy(pid, &config)
        .map_err(|err| InitError::classify(pid, started, &err))?;
    let version = spy.version.to_string();
    let mut scanner = TaskScanner::new(&spy, ScanOptions::default())
        .map_err(|err| InitError::Other(format!("PID {pid}: {err:#}")))?;
    let mut last = None;
    for _ in 0..5 {
        match scanner.scan() {
            Ok(scan) => return Ok((version, scan)),
            Err(err) => last = Some(err),
        }
    }
    let err = last.map_or_else(|| "no scan".to_string(), |e| format!("{e:#}"));
    Err(InitError::Other(format!(
        "PID {pid}: cannot read its tasks: {err}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: usize, state: TaskState, frames: &[&str], awaits: Option<usize>) -> Task {
        Task {
            id,
            name: format!("t{id}"),
            state,
            frames: frames.iter().map(|f| Arc::from(*f)).collect(),
            future: None,
            awaits,
            awaited_by: None,
            request: None,
        }
    }

    #[test]
    fn an_awaited_tasks_stack_follows_the_tasks_that_await_it() {
        let tasks = [
            task(1, TaskState::Waiting, &["main (m.py:9)"], Some(2)),
            task(2, TaskState::Waiting, &["parent (m.py:5)"], Some(3)),
            task(
                3,
                TaskState::Ready,
                &["child (m.py:2)", "sleep (t.py:1)"],
                None,
            ),
        ];
        assert_eq!(
            fold(&tasks),
            [
                "main (m.py:9);[waiting]",
                "main (m.py:9);parent (m.py:5);[waiting]",
                "main (m.py:9);parent (m.py:5);child (m.py:2);sleep (t.py:1);[ready]",
            ]
        );
        // tasks that await each other in a loop (a torn scan) end where the loop closes
        let looped = [
            task(1, TaskState::Waiting, &["a (m.py:1)"], Some(2)),
            task(2, TaskState::Running, &["b (m.py:2)"], Some(1)),
        ];
        assert_eq!(
            fold(&looped),
            [
                "b (m.py:2);a (m.py:1);[waiting]",
                "a (m.py:1);b (m.py:2);[running]"
            ]
        );
    }

    #[test]
    fn fold_counts_counts_folds_lines() {
        let shared: Vec<Arc<str>> = ["main (m.py:9)", "wait (m.py:3)"]
            .iter()
            .map(|f| Arc::from(*f))
            .collect();
        let with = |id: usize, state: TaskState, frames: Vec<Arc<str>>| Task {
            frames,
            ..task(id, state, &[], None)
        };
        let tasks = [
            with(1, TaskState::Waiting, shared.clone()),
            with(2, TaskState::Waiting, shared.clone()),
            with(3, TaskState::Ready, shared.clone()),
            // the same text from another cached copy: one line with the others
            with(
                4,
                TaskState::Waiting,
                vec![Arc::from("main (m.py:9)"), shared[1].clone()],
            ),
            task(5, TaskState::Running, &["other (m.py:1)"], Some(3)),
        ];
        let mut expected: HashMap<String, u64> = HashMap::new();
        for line in fold(&tasks) {
            *expected.entry(line).or_default() += 1;
        }
        let mut counted: HashMap<String, u64> = HashMap::new();
        let counts = fold_counts(
            &tasks,
            |t| &t.frames,
            |_| 0,
            |_, _| {},
            |t, chain, _| line(t, chain),
        );
        for (line, n) in counts.clone() {
            *counted.entry(line).or_default() += n;
        }
        assert_eq!(counted, expected);
        assert_eq!(expected["main (m.py:9);wait (m.py:3);[waiting]"], 3);
        // tasks 1, 2 and 4 have the same frames' texts: one line, written once
        assert_eq!(counts.len(), 3);
        assert_eq!(
            counts[0],
            ("main (m.py:9);wait (m.py:3);[waiting]".into(), 3)
        );
    }

    /// A waiting task `id` that says `awaiter` awaits it.
    fn by(id: usize, awaiter: usize) -> Task {
        Task {
            awaited_by: Some(awaiter),
            ..task(id, TaskState::Waiting, &["handler (h.py:3)"], None)
        }
    }

    #[test]
    fn a_task_awaited_by_a_task_the_scan_did_not_find_is_taken_out() {
        // 1 says 9 awaits it, 9 was not found; 2 says 3 awaits it, 3 tore; 4 says 1 awaits it;
        // 5 says 6 awaits it, 6 was read
        let mut tasks = vec![
            by(1, 9),
            by(2, 3),
            by(4, 1),
            by(5, 6),
            task(6, TaskState::Waiting, &["start (h.py:1)"], None),
        ];
        let out = orphans(&mut tasks, &[3]);
        assert_eq!(out, [1]);
        let ids: Vec<usize> = tasks.iter().map(|t| t.id).collect();
        assert_eq!(ids, [2, 4, 5, 6]);
        // those it awaits go with it, as with a torn one
        let mut torn = vec![3];
        torn.extend(out);
        assert_eq!(drop_awaited_by_torn(&mut tasks, &torn), 2);
        let ids: Vec<usize> = tasks.iter().map(|t| t.id).collect();
        assert_eq!(ids, [5, 6]);
    }

    #[test]
    fn the_tasks_a_torn_task_awaits_are_left_out() {
        // 1 awaits 2 (it says so), 3 says 1 awaits it (3.14+), 4 says 9 awaits it; 9 tore,
        // 5 says 8 awaits it, 8 is past the scan's bound
        let mut tasks = vec![
            task(1, TaskState::Waiting, &["start (h.py:1)"], Some(2)),
            task(2, TaskState::Waiting, &["request (h.py:2)"], None),
            by(3, 1),
            by(4, 9),
            by(6, 4),
            by(5, 8),
        ];
        assert_eq!(drop_awaited_by_torn(&mut tasks, &[9]), 2);
        let ids: Vec<usize> = tasks.iter().map(|t| t.id).collect();
        assert_eq!(ids, [1, 2, 3, 5]);
        // the stacks left begin at their roots, or at a task the scan did not read
        assert_eq!(
            fold(&tasks),
            [
                "start (h.py:1);[waiting]",
                "start (h.py:1);request (h.py:2);[waiting]",
                "start (h.py:1);handler (h.py:3);[waiting]",
                "handler (h.py:3);[waiting]",
            ]
        );
        // with nothing torn, nothing is left out
        assert_eq!(drop_awaited_by_torn(&mut tasks, &[]), 0);
        assert_eq!(drop_awaited_by_torn(&mut tasks, &[7]), 0);
        assert_eq!(tasks.len(), 4);
    }
}
