//! Sleeps that are over. A task parked in `asyncio.sleep` waits on a future that one of its
//! loop's timers will set; once the timer's time has passed, the task is due to run, though
//! the loop, busy with other work, has not run that timer yet: that wait is the queueing delay
//! a busy loop adds, and the scan calls such a task `ready`, not `waiting`.
//!
//! The stdlib loop keeps its timers in `_scheduled`, a heap of `TimerHandle`s ordered by
//! `_when` (seconds of `CLOCK_MONOTONIC`, as `loop.time()`): only the due ones are read, level
//! by level from the top (a timer is due only if its parent is). A due timer's future is the
//! first of its arguments (`asyncio.sleep`, `call_later(delay, callback, future, ...)`) or the
//! object its bound-method callback belongs to (`call_later(delay, future.set_result, ...)`).
//! uvloop keeps its timers in libuv, out of reach: there a task waits until the loop runs its
//! timer.

use std::collections::{HashMap, HashSet};

use anyhow::{bail, Result};

use super::chain::{RawTask, TaskState, MERGE_GAP};
use super::layout::TaskLayout;
use super::objects::{Kind, Types, FLOAT_VALUE, LIST_ITEMS, LIST_SIZE, METHOD_SELF, TUPLE_SIZE};
use super::registry::{find_attribute, Slot, SLOT_READ};
use super::Target;
use crate::memory::{read, usize_at, Batch};
use crate::walker::Layout;
use rustc_hash::FxBuildHasher as FxBuild;

/// `Py_TPFLAGS_MANAGED_DICT` (3.11+): instances keep their attributes where
/// `first_attribute` finds them. uvloop's loop has none.
const MANAGED_DICT: u64 = 1 << 4;
/// `BaseEventLoop.__init__` sets `_scheduled` fifth; its first list.
const LOOP_ATTRIBUTES: usize = 8;
/// Sanity bounds against torn or garbage reads.
const MAX_LOOPS: usize = 16;
const MAX_TIMERS: usize = 1 << 20;
const MAX_DUE: usize = 1 << 16;

/// Where a `TimerHandle` keeps its time, its callback and their arguments: slots, found by
/// name among its type's members and its bases'.
#[derive(Debug, Clone, Copy)]
struct HandleFields {
    when: usize,
    callback: usize,
    args: usize,
}

impl HandleFields {
    fn size(&self) -> usize {
        self.when.max(self.callback).max(self.args) + 8
    }
}

/// The handle types met so far, by address (None: not a timer handle the scan can read), and
/// each loop's timer heap as last found.
#[derive(Default)]
pub struct Timers {
    fields: HashMap<usize, Option<HandleFields>, FxBuild>,
    heaps: HashMap<usize, Heap, FxBuild>,
}

/// A loop's `_scheduled` list as last found, and the slot of the loop's values it was in
/// (None: found by name in the loop's dict, and so every scan).
#[derive(Debug, Clone, Copy)]
struct Heap {
    list: usize,
    slot: Option<Slot>,
}

/// What of a list is read: its size and its items' pointer.
const LIST_HEAD: usize = LIST_ITEMS + 8;

impl Timers {
    /// Calls ready each waiting task whose future a due timer of its loop will set. A loop
    /// whose timers tore or cannot be read leaves its tasks as they were read.
    pub fn mark_due(&mut self, target: &Target, types: &mut Types, tasks: &mut [RawTask]) {
        let (pid, layout, tl) = (target.pid, &target.layout, &target.tl);
        // a task parks only on futures of its own loop: the waiting tasks' loops
        let mut loops: Vec<usize> = tasks
            .iter()
            .filter(|t| t.state == TaskState::Waiting && t.waiter() != 0 && t.event_loop != 0)
            .map(|t| t.event_loop)
            .collect();
        if loops.is_empty() {
            return;
        }
        loops.sort_unstable();
        loops.dedup();
        // the heaps of loops gone are forgotten
        self.heaps.retain(|lp, _| loops.binary_search(lp).is_ok());
        let now = monotonic();
        let mut due: HashSet<usize, FxBuild> = HashSet::default();
        for &lp in loops.iter().take(MAX_LOOPS) {
            if let Ok(futures) = self.due(pid, layout, tl, types, lp, now) {
                due.extend(futures);
            }
        }
        if due.is_empty() {
            return;
        }
        for task in tasks.iter_mut() {
            if task.state == TaskState::Waiting && due.contains(&task.waiter()) {
                task.state = TaskState::Ready;
            }
        }
    }

