//! One task as read: its coroutine, then each coroutine it awaits, down to the future the
//! innermost one waits on; and its state. Every object's type is checked before its fields
//! are used; a task whose reads tore is left out of the scan and counted, never given frames
//! it was not in.
//!
//! A scan's first read takes the tasks and, of the chains the last scan kept, their coroutines
//! and waiters, in one merged batch (`FirstRead`). A parked task whose chain is unchanged since
//! the last scan (the same coroutine and awaited future, each coroutine of its chain where it
//! was, as that read found them) is not walked again. Each coroutine is checked, not only the
//! innermost: a finished coroutine's memory goes to the next one made, so a handler's next
//! stage and its `asyncio.sleep` are often at the addresses of the last stage's, the sleep at
//! the same instruction, and only the stage's code tells them apart. The others are walked
//! together, one level of their chains at a time, each step of a level one batch of reads for
//! all of them that takes from the first read what it holds; but what a coroutine awaits (its
//! stack slot, then the object there) is read now, each with the coroutine again, which must
//! be unmoved and still await the same object: else the task ran on as it was read, and tore.
//! An awaited coroutine's frame is taken from the read that found it awaited, and a chain
//! that ends at a generator in a bare yield is read once more (`recheck`).

use std::collections::HashMap;

use anyhow::{bail, Result};
use rustc_hash::FxBuildHasher as FxBuild;

use super::clock::monotonic;
use super::layout::{StackTop, TaskLayout, YieldFrom};
use super::objects::{Kind, Types, FUT_CALLBACK0, FUT_LOOP, MERGE_GAP};
use super::Target;
use crate::process::memory::{read_pieces, usize_at, Batch, Reads};
use crate::rules::{READY_LEAF, RUNNING_LEAF, WAITING_LEAF};
use crate::walker::Layout;

/// Sanity bounds against torn or garbage reads.
const MAX_CHAIN: usize = 256;
const MAX_STACK_SLOTS: usize = 1 << 16;
/// What of an awaited object is read: its type, and a future iterator's future.
const AWAITED_HEAD: usize = 24;
/// A task's state in one scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Its coroutine executes on a thread now.
    Running,
    /// Due to run: its first step or its wakeup is queued on the loop, or the timer that ends
    /// its sleep is due (`timers`).
    Ready,
    /// Parked on a pending future.
    Waiting,
}

impl TaskState {
    pub fn leaf(self) -> &'static str {
        match self {
            TaskState::Running => RUNNING_LEAF,
            TaskState::Ready => READY_LEAF,
            TaskState::Waiting => WAITING_LEAF,
        }
    }
}

/// A task as read: (code object, instruction offset) of each coroutine of its await chain,
/// outermost first; what it awaits at the end of the chain; its state.
#[derive(Debug, Clone)]
pub struct RawTask {
    pub address: usize,
    pub name: usize,
    pub frames: Vec<(usize, i64)>,
    /// The future the innermost coroutine awaits, and whether it is a task.
    pub future: Option<(usize, Kind)>,
    /// The task it waits on (`fut_waiter` or the awaited future, when that is a task).
    pub awaits: Option<usize>,
    pub state: TaskState,
    /// The task that awaits it, as the task says (3.14+: set by `await`, `gather` and
    /// `TaskGroup`), or as found from a `gather` it is a child of.
    pub awaited_by: Option<usize>,
    /// Whether it waits on the future of a `gather`.
    pub waits_gathering: bool,
    /// Its first done callback (a `TaskGroup`'s, in a task of the group).
    pub callback: usize,
    /// Whether the future it awaits was found to have no Tornado runner (its first done
    /// callback read, and no function). Tornado adds a runner's callback first, as it makes
    /// the future, so a chain kept unchanged (the same future) is not looked at again
    /// (`tornado`).
    pub runnerless: bool,
    /// Its event loop (a task parks only on futures of its own loop).
    pub event_loop: usize,
    /// Whether its chain ended at a native coroutine that awaits nothing, as read: not yet
    /// started, or not in an `await`. Only a task whose step runs has one (a parked task's
    /// innermost native coroutine is suspended in the `await` that parked it), so a task
    /// read so while it waits on a future was read across its step: torn.
    unawaited: bool,
    /// Whether `future` was found in a coroutine's await slot itself (`settled_elsewhere`).
    future_in_slot: bool,
    /// Each coroutine of its chain as read: where it is, its frame state and instruction.
    gens: Vec<Gen>,
    /// Its coroutine and the future it waits on, as read from the task.
    coro: usize,
    waiter: usize,
}

