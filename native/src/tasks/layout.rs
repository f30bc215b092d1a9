//! Where a CPython version keeps what the task scan reads: the C `_asyncio` module's futures
//! and tasks, coroutine objects and the frame inside them, and the registry the scan starts
//! from. 3.11–3.13 come from a table (their headers on 64-bit Linux); 3.14+ publish the task
//! fields and the task lists' heads in the `_asyncio` module's `AsyncioDebug` section, read
//! from the target and checked against the table where both name a field.

use anyhow::{bail, Result};

use crate::process::memory::usize_at;
use crate::walker::{tuple_items, GenLayout};

/// Where the registry of live tasks is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    /// `asyncio.tasks._all_tasks` (3.11): a WeakSet.
    AllTasks,
    /// `_scheduled_tasks` (a WeakSet) and `_eager_tasks` (a set) of `asyncio.tasks` (3.12, 3.13).
    ScheduledAndEager,
    /// Per-thread and per-interpreter linked lists of the `_asyncio` module (3.14+).
    Lists,
}

/// How a suspended coroutine tells that it waits in `await` (a "yield from").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YieldFrom {
    /// The instruction after the frame's last one is one of these RESUME opcodes with an
    /// argument of 2 or more (3.11, 3.12).
    Resume([u8; 2]),
    /// The generator's frame state says so (3.13+).
    State(i8),
}

/// How a suspended frame's value stack is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackTop {
    /// An `int` count of slots from `localsplus` (3.11–3.13).
    Index,
    /// A pointer past the top slot (3.14+), whose slots are tagged references.
    Pointer,
}

/// Offsets of the objects the task scan reads, and the rules that differ by version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskLayout {
    pub minor: u64,
    pub registry: Registry,
    /// FutureObj: its `fut_state` (an int: 0 pending, 1 cancelled, 2 finished).
    pub fut_state: usize,
    /// TaskObj: the future it waits on, its coroutine, its name; how much of it is read.
    pub task_fut_waiter: usize,
    pub task_coro: usize,
    pub task_name: usize,
    pub task_size: usize,
    /// The `llist_node` that links a task into its thread's list (3.14+).
    pub task_node: Option<usize>,
    /// The heads of the task lists in a thread state and in the interpreter state (3.14+).
    pub thread_tasks_head: Option<usize>,
    pub interp_tasks_head: Option<usize>,
    /// TaskObj (3.14+): the task or set of tasks that await it, and the flag telling which.
    pub task_awaited_by: Option<(usize, usize)>,
    /// Where a future's dict is (3.11–3.13), from the object: `gather`'s future keeps its
    /// children there.
    pub fut_dict: Option<isize>,
    /// A coroutine object: the version's row here, the walker's (from the target's debug
    /// offsets on 3.14+) once attached.
    pub gen: GenLayout,
    pub yield_from: YieldFrom,
    /// In the frame: the stack's top (`stacktop` or `stackpointer`) and `localsplus`.
    pub frame_stack_top: usize,
    pub frame_localsplus: usize,
    pub stack_top: StackTop,
    /// Where the awaited object lies on a suspended frame's stack, in slots from the top:
    /// the top itself up to 3.14; 3.15 keeps one more slot above it.
    pub awaited_slot: usize,
    /// A tuple's first item: 3.14 put a cached hash before the items.
    pub tuple_items: usize,
}

impl TaskLayout {
    /// The table of a version the scan reads; None for others.
    pub fn table(minor: u64) -> Option<TaskLayout> {
        let layout = match minor {
            11 | 12 => TaskLayout {
                minor,
                registry: if minor == 11 {
                    Registry::AllTasks
                } else {
                    Registry::ScheduledAndEager
                },
                fut_state: 88,
                task_fut_waiter: 128,
                task_coro: 136,
                task_name: 144,
                task_size: 152,
                task_node: None,
                thread_tasks_head: None,
                interp_tasks_head: None,
                task_awaited_by: None,
                fut_dict: Some(104),
                gen: GenLayout::of(minor)?,
                // RESUME and its quickened (3.11) or instrumented (3.12) form
                yield_from: YieldFrom::Resume(if minor == 11 { [151, 150] } else { [151, 240] }),
                frame_stack_top: 64,
                frame_localsplus: 72,
                stack_top: StackTop::Index,
                awaited_slot: 1,
                tuple_items: tuple_items(minor),
            },
            13 => TaskLayout {
                minor,
                registry: Registry::ScheduledAndEager,
                fut_state: 96,
                task_fut_waiter: 112,
                task_coro: 120,
                task_name: 128,
                task_size: 136,
                task_node: None,
                thread_tasks_head: None,
                interp_tasks_head: None,
                task_awaited_by: None,
                // a managed dict, before the object's GC header
                fut_dict: Some(-24),
                gen: GenLayout::of(minor)?,
                yield_from: YieldFrom::State(-1),
                frame_stack_top: 64,
                frame_localsplus: 72,
                stack_top: StackTop::Index,
                awaited_slot: 1,
                tuple_items: tuple_items(minor),
            },
            14 | 15 => TaskLayout {
                minor,
                registry: Registry::Lists,
                fut_state: 104,
                task_fut_waiter: 120,
                task_coro: 128,
                task_name: 136,
                task_size: 168,
                task_node: None,
                thread_tasks_head: None,
                interp_tasks_head: None,
                task_awaited_by: None,
                fut_dict: None,
                gen: GenLayout::of(minor)?,
                yield_from: YieldFrom::State(if minor == 14 { -1 } else { 2 }),
                frame_stack_top: 64,
                frame_localsplus: 80,
                stack_top: StackTop::Pointer,
                awaited_slot: if minor == 14 { 1 } else { 2 },
                tuple_items: tuple_items(minor),
            },
            _ => return None,
        };
        Some(layout)
    }