    /// The futures the due timers of the loop at `lp` will set.
    fn due(
        &mut self,
        pid: i32,
        layout: &Layout,
        tl: &TaskLayout,
        types: &mut Types,
        lp: usize,
        now: f64,
    ) -> Result<Vec<usize>> {
        let Some(head) = self.heap(pid, layout, types, lp)? else {
            return Ok(Vec::new());
        };
        let (count, items) = (usize_at(&head, LIST_SIZE), usize_at(&head, LIST_ITEMS));
        if count == 0 {
            return Ok(Vec::new());
        }
        if count > MAX_TIMERS || items == 0 {
            bail!("a heap of {count} timers: a torn read");
        }
        // the heap's due part, level by level: each level's handles, then their times
        let mut level = vec![0usize];
        let mut due: Vec<(usize, usize)> = Vec::new();
        while !level.is_empty() && due.len() < MAX_DUE {
            let slots: Vec<(usize, usize)> = level.iter().map(|&i| (items + i * 8, 8)).collect();
            let batch = Batch::read_merged(pid, &slots, MERGE_GAP);
            let handles: Vec<(usize, usize)> = level
                .iter()
                .zip(&slots)
                .filter_map(|(&i, &(at, len))| Some((i, usize_at(batch.get(at, len)?, 0))))
                .filter(|&(_, h)| h != 0)
                .collect();
            let Some(&(_, first)) = handles.first() else {
                break;
            };
            let Some(fields) = self.fields(pid, types, first)? else {
                return Ok(Vec::new());
            };
            let size = fields.size();
            let pieces: Vec<(usize, usize)> = handles.iter().map(|&(_, h)| (h, size)).collect();
            let batch = Batch::read_merged(pid, &pieces, MERGE_GAP);
            let mut read_ok: Vec<(usize, usize, usize, usize)> = Vec::new();
            for &(i, h) in &handles {
                let Some(raw) = batch.get(h, size) else {
                    continue;
                };
                if types.of(pid, h, Some(raw))?.kind != Kind::TimerHandle {
                    bail!("a timer heap holding another object: a torn read");
                }
                let when = usize_at(raw, fields.when);
                read_ok.push((
                    i,
                    when,
                    usize_at(raw, fields.callback),
                    usize_at(raw, fields.args),
                ));
            }
            let pieces: Vec<(usize, usize)> =
                read_ok.iter().map(|t| (t.1, FLOAT_VALUE + 8)).collect();
            let floats = Batch::read_merged(pid, &pieces, MERGE_GAP);
            let mut next = Vec::new();
            for &(i, when, callback, args) in &read_ok {
                let Some(raw) = floats.get(when, FLOAT_VALUE + 8) else {
                    continue;
                };
                if types.of(pid, when, Some(raw))?.kind != Kind::Float {
                    bail!("a timer without its time: a torn read");
                }
                let at = f64::from_le_bytes(raw[FLOAT_VALUE..FLOAT_VALUE + 8].try_into()?);
                if at.is_nan() || at > now {
                    continue;
                }
                due.push((callback, args));
                next.extend([2 * i + 1, 2 * i + 2].into_iter().filter(|&c| c < count));
            }
            level = next;
        }
        futures_of(pid, tl.tuple_items, types, &due)
    }