/// A task not read yet (`Ready`, as a task whose chain is not walked yet), and what a kept
/// chain's place holds once a scan took it.
impl Default for RawTask {
    fn default() -> RawTask {
        RawTask {
            address: 0,
            name: 0,
            frames: Vec::new(),
            future: None,
            awaits: None,
            state: TaskState::Ready,
            awaited_by: None,
            waits_gathering: false,
            callback: 0,
            runnerless: false,
            event_loop: 0,
            unawaited: false,
            future_in_slot: false,
            gens: Vec::new(),
            coro: 0,
            waiter: 0,
        }
    }
}

impl RawTask {
    /// Whether its chain ended at a future found in a coroutine's await slot itself (not
    /// through the future's iterator, which `await` puts there) other than the one the task
    /// waits on. Only a torn read gives one: the slot read after the iterator there was freed
    /// and a future made in its place, 0-2 times in 100,000 task-samples of 300 tasks stepping
    /// every few milliseconds (`handler;stage;[waiting]`). A chain ending at a future's
    /// iterator often names a later future than the task, read earlier: that task stepped on
    /// between the two reads, and its chain, read whole, stands.
    fn settled_elsewhere(&self) -> bool {
        matches!(self.future, Some((future, _)) if self.future_in_slot && future != self.waiter)
    }

    /// Its coroutine.
    pub fn coro(&self) -> usize {
        self.coro
    }

    /// Its outermost coroutine as read, and the code it runs.
    pub fn root(&self) -> Option<(usize, usize)> {
        self.gens.first().map(|gen| (gen.address, gen.code))
    }

    /// The future it waits on (0: none).
    pub fn waiter(&self) -> usize {
        self.waiter
    }

    /// Its chain back to the coroutines it was walked through, without what a scan added
    /// after them (a Tornado generator's frames).
    pub fn walked_frames(&mut self) -> &mut Vec<(usize, i64)> {
        self.frames.truncate(self.gens.len());
        &mut self.frames
    }
}

/// One coroutine of a chain as read: what tells that it has not moved since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gen {
    address: usize,
    state: i8,
    /// A native coroutine (`async def`), which suspends only in an `await`.
    native: bool,
    pub code: usize,
    pub instr: usize,
    /// The top of its frame's value stack as read (a count of slots, or a pointer): where the
    /// slot of what it awaits is. A coroutine being resumed has the value sent to it pushed
    /// while it still reads suspended at the same instruction; a stack top read then is one
    /// slot higher, over a stale slot that held what it last yielded up (its task's future):
    /// so a coroutine whose stack top moved has moved.
    top: usize,
}

/// The chains of the last scan's parked tasks, where the next scan takes them from (the
/// scan's tasks are kept as it left them, and each chain that stands is moved out once);
/// off, every chain is walked.
pub struct ChainCache {
    enabled: bool,
    /// The last scan's tasks, as that scan left them (kept whole, not moved task by task):
    /// those of `kept` are taken out of it.
    tasks: Vec<RawTask>,
    /// The chains kept: what each one is checked against, and their coroutines, apart from
    /// the tasks, so that a scan plans its reads and checks the chains without touching them.
    kept: Vec<Kept>,
    gens: Vec<Gen>,
    /// Where each task's chain is in `kept`, by task address.
    at: HashMap<usize, u32, FxBuild>,
}

/// What tells that a kept chain stands: the task's coroutine and the future it waits on, and
/// each coroutine of its chain as read (their places in `ChainCache::gens`); and where the
/// task is in `ChainCache::tasks`.
#[derive(Clone)]
struct Kept {
    task: u32,
    coro: usize,
    waiter: usize,
    gens: std::ops::Range<usize>,
}

impl ChainCache {
    pub fn new(enabled: bool) -> ChainCache {
        ChainCache {
            enabled,
            tasks: Vec::new(),
            kept: Vec::new(),
            gens: Vec::new(),
            at: HashMap::default(),
        }
    }

    /// The place of the task at `address`'s last chain, and what it is checked against.
    fn find(&self, address: usize) -> Option<(u32, &Kept)> {
        let &i = self.at.get(&address)?;
        Some((i, self.kept.get(i as usize)?))
    }