    /// What of a coroutine object is read: its header through the frame's `localsplus`.
    pub fn gen_size(&self) -> usize {
        self.gen.iframe + self.frame_localsplus
    }

    /// Completes a 3.14+ layout with the `AsyncioDebug` section's words (`raw`, read from the
    /// target), checked against the table and against themselves.
    pub fn with_asyncio_debug(mut self, raw: &[u8]) -> Result<TaskLayout> {
        if raw.len() < ASYNCIO_DEBUG_WORDS * 8 {
            bail!("the _asyncio module's debug offsets were read short");
        }
        let word = |i: usize| usize_at(raw, i * 8);
        let (size, name, coro, node) = (word(0), word(1), word(5), word(6));
        let (awaited_by, awaited_by_is_set) = (word(2), word(4));
        let (interp_size, interp_head) = (word(7), word(8));
        let (thread_size, thread_head) = (word(9), word(12));
        let plausible = (64..=1024).contains(&size)
            && node + 16 <= size
            && awaited_by + 8 <= size
            && awaited_by_is_set < size
            && interp_head + 16 <= interp_size
            && interp_size < 1 << 22
            && thread_head + 16 <= thread_size
            && thread_size < 1 << 16;
        if !plausible {
            bail!("the _asyncio module's debug offsets name fields outside their structures");
        }
        if name != self.task_name || coro != self.task_coro {
            bail!(
                "the _asyncio module's debug offsets disagree with Python 3.{}'s task layout",
                self.minor
            );
        }
        self.task_size = size;
        self.task_node = Some(node);
        self.task_awaited_by = Some((awaited_by, awaited_by_is_set));
        self.thread_tasks_head = Some(thread_head);
        self.interp_tasks_head = Some(interp_head);
        Ok(self)
    }
}

/// Words of `_Py_AsyncioModuleDebugOffsets` (3.14, 3.15): the task object's size, name,
/// awaited_by, is_task, awaited_by_is_set, coro and node; the interpreter state's size and
/// list head; the thread state's size, running loop, running task and list head.
pub const ASYNCIO_DEBUG_WORDS: usize = 13;

#[cfg(test)]
mod tests {
    use super::*;

    /// The `.AsyncioDebug` sections of Debian's 3.14.10 `_asyncio` module and 3.15.2 binary.
    const DEBUG_314: [u64; 13] = [
        168, 136, 96, 108, 109, 128, 152, 225864, 10880, 936, 864, 872, 880,
    ];
    const DEBUG_315: [u64; 13] = [
        168, 136, 96, 108, 109, 128, 152, 226240, 10856, 1104, 1024, 1032, 1048,
    ];

    fn bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn asyncio_debug_completes_the_table() {
        let l14 = TaskLayout::table(14)
            .and_then(|l| l.with_asyncio_debug(&bytes(&DEBUG_314)).ok())
            .expect("3.14's section parses");
        assert_eq!(l14.task_node, Some(152));
        assert_eq!(
            (l14.thread_tasks_head, l14.interp_tasks_head),
            (Some(880), Some(10880))
        );
        let l15 = TaskLayout::table(15)
            .and_then(|l| l.with_asyncio_debug(&bytes(&DEBUG_315)).ok())
            .expect("3.15's section parses");
        assert_eq!(l15.thread_tasks_head, Some(1048));
        assert_eq!(l15.yield_from, YieldFrom::State(2));
    }

    #[test]
    fn bad_asyncio_debug_is_refused() {
        let table = || TaskLayout::table(14).expect("3.14 is in the table");
        let mut wild = DEBUG_314;
        wild[6] = 4096; // the node past the task
        assert!(table().with_asyncio_debug(&bytes(&wild)).is_err());
        let mut other = DEBUG_314;
        other[5] = 120; // the coroutine where the table has the waiter
        assert!(table().with_asyncio_debug(&bytes(&other)).is_err());
        assert!(table().with_asyncio_debug(&bytes(&DEBUG_314[..8])).is_err());
        assert!(TaskLayout::table(10).is_none());
    }
}