    /// The head of the loop at `lp`'s `_scheduled` list (None: a loop without one the scan
    /// can read, uvloop's). Read through the slot of the loop's values it was last found in,
    /// with the list's head in the same call, while the loop keeps it there; asyncio replaces
    /// the list when many timers are cancelled, and then it is found again.
    fn heap(
        &mut self,
        pid: i32,
        layout: &Layout,
        types: &mut Types,
        lp: usize,
    ) -> Result<Option<[u8; LIST_HEAD]>> {
        let mut buf = [0u8; SLOT_READ + LIST_HEAD];
        if let Some(&Heap {
            list,
            slot: Some(slot),
        }) = self.heaps.get(&lp)
        {
            if let Ok(Some(now)) = slot.read_with(pid, (list, LIST_HEAD), &mut buf) {
                if now == list {
                    return Ok(Some(buf[SLOT_READ..].try_into()?));
                }
            }
        }
        let info = types.of(pid, lp, None)?;
        if info.flags & MANAGED_DICT == 0 {
            return Ok(None);
        }
        let wanted = ("_scheduled", Kind::List);
        let (list, slot) =
            find_attribute(pid, layout, types, (lp, info), wanted, LOOP_ATTRIBUTES, 0)?;
        let mut head = [0u8; LIST_HEAD];
        read(pid, list, &mut head)?;
        self.heaps.insert(lp, Heap { list, slot });
        Ok(Some(head))
    }

    /// The fields of the handle at `handle`, by its type (read once per type).
    fn fields(
        &mut self,
        pid: i32,
        types: &mut Types,
        handle: usize,
    ) -> Result<Option<HandleFields>> {
        let mut word = [0u8; 8];
        read(pid, handle + 8, &mut word)?;
        let ty = usize_at(&word, 0);
        if let Some(&known) = self.fields.get(&ty) {
            return Ok(known);
        }
        let fields = if types.info(pid, ty)?.kind == Kind::TimerHandle {
            handle_fields(pid, ty)?
        } else {
            None
        };
        self.fields.insert(ty, fields);
        Ok(fields)
    }
}

/// `_when`, `_callback` and `_args` among the members of the type at `ty` and of its bases.
fn handle_fields(pid: i32, ty: usize) -> Result<Option<HandleFields>> {
    let [when, callback, args] = Types::member_offsets(pid, ty, ["_when", "_callback", "_args"])?;
    Ok(match (when, callback, args) {
        (Some(when), Some(callback), Some(args))
            if [when, callback, args]
                .iter()
                .all(|&o| (16..4096).contains(&o) && o % 8 == 0) =>
        {
            Some(HandleFields {
                when,
                callback,
                args,
            })
        }
        _ => None,
    })
}

/// The futures the due timers `(callback, args)` set: each one's first argument, and the
/// object its callback is a bound method of.
fn futures_of(
    pid: i32,
    tuple_items: usize,
    types: &mut Types,
    due: &[(usize, usize)],
) -> Result<Vec<usize>> {
    let mut pieces: Vec<(usize, usize)> = Vec::with_capacity(due.len() * 2);
    for &(callback, args) in due {
        if args != 0 {
            pieces.push((args, tuple_items + 8));
        }
        if callback != 0 {
            pieces.push((callback, METHOD_SELF + 8));
        }
    }
    let batch = Batch::read_merged(pid, &pieces, MERGE_GAP);
    let mut futures = Vec::new();
    for (at, len) in pieces {
        let Some(raw) = batch.get(at, len) else {
            continue;
        };
        match types.of(pid, at, Some(raw))?.kind {
            Kind::Tuple if usize_at(raw, TUPLE_SIZE) >= 1 => {
                futures.push(usize_at(raw, tuple_items))
            }
            Kind::Method => futures.push(usize_at(raw, METHOD_SELF)),
            _ => {}
        }
    }
    Ok(futures)
}

/// Now on `CLOCK_MONOTONIC`, in seconds: the clock of `loop.time()`, the same for every
/// process of the machine.
fn monotonic() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