    /// The coroutines of a kept chain as read.
    fn gens(&self, kept: &Kept) -> &[Gen] {
        self.gens.get(kept.gens.clone()).unwrap_or_default()
    }
}

/// No chain of the last scan (`ChainCache::find`).
const NO_LAST: u32 = u32::MAX;

/// A scan's first read: the tasks and, of the chains the last scan kept, their coroutines
/// and waiters (most of a scan's objects, read as they are at one instant, their
/// pages pinned once), with the `heads` the last scan's later steps read; those steps take
/// from it what it holds. Its buffer is refilled, never zeroed again.
#[derive(Default)]
pub struct FirstRead {
    pub batch: Batch,
    /// When it was read (`clock::monotonic`, as it began).
    pub at: f64,
    /// The types of the futures' callbacks (`tornado`).
    pub heads: Vec<(usize, usize)>,
    /// The tasks it read, and where each one's last chain is in the cache (`NO_LAST`: none).
    tasks: Vec<usize>,
    lasts: Vec<u32>,
}

impl FirstRead {
    /// Reads the tasks at `addresses` with what of them the last scan's chains say to read:
    /// the addresses the registry gave (3.11–3.13), or the last scan's tasks, read before the
    /// lists of 3.14+ that link them are followed (the links are in the tasks).
    pub fn fill(&mut self, target: &Target, cache: &ChainCache, addresses: &[usize]) {
        let tl = &target.tl;
        let (gen_size, waiter_size) = (tl.gen_size(), tl.fut_state + 8);
        // each task, its waiter, and the coroutines of the chains kept (at most)
        let room = addresses.len() * 2 + cache.gens.len() + self.heads.len();
        let mut pieces: Vec<(usize, usize)> = Vec::with_capacity(room);
        self.lasts.clear();
        for &address in addresses {
            pieces.push((address, tl.task_size));
            let mut at = NO_LAST;
            if let Some((i, kept)) = cache.find(address) {
                pieces.extend(cache.gens(kept).iter().map(|g| (g.address, gen_size)));
                pieces.push((kept.waiter, waiter_size));
                at = i;
            }
            self.lasts.push(at);
        }
        self.tasks.clear();
        self.tasks.extend_from_slice(addresses);
        pieces.extend_from_slice(&self.heads);
        self.at = monotonic();
        self.batch.fill_merged(target.pid, &pieces, MERGE_GAP);
    }
}

/// What one scan's reads of a task found so far.
struct Cursor {
    task: RawTask,
    /// The coroutine or generator read next, 0 once the chain ended.
    next: usize,
    outermost_running: Option<bool>,
    /// Read next in this level: the instruction after the frame's last (3.11, 3.12) and the
    /// stack slot of what the coroutine awaits.
    probe: Option<(usize, usize)>,
    /// What the innermost coroutine read so far awaits (and the stack slot it was read
    /// from), and a future iterator's future.
    awaited: usize,
    slot: usize,
    iter_future: usize,
    /// Its chain ended at a generator in a bare yield, awaited by the coroutine before it:
    /// read again before the chain is taken (`recheck`).
    recheck: bool,
    /// Its chain ended at the coroutine before this object (another awaitable's iterator),
    /// and the object's type as read: read again too (`recheck`).
    ends_before: Option<(usize, usize)>,
    torn: bool,
}

impl Cursor {
    fn tear(&mut self) {
        self.torn = true;
        self.next = 0;
        self.probe = None;
        self.awaited = 0;
        self.iter_future = 0;
    }
}

