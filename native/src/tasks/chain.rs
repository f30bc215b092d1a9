//! One task as read: its coroutine, then each coroutine it awaits, down to the future the
//! innermost one waits on; and its state. Every object's type is checked before its fields
//! are used; a task whose reads tore is left out of the scan and counted, never given frames
//! it was not in.

use anyhow::{bail, Result};

use super::layout::{StackTop, TaskLayout, YieldFrom};
use super::objects::{Kind, Types};
use crate::memory::{read, usize_at, Batch};
use crate::walker::Layout;

/// Sanity bounds against torn or garbage reads.
const MAX_CHAIN: usize = 256;
const MAX_STACK_SLOTS: usize = 1 << 16;

/// A task's state in one scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Its coroutine executes on a thread now.
    Running,
    /// Due to run: its first step or its wakeup is queued on the loop.
    Ready,
    /// Parked on a pending future.
    Waiting,
}

impl TaskState {
    pub fn leaf(self) -> &'static str {
        match self {
            TaskState::Running => "[running]",
            TaskState::Ready => "[ready]",
            TaskState::Waiting => "[waiting]",
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
}

/// What one scan's reads of a task found so far.
struct Cursor {
    task: RawTask,
    waiter: usize,
    /// The coroutine or generator read next, 0 once the chain ended.
    next: usize,
    outermost_running: Option<bool>,
}

/// Reads the tasks at `addresses`: the live ones (pending) with their chains, and how many
/// were left out because a read tore.
pub fn read_tasks(
    pid: i32,
    layout: &Layout,
    tl: &TaskLayout,
    types: &mut Types,
    addresses: &[usize],
) -> (Vec<RawTask>, u64) {
    let mut torn = 0u64;
    let pieces: Vec<(usize, usize)> = addresses.iter().map(|&a| (a, tl.task_size)).collect();
    let batch = Batch::read(pid, &pieces);
    let mut cursors = Vec::with_capacity(addresses.len());
    for &(address, len) in &pieces {
        let Some(raw) = batch.get(address, len) else {
            torn += 1; // freed since the registry was read
            continue;
        };
        match types.of(pid, address, Some(raw)) {
            Ok(info) if info.kind == Kind::Task => {}
            _ => {
                torn += 1;
                continue;
            }
        }
        if usize_at(raw, tl.fut_state) as u32 != 0 {
            continue; // done: no longer in flight
        }
        cursors.push(Cursor {
            task: RawTask {
                address,
                name: usize_at(raw, tl.task_name),
                frames: Vec::new(),
                future: None,
                awaits: None,
                state: TaskState::Ready,
            },
            waiter: usize_at(raw, tl.task_fut_waiter),
            next: usize_at(raw, tl.task_coro),
            outermost_running: None,
        });
    }
    // one level of every chain per batch
    for _ in 0..MAX_CHAIN {
        let pieces: Vec<(usize, usize)> = cursors
            .iter()
            .filter(|c| c.next != 0)
            .map(|c| (c.next, tl.gen_size()))
            .collect();
        if pieces.is_empty() {
            break;
        }
        let batch = Batch::read(pid, &pieces);
        for cursor in cursors.iter_mut().filter(|c| c.next != 0) {
            if step(pid, layout, tl, types, &batch, cursor).is_err() {
                cursor.next = 0;
                cursor.task.frames.clear();
                cursor.task.address = 0; // torn: left out below
            }
        }
    }
    let mut out = Vec::with_capacity(cursors.len());
    for mut cursor in cursors {
        if cursor.task.address == 0 || cursor.next != 0 || cursor.task.frames.is_empty() {
            torn += 1;
            continue;
        }
        match state(pid, tl, types, &cursor) {
            Ok((state, awaits)) => {
                cursor.task.state = state;
                cursor.task.awaits = cursor.task.awaits.or(awaits);
                out.push(cursor.task);
            }
            Err(_) => torn += 1,
        }
    }
    (out, torn)
}

/// Reads the coroutine `cursor.next` (its bytes in `batch`): its frame, and what it awaits.
fn step(
    pid: i32,
    layout: &Layout,
    tl: &TaskLayout,
    types: &mut Types,
    batch: &Batch,
    cursor: &mut Cursor,
) -> Result<()> {
    let gen = cursor.next;
    cursor.next = 0;
    let Some(raw) = batch.get(gen, tl.gen_size()) else {
        bail!("a coroutine freed as it was read");
    };
    let kind = types.of(pid, gen, Some(raw))?.kind;
    if !matches!(kind, Kind::Coroutine | Kind::Generator) {
        bail!("a {kind:?} where a coroutine was expected");
    }
    if cursor.task.frames.len() >= MAX_CHAIN {
        bail!("an await chain of more than {MAX_CHAIN} coroutines");
    }
    let state = raw[tl.gen_frame_state] as i8;
    let frame = &raw[tl.gen_iframe..];
    let running = state == tl.state_executing;
    cursor.outermost_running.get_or_insert(running);
    // every version numbers its states from created up to completed and cleared
    if state >= tl.state_completed || state < tl.state_created {
        bail!("a coroutine that finished as it was read");
    }
    let code = usize_at(frame, layout.frame_code) & !layout.code_tags;
    let instr = usize_at(frame, layout.frame_instr);
    if code == 0 || !code.is_multiple_of(8) {
        bail!("a coroutine frame without code");
    }
    let offset = instr as i64 - (code + layout.code_adaptive) as i64;
    cursor.task.frames.push((code, offset));
    if running || state == tl.state_created || !in_await(pid, tl, state, instr)? {
        return Ok(());
    }
    let frame_at = gen + tl.gen_iframe;
    let slots = frame_at + tl.frame_localsplus;
    let top = match tl.stack_top {
        StackTop::Index => {
            let count = usize_at(frame, tl.frame_stack_top) as u32 as usize;
            if count < tl.awaited_slot || count > MAX_STACK_SLOTS {
                bail!("a value stack of {count} slots: a torn read");
            }
            slots + (count - tl.awaited_slot) * 8
        }
        StackTop::Pointer => {
            let pointer = usize_at(frame, tl.frame_stack_top);
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
    let mut word = [0u8; 8];
    read(pid, top, &mut word)?;
    // tagged references (3.14+) keep their tags in the low bits
    let awaited = usize_at(&word, 0) & !7;
    if awaited == 0 {
        bail!("an await without an awaitable");
    }
    match types.of(pid, awaited, None)?.kind {
        Kind::Coroutine | Kind::Generator => cursor.next = awaited,
        Kind::FutureIter => {
            read(pid, awaited + 16, &mut word)?;
            let future = usize_at(&word, 0);
            let kind = types.of(pid, future, None)?.kind;
            if !matches!(kind, Kind::Future | Kind::Task) {
                bail!("a future iterator without its future");
            }
            cursor.task.future = Some((future, kind));
        }
        kind @ (Kind::Future | Kind::Task) => cursor.task.future = Some((awaited, kind)),
        // another awaitable (a C extension's): the chain ends at the coroutine that awaits it
        _ => {}
    }
    if let Some((future, Kind::Task)) = cursor.task.future {
        cursor.task.awaits = Some(future);
    }
    Ok(())
}

/// Whether a suspended coroutine waits in `await` (rather than in a bare `yield`).
fn in_await(pid: i32, tl: &TaskLayout, state: i8, instr: usize) -> Result<bool> {
    Ok(match tl.yield_from {
        YieldFrom::State(yield_from) => state == yield_from,
        YieldFrom::Resume(opcodes) => {
            // the instruction after the last one run: RESUME with an argument of 2 or 3
            let mut next = [0u8; 2];
            read(pid, instr + 2, &mut next)?;
            opcodes.contains(&next[0]) && next[1] >= 2
        }
    })
}

/// The task's state, and the task it waits on through `fut_waiter`.
fn state(
    pid: i32,
    tl: &TaskLayout,
    types: &mut Types,
    cursor: &Cursor,
) -> Result<(TaskState, Option<usize>)> {
    if cursor.outermost_running == Some(true) {
        return Ok((TaskState::Running, None));
    }
    if cursor.waiter == 0 {
        // nothing to wait on: its step is queued (first step, a bare yield, a wakeup)
        return Ok((TaskState::Ready, None));
    }
    let kind = types.of(pid, cursor.waiter, None)?.kind;
    if !matches!(kind, Kind::Future | Kind::Task) {
        bail!("a task waiting on a {kind:?}");
    }
    let mut word = [0u8; 8];
    read(pid, cursor.waiter + tl.fut_state, &mut word)?;
    let pending = usize_at(&word, 0) as u32 == 0;
    // a done future has queued the task's wakeup: ready
    let state = if pending {
        TaskState::Waiting
    } else {
        TaskState::Ready
    };
    Ok((state, (kind == Kind::Task).then_some(cursor.waiter)))
}