/// Reads the tasks at `addresses`: the live ones (pending) with their chains, how many were
/// left out because a read tore (their addresses), and when the last of the futures they wait
/// on were read (`clock::monotonic`; most come with the tasks, a little before). What `first`
/// holds is taken from it; tasks it did not read (new since the last scan, in the lists of
/// 3.14+) are read now.
pub fn read_tasks(
    target: &Target,
    types: &mut Types,
    cache: &mut ChainCache,
    addresses: &[usize],
    first: &FirstRead,
) -> (Vec<RawTask>, Vec<usize>, f64) {
    let (pid, layout, tl) = (target.pid, &target.layout, &target.tl);
    let mut torn = Vec::new();
    let (gen_size, waiter_size) = (tl.gen_size(), tl.fut_state + 8);
    let batch = &first.batch;
    // where each task's chain as the last scan kept it is (taken out of the cache if it
    // stands, kept again at the scan's end), and the tasks the first read lacks
    let found: Vec<u32>;
    let (lasts, tasks) = if first.tasks == addresses {
        (&first.lasts[..], Reads::read(pid, batch, &[], MERGE_GAP))
    } else {
        found = addresses
            .iter()
            .map(|&a| cache.find(a).map_or(NO_LAST, |(i, _)| i))
            .collect();
        let pieces: Vec<(usize, usize)> = addresses.iter().map(|&a| (a, tl.task_size)).collect();
        (&found[..], Reads::read(pid, batch, &pieces, MERGE_GAP))
    };
    let mut cursors = Vec::new();
    let mut out = Vec::with_capacity(addresses.len());
    for (&address, &at) in addresses.iter().zip(lasts) {
        let Some(raw) = tasks.get(address, tl.task_size) else {
            torn.push(address); // freed since the registry was read
            continue;
        };
        match types.of(pid, address, Some(raw)) {
            Ok(info) if info.kind == Kind::Task => {}
            _ => {
                torn.push(address);
                continue;
            }
        }
        if usize_at(raw, tl.fut_state) as u32 != 0 {
            continue; // done: no longer in flight
        }
        let (coro, waiter) = (
            usize_at(raw, tl.task_coro),
            usize_at(raw, tl.task_fut_waiter),
        );
        let name = usize_at(raw, tl.task_name);
        let callback = usize_at(raw, FUT_CALLBACK0);
        let awaited_by = awaited_by_of(tl, raw);
        // the same coroutine and waiter: its chain stands if each coroutine of it is where it
        // was, as read with the tasks; else it is walked
        let kept = cache.kept.get(at as usize);
        if let Some(kept) = kept.filter(|k| k.coro == coro && k.waiter == waiter) {
            let unmoved = cache.gens(kept).iter().all(|g| {
                batch
                    .get(g.address, gen_size)
                    .and_then(|raw| read_gen(pid, layout, tl, types, g.address, raw).ok())
                    == Some(*g)
            });
            let last = match cache.tasks.get_mut(kept.task as usize) {
                Some(last) if unmoved && last.address == address => Some(std::mem::take(last)),
                _ => None,
            };
            if let Some(mut last) = last {
                last.name = name;
                last.awaited_by = awaited_by;
                last.callback = callback;
                last.event_loop = usize_at(raw, FUT_LOOP);
                out.push(last);
                continue;
            }
        }
        let task = RawTask {
            address,
            name,
            awaited_by,
            callback,
            event_loop: usize_at(raw, FUT_LOOP),
            coro,
            waiter,
            ..RawTask::default()
        };
        cursors.push(Cursor {
            task,
            next: coro,
            outermost_running: None,
            probe: None,
            awaited: 0,
            slot: 0,
            iter_future: 0,
            recheck: false,
            ends_before: None,
            torn: false,
        });
    }
    walk(pid, layout, tl, types, batch, &mut cursors);
    for cursor in cursors {
        if cursor.torn || cursor.next != 0 || cursor.task.frames.is_empty() {
            torn.push(cursor.task.address);
            continue;
        }
        let mut task = cursor.task;
        if cursor.outermost_running == Some(true) {
            task.state = TaskState::Running;
        }
        out.push(task);
    }
    // states: each waiter's type and state, read with the tasks unless new
    let pieces: Vec<(usize, usize)> = out
        .iter()
        .filter(|t| t.state != TaskState::Running && t.waiter != 0)
        .map(|t| (t.waiter, waiter_size))
        .collect();
    let read_at = monotonic();
    let waiters = Reads::read(pid, batch, &pieces, MERGE_GAP);
    out.retain_mut(|task| match state(pid, tl, types, &waiters, task) {
        Ok((TaskState::Waiting, _, _)) if task.unawaited => {
            torn.push(task.address);
            false
        }
        _ if task.settled_elsewhere() => {
            torn.push(task.address);
            false
        }
        Ok((state, awaits, gathering)) => {
            task.state = state;
            task.waits_gathering = gathering;
            task.awaits = task.awaits.or(awaits);
            true
        }
        Err(_) => {
            torn.push(task.address);
            false
        }
    });
    (out, torn, read_at)
}

/// The task that awaits the task whose head is `raw`, as the task says (3.14+; none when a set
/// of tasks awaits it).
pub fn awaited_by_of(tl: &TaskLayout, raw: &[u8]) -> Option<usize> {
    tl.task_awaited_by
        .filter(|&(_, is_set)| raw.get(is_set) == Some(&0))
        .map(|(at, _)| usize_at(raw, at))
        .filter(|&a| a != 0)
}

impl ChainCache {
    /// Keeps the chains of a scan's tasks (its `read_tasks`) for the next scan, but those of
    /// running tasks, which move, and of tasks that wait on no future; chains of tasks no
    /// longer read are forgotten.
    pub fn keep(&mut self, tasks: Vec<RawTask>) {
        self.tasks = tasks;
        self.kept.clear();
        self.gens.clear();
        self.at.clear();
        if !self.enabled {
            self.tasks.clear();
            return;
        }
        for (i, task) in self.tasks.iter().enumerate() {
            // a chain stands on the future it waits on and its coroutines
            if task.state != TaskState::Running && task.waiter != 0 && !task.gens.is_empty() {
                self.at.insert(task.address, self.kept.len() as u32);
                let start = self.gens.len();
                self.gens.extend_from_slice(&task.gens);
                self.kept.push(Kept {
                    task: i as u32,
                    coro: task.coro,
                    waiter: task.waiter,
                    gens: start..self.gens.len(),
                });
            }
        }
    }
}

/// One coroutine's header as read: its type checked, its frame state within bounds.
pub fn read_gen(
    pid: i32,
    layout: &Layout,
    tl: &TaskLayout,
    types: &mut Types,
    gen: usize,
    raw: &[u8],
) -> Result<Gen> {
    let kind = types.of(pid, gen, Some(raw))?.kind;
    if !matches!(kind, Kind::Coroutine | Kind::Generator) {
        bail!("a {kind:?} where a coroutine was expected");
    }
    let state = raw[tl.gen.frame_state] as i8;
    // every version numbers its states from created up to completed and cleared
    if state >= tl.gen.completed || state < tl.gen.created {
        bail!("a coroutine that finished as it was read");
    }
    let frame = &raw[tl.gen.iframe..];
    let code = usize_at(frame, layout.frame_code) & !layout.code_tags;
    let instr = usize_at(frame, layout.frame_instr);
    if code == 0 || !code.is_multiple_of(8) {
        bail!("a coroutine frame without code");
    }
    let top = match tl.stack_top {
        StackTop::Index => usize_at(frame, tl.frame_stack_top) as u32 as usize,
        StackTop::Pointer => usize_at(frame, tl.frame_stack_top),
    };
    Ok(Gen {
        address: gen,
        state,
        native: kind == Kind::Coroutine,
        code,
        instr,
        top,
    })
}

/// Walks the cursors' chains, one level of all of them at a time.
fn walk(
    pid: i32,
    layout: &Layout,
    tl: &TaskLayout,
    types: &mut Types,
    known: &Batch,
    cursors: &mut [Cursor],
) {
    // Each level's coroutines are read with the coroutines that await them (the first level's,
    // the tasks' own, with the tasks): what is read of an awaited object at the moment its
    // awaiter was found to await it is what the chain goes on with. Read at another moment
    // (the scan's first read, or later), the object at that address may be another one: the
    // coroutine awaited finished, and its awaiter's next line made an object of its size there.
    let mut read_with_awaiters: Option<Batch> = None;
    for _ in 0..MAX_CHAIN {
        let pieces: Vec<(usize, usize)> = cursors
            .iter()
            .filter(|c| c.next != 0)
            .map(|c| (c.next, tl.gen_size()))
            .collect();
        if pieces.is_empty() {
            break;
        }
        let batch = Reads::read(
            pid,
            read_with_awaiters.as_ref().unwrap_or(known),
            &pieces,
            MERGE_GAP,
        );
        for cursor in cursors.iter_mut().filter(|c| c.next != 0) {
            if step(pid, layout, tl, types, &batch, cursor).is_err() {
                cursor.tear();
            }
        }
        // where each awaits, and the slot of what it awaits, with the coroutine again, both
        // read now (not taken from the first read): the slot is read after the coroutine,
        // and a coroutine that moved on since holds something else there (what its next
        // line works on)
        let mut pieces = Vec::new();
        for cursor in cursors.iter().filter(|c| c.probe.is_some()) {
            let (Some((next, top)), Some(gen)) = (cursor.probe, cursor.task.gens.last()) else {
                continue;
            };
            if let YieldFrom::Resume(_) = tl.yield_from {
                pieces.push((next, 2));
            }
            pieces.push((top, 8));
            pieces.push((gen.address, tl.gen_size()));
        }
        let batch = Batch::read_merged(pid, &pieces, MERGE_GAP);
        for cursor in cursors.iter_mut() {
            let Some((next, top)) = cursor.probe.take() else {
                continue;
            };
            if !unmoved(pid, layout, tl, types, &batch, cursor.task.gens.last()) {
                cursor.tear(); // resumed as it was read
                continue;
            }
            match awaited(tl, &batch, next, top) {
                Ok(Some(awaited)) => (cursor.awaited, cursor.slot) = (awaited, top),
                // a bare yield
                Ok(None) => {
                    if let Some(&gen) = cursor.task.gens.last() {
                        ends_at(cursor, gen);
                    }
                }
                Err(_) => cursor.tear(),
            }
        }
        // what each awaits: a coroutine, a future, or a future iterator; read now with the
        // coroutine that awaits it, which must not have moved since (the object at that
        // address may be another one by now: what it awaited, freed, makes room for the next
        // object of its size)
        let mut pieces: Vec<(usize, usize)> = Vec::new();
        let head = tl.gen_size().max(AWAITED_HEAD);
        for cursor in cursors.iter().filter(|c| c.awaited != 0) {
            pieces.push((cursor.awaited, head));
            pieces.push((cursor.slot, 8));
            if let Some(gen) = cursor.task.gens.last() {
                pieces.push((gen.address, tl.gen_size()));
            }
        }
        let batch = read_with_awaiters.insert(Batch::read_merged(pid, &pieces, MERGE_GAP));
        for cursor in cursors.iter_mut().filter(|c| c.awaited != 0) {
            let at = std::mem::take(&mut cursor.awaited);
            // the same coroutine, still awaiting the same object: not one of a later await at
            // the same place
            let same = batch.get(cursor.slot, 8).map(|w| usize_at(w, 0) & !7) == Some(at);
            if !same || !unmoved(pid, layout, tl, types, batch, cursor.task.gens.last()) {
                cursor.tear();
                continue;
            }
            let Some(raw) = batch.get(at, AWAITED_HEAD) else {
                cursor.tear();
                continue;
            };
            match types
                .of(pid, at, Some(raw))
                .map(|info| (info.kind, info.iterator))
            {
                Ok((Kind::Coroutine | Kind::Generator, _)) => cursor.next = at,
                Ok((Kind::FutureIter, _)) => cursor.iter_future = usize_at(raw, 16),
                Ok((kind @ (Kind::Future | Kind::Task), _)) => {
                    cursor.task.future_in_slot = true;
                    cursor.settle(at, kind);
                }
                // what another awaitable's `__await__` returned (a C extension's, a class's),
                // an iterator as `await` makes sure: the chain ends at the coroutine that
                // awaits it. Anything else was read as the object there was freed.
                Ok((_, true)) => cursor.ends_before = Some((at, usize_at(raw, 8))),
                Ok((_, false)) | Err(_) => cursor.tear(),
            }
        }
        // a future iterator's future
        let pieces: Vec<(usize, usize)> = cursors
            .iter()
            .filter(|c| c.iter_future != 0)
            .map(|c| (c.iter_future, 16))
            .collect();
        let batch = Reads::read(pid, known, &pieces, MERGE_GAP);
        for cursor in cursors.iter_mut().filter(|c| c.iter_future != 0) {
            let at = std::mem::take(&mut cursor.iter_future);
            let kind = batch
                .get(at, 16)
                .and_then(|raw| types.of(pid, at, Some(raw)).ok())
                .map(|info| info.kind);
            match kind {
                Some(kind @ (Kind::Future | Kind::Task)) => cursor.settle(at, kind),
                _ => cursor.tear(), // a future iterator without its future
            }
        }
    }
    recheck(pid, layout, tl, types, cursors);
}

/// Reads each chain that ended at a generator in a bare yield once more: the generator, in
/// one call between two reads of the coroutine that awaits it and of that one's slot of it
/// (`bracketed`); and each that ended before another awaitable's iterator: that object's
/// type, the same way.
/// A coroutine may await a generator so parked (what an `__await__` returned, or one made a
/// coroutine, as asyncio's `sleep(0)` is), and then all of them read as before. But the
/// generator may have been read as its awaiter stepped on (the object it awaited freed, and
/// a generator expression of its next line made there, in a bare yield as `sum` iterates it,
/// then the next await's object there again): a later read finds another object at its
/// address, or the awaiter running, and the task tore.
fn recheck(pid: i32, layout: &Layout, tl: &TaskLayout, types: &mut Types, cursors: &mut [Cursor]) {
    let size = tl.gen_size();
    for cursor in cursors.iter_mut().filter(|c| !c.torn) {
        let gens = &cursor.task.gens;
        let mut stands = true;
        // a chain that ended before another awaitable's iterator: the object's type again
        if let (Some((at, ty)), Some(awaiter)) = (cursor.ends_before, gens.last()) {
            stands = bracketed(pid, layout, tl, types, awaiter, cursor.slot, at, 16)
                .is_some_and(|head| usize_at(&head, 8) == ty);
        }
        // a chain that ended at a generator in a bare yield: the generator again
        if let (true, Some(gen), Some(awaiter)) = (
            cursor.recheck && stands,
            gens.last(),
            gens.len().checked_sub(2).map(|i| &gens[i]),
        ) {
            stands = bracketed(
                pid,
                layout,
                tl,
                types,
                awaiter,
                cursor.slot,
                gen.address,
                size,
            )
            .is_some_and(|now| unmoved_in(pid, layout, tl, types, &now, Some(gen)));
        }
        if !stands {
            cursor.tear();
        }
    }
}

/// `len` bytes of `object`, read in one call between two reads of the coroutine `awaiter`
/// and of its stack slot `slot`: only if the awaiter stood unmoved in both and its slot held
/// the object in both (else what was read there may be another object since).
#[allow(clippy::too_many_arguments)]
fn bracketed(
    pid: i32,
    layout: &Layout,
    tl: &TaskLayout,
    types: &mut Types,
    awaiter: &Gen,
    slot: usize,
    object: usize,
    len: usize,
) -> Option<Vec<u8>> {
    let size = tl.gen_size();
    let pieces = [
        (awaiter.address, size),
        (slot, 8),
        (object, len),
        (awaiter.address, size),
        (slot, 8),
    ];
    let mut raw = vec![0u8; 2 * size + 16 + len];
    read_pieces(pid, &pieces, &mut raw).ok()?;
    let (before, rest) = raw.split_at(size);
    let (held, rest) = rest.split_at(8);
    let (read, rest) = rest.split_at(len);
    let (after, again) = rest.split_at(size);
    let holds = |w: &[u8]| usize_at(w, 0) & !7 == object;
    let stood = holds(held)
        && holds(again)
        && unmoved_in(pid, layout, tl, types, before, Some(awaiter))
        && unmoved_in(pid, layout, tl, types, after, Some(awaiter));
    stood.then(|| read.to_vec())
}

/// Whether the coroutine `gen` as read before is where and as it was, read again in `batch`.
fn unmoved(
    pid: i32,
    layout: &Layout,
    tl: &TaskLayout,
    types: &mut Types,
    batch: &Batch,
    gen: Option<&Gen>,
) -> bool {
    gen.is_some_and(|g| {
        batch
            .get(g.address, tl.gen_size())
            .is_some_and(|raw| unmoved_in(pid, layout, tl, types, raw, gen))
    })
}

/// Whether the coroutine `gen` as read before is where and as it was in `raw`, its bytes read
/// again.
fn unmoved_in(
    pid: i32,
    layout: &Layout,
    tl: &TaskLayout,
    types: &mut Types,
    raw: &[u8],
    gen: Option<&Gen>,
) -> bool {
    gen.is_some_and(|gen| read_gen(pid, layout, tl, types, gen.address, raw).ok() == Some(*gen))
}

impl Cursor {
    /// The chain ends at the future `at` (a task, when `kind` says so).
    fn settle(&mut self, at: usize, kind: Kind) {
        self.task.future = Some((at, kind));
        if kind == Kind::Task {
            self.task.awaits = Some(at);
        }
    }
}

/// Reads the coroutine `cursor.next` (its bytes in `batch`): its frame, and where to read
/// what it awaits.
fn step(
    pid: i32,
    layout: &Layout,
    tl: &TaskLayout,
    types: &mut Types,
    batch: &Reads,
    cursor: &mut Cursor,
) -> Result<()> {
    let gen = cursor.next;
    cursor.next = 0;
    let Some(raw) = batch.get(gen, tl.gen_size()) else {
        bail!("a coroutine freed as it was read");
    };
    if cursor.task.frames.len() >= MAX_CHAIN {
        bail!("an await chain of more than {MAX_CHAIN} coroutines");
    }
    let read = read_gen(pid, layout, tl, types, gen, raw)?;
    let running = read.state == tl.gen.executing;
    // a coroutine runs only inside the coroutines that await it: one running under one that
    // was suspended when it was read means the task was resumed as its chain was read
    if running && !*cursor.outermost_running.get_or_insert(running) {
        bail!("a coroutine resumed as its chain was read");
    }
    let offset = read.instr as i64 - (read.code + layout.code_adaptive) as i64;
    cursor.task.frames.push((read.code, offset));
    cursor.task.gens.push(read);
    if running {
        return Ok(());
    }
    // not started, or in a bare yield: the end of the chain
    let yielding = match tl.yield_from {
        YieldFrom::State(yield_from) => read.state != yield_from,
        YieldFrom::Resume(_) => false, // told by the instruction after (`awaited`)
    };
    if read.state == tl.gen.created || yielding {
        ends_at(cursor, read);
        return Ok(());
    }
    let slots = gen + tl.gen.iframe + tl.frame_localsplus;
    let top = match tl.stack_top {
        StackTop::Index => {
            let count = read.top;
            if count < tl.awaited_slot || count > MAX_STACK_SLOTS {
                bail!("a value stack of {count} slots: a torn read");
            }
            slots + (count - tl.awaited_slot) * 8
        }
        StackTop::Pointer => {
            let pointer = read.top;
            let depth = tl.awaited_slot * 8;
            if pointer < slots + depth
                || pointer > slots + MAX_STACK_SLOTS * 8
                || !pointer.is_multiple_of(8)
            {
                bail!("a value stack pointer outside its frame: a torn read");
            }
            pointer - depth
        }
    };
    cursor.probe = Some((read.instr + 2, top));
    Ok(())
}

/// The chain ends at `gen`, not started or in a bare yield: a native coroutine there awaits
/// nothing, so its task cannot be waiting (`unawaited`); a generator there is read again
/// (`recheck`).
fn ends_at(cursor: &mut Cursor, gen: Gen) {
    cursor.task.unawaited = gen.native;
    cursor.recheck = !gen.native;
}

/// What a suspended coroutine awaits: the object in its stack slot `top`, when it waits in
/// `await` (rather than in a bare `yield`: told by the instruction after its last, `next`, on
/// 3.11 and 3.12, a RESUME with an argument of 2 or 3).
fn awaited(tl: &TaskLayout, batch: &Batch, next: usize, top: usize) -> Result<Option<usize>> {
    if let YieldFrom::Resume(opcodes) = tl.yield_from {
        let Some(op) = batch.get(next, 2) else {
            bail!("a frame's code freed as it was read");
        };
        if !(opcodes.contains(&op[0]) && op[1] >= 2) {
            return Ok(None);
        }
    }
    let Some(word) = batch.get(top, 8) else {
        bail!("a frame's stack freed as it was read");
    };
    // tagged references (3.14+) keep their tags in the low bits
    let awaited = usize_at(word, 0) & !7;
    if awaited == 0 {
        bail!("an await without an awaitable");
    }
    Ok(Some(awaited))
}

/// The task's state, and the task it waits on through `fut_waiter` (its head in `batch`).
fn state(
    pid: i32,
    tl: &TaskLayout,
    types: &mut Types,
    batch: &Reads,
    task: &RawTask,
) -> Result<(TaskState, Option<usize>, bool)> {
    if task.state == TaskState::Running {
        return Ok((TaskState::Running, None, false));
    }
    if task.waiter == 0 {
        // nothing to wait on: its step is queued (first step, a bare yield, a wakeup)
        return Ok((TaskState::Ready, None, false));
    }
    let Some(raw) = batch.get(task.waiter, tl.fut_state + 8) else {
        bail!("a waiter freed as it was read");
    };
    let info = types.of(pid, task.waiter, Some(raw))?;
    let kind = info.kind;
    if !matches!(kind, Kind::Future | Kind::Task) {
        bail!("a task waiting on a {kind:?}");
    }
    let pending = usize_at(raw, tl.fut_state) as u32 == 0;
    // a done future has queued the task's wakeup: ready
    let state = if pending {
        TaskState::Waiting
    } else {
        TaskState::Ready
    };
    Ok((
        state,
        (kind == Kind::Task).then_some(task.waiter),
        info.gathering,
    ))
}
