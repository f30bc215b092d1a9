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
//! A busy loop also holds due timers in `_ready`, the deque of callbacks it runs next: each
//! pass moves every due timer there from the heap, behind the callbacks queued before, and
//! runs them in turn. The tasks whose futures those will set are ready too (on a loop held by
//! 300 stepping tasks, about half of their time: as much as the rest of their ready time).
//! uvloop keeps its timers in libuv, out of reach: there a task waits until the loop runs its
//! timer.
//!
//! A timer is due at the instant its future was read: most futures are read with the tasks,
//! in the scan's first read, and a timer due since then leaves its task waiting. The timers
//! are read after the tasks, and also just before that first read, from the loops of the
//! last scan. A pass runs the timers it moved in one burst at its end (a hundred in a fifth
//! of a millisecond), so a timer can run between the read of its future and the read after,
//! and be in neither the heap nor the queue: the read before has it. Its future pending when
//! read, it had not run then. (Read before, a timer whose task then ran on and parked on a
//! future made anew at the same address would be taken for the new one's: the read before
//! is kept to the first read's futures, a fraction of a millisecond later, and a timer read
//! after, the future's own, comes first.) On 300 tasks holding their loop the ready share
//! read 0.03-0.10 short of the tasks' own clock with the timers read after only, and with a
//! timer due since the first read taken for due; within 0.035 so.

use std::collections::HashMap;

use anyhow::{bail, Result};

use super::chain::{RawTask, TaskState};
use super::clock::monotonic;
use super::layout::TaskLayout;
use super::objects::{
    Kind, Types, BLOCK_DATA, BLOCK_ITEMS, BLOCK_NEXT, DEQUE_HEAD, DEQUE_LEFT_BLOCK,
    DEQUE_LEFT_INDEX, DEQUE_RIGHT_BLOCK, DEQUE_RIGHT_INDEX, DEQUE_SIZE, FLOAT_VALUE, LIST_ITEMS,
    LIST_SIZE, MANAGED_DICT, MERGE_GAP, METHOD_SELF, TUPLE_SIZE,
};
use super::registry::{find_attribute, Slot, SLOT_READ};
use super::Target;
use crate::process::memory::{read, usize_at, Batch};
use crate::walker::Layout;
use rustc_hash::FxBuildHasher as FxBuild;

/// `BaseEventLoop.__init__` sets `_scheduled` fifth; its first list.
const LOOP_ATTRIBUTES: usize = 8;
/// Sanity bounds against torn or garbage reads.
const MAX_LOOPS: usize = 16;
const MAX_TIMERS: usize = 1 << 20;
const MAX_DUE: usize = 1 << 16;

/// A timer's callback, its arguments (a tuple) and its time.
type Timer = (usize, usize, f64);
/// How far ahead of the read before the tasks its timers are taken, at least and at most:
/// twice the time the last scan took from that read to the first read's end.
const MIN_LEAD: f64 = 0.0005;
const MAX_LEAD: f64 = 0.05;

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
/// each loop's timer heap and queue of callbacks as last found, by loop and name; the loops of
/// the last scan's waiting tasks, and the futures their timers set with each one's time, as
/// read before this scan's tasks.
#[derive(Default)]
pub struct Timers {
    fields: HashMap<usize, Option<HandleFields>, FxBuild>,
    found: HashMap<(usize, &'static str), Found, FxBuild>,
    loops: Vec<usize>,
    before: HashMap<usize, f64, FxBuild>,
    before_at: Option<f64>,
    lead: f64,
}

/// A loop's attribute as last found (its `_scheduled` list, its `_ready` deque), and the slot
/// of the loop's values it was in (None: found by name in the loop's dict, and so every scan).
#[derive(Debug, Clone, Copy)]
struct Found {
    object: usize,
    slot: Option<Slot>,
}

/// What of a list is read: its size and its items' pointer.
const LIST_HEAD: usize = LIST_ITEMS + 8;

impl Timers {
    /// Reads the timers of the last scan's loops, due up to a little ahead, before the scan
    /// reads its tasks.
    pub fn read_before(&mut self, target: &Target, types: &mut Types) {
        let (pid, layout, tl) = (target.pid, &target.layout, &target.tl);
        self.before.clear();
        let at = monotonic();
        let horizon = at + self.lead.max(MIN_LEAD);
        let loops = std::mem::take(&mut self.loops);
        for &lp in &loops {
            if let Ok(timers) = self.due(pid, layout, tl, types, lp, horizon) {
                self.before.extend(timers);
            }
        }
        self.loops = loops;
        self.before_at = Some(at);
    }

    /// Calls ready each waiting task whose future a timer of its loop due when the future
    /// was read will set: a timer read now, or before for a future of the first read (see
    /// the module's comment). A loop whose timers tore or cannot be read leaves its tasks as
    /// they were read. `now` is when the futures the first read lacked were read
    /// (`monotonic`), `first` that read and when it began.
    pub fn mark_due(
        &mut self,
        target: &Target,
        types: &mut Types,
        tasks: &mut [RawTask],
        now: f64,
        first: (&Batch, f64),
    ) {
        let (pid, layout, tl) = (target.pid, &target.layout, &target.tl);
        let (batch, early) = first;
        if let Some(at) = self.before_at.take() {
            self.lead = (2.0 * (early - at)).clamp(MIN_LEAD, MAX_LEAD);
        }
        let before = std::mem::take(&mut self.before);
        self.loops.clear();
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
        // what was found of loops gone is forgotten
        self.found
            .retain(|(lp, _), _| loops.binary_search(lp).is_ok());
        loops.truncate(MAX_LOOPS);
        let mut due: HashMap<usize, f64, FxBuild> = HashMap::default();
        for &lp in &loops {
            if let Ok(timers) = self.due(pid, layout, tl, types, lp, now) {
                due.extend(timers);
            }
        }
        self.loops = loops;
        for task in tasks.iter_mut() {
            let future = task.waiter();
            // due when its future was read: in the first read, or after
            let (at, read) = match batch.get(future, tl.fut_state + 8) {
                Some(_) => (due.get(&future).or_else(|| before.get(&future)), early),
                None => (due.get(&future), now),
            };
            if task.state == TaskState::Waiting && at.is_some_and(|&at| at <= read) {
                task.state = TaskState::Ready;
            }
        }
    }

    /// The futures the due timers of the loop at `lp` will set, with their times: due at
    /// `now`.
    fn due(
        &mut self,
        pid: i32,
        layout: &Layout,
        tl: &TaskLayout,
        types: &mut Types,
        lp: usize,
        now: f64,
    ) -> Result<Vec<(usize, f64)>> {
        let heap = ("_scheduled", Kind::List);
        let Some(head) = self.attribute(pid, layout, types, lp, heap, LIST_HEAD)? else {
            return Ok(Vec::new());
        };
        let mut due: Vec<Timer> = Vec::new();
        let (count, items) = (usize_at(&head, LIST_SIZE), usize_at(&head, LIST_ITEMS));
        if count > MAX_TIMERS || (count > 0 && items == 0) {
            bail!("a heap of {count} timers: a torn read");
        }
        // the heap's due part, level by level: each level's handles, then their times
        let mut level = if count > 0 { vec![0usize] } else { Vec::new() };
        while !level.is_empty() && due.len() < MAX_DUE {
            let slots: Vec<(usize, usize)> = level.iter().map(|&i| (items + i * 8, 8)).collect();
            let batch = Batch::read_merged(pid, &slots, MERGE_GAP);
            let (indices, handles): (Vec<usize>, Vec<usize>) = level
                .iter()
                .zip(&slots)
                .filter_map(|(&i, &(at, len))| Some((i, usize_at(batch.get(at, len)?, 0))))
                .filter(|&(_, h)| h != 0)
                .unzip();
            let Some(timers) = self.due_of(pid, types, &handles, now)? else {
                bail!("a timer heap holding another object: a torn read");
            };
            let mut next = Vec::new();
            for (i, timer) in indices.into_iter().zip(timers) {
                if let Some(timer) = timer {
                    due.push(timer);
                    next.extend([2 * i + 1, 2 * i + 2].into_iter().filter(|&c| c < count));
                }
            }
            level = next;
        }
        // then the due timers the loop moved to its queue, not yet run: read after the heap,
        // a timer moved between the two reads is met in the queue (a queue that tore as it
        // was read adds none)
        due.extend(self.queued(pid, layout, types, lp, now).unwrap_or_default());
        futures_of(pid, tl.tuple_items, types, &due)
    }

    /// For each of the timer handles at `handles`, its `(callback, args, time)` if it is due at
    /// `now` (None: not due, or freed as it was read). None at all when one is not a timer
    /// handle, or a timer without its time: a torn read.
    fn due_of(
        &mut self,
        pid: i32,
        types: &mut Types,
        handles: &[usize],
        now: f64,
    ) -> Result<Option<Vec<Option<Timer>>>> {
        let Some(&first) = handles.first() else {
            return Ok(Some(Vec::new()));
        };
        // the fields of the first one's type, the same in all
        let Some(fields) = self.fields(pid, types, first)? else {
            return Ok(None);
        };
        let size = fields.size();
        let pieces: Vec<(usize, usize)> = handles.iter().map(|&h| (h, size)).collect();
        let batch = Batch::read_merged(pid, &pieces, MERGE_GAP);
        let mut read: Vec<Option<(usize, usize, usize)>> = Vec::with_capacity(handles.len());
        for &(h, len) in &pieces {
            let Some(raw) = batch.get(h, len) else {
                read.push(None);
                continue;
            };
            if types.of(pid, h, Some(raw))?.kind != Kind::TimerHandle {
                return Ok(None);
            }
            let (when, callback, args) = (fields.when, fields.callback, fields.args);
            read.push(Some((
                usize_at(raw, when),
                usize_at(raw, callback),
                usize_at(raw, args),
            )));
        }
        let pieces: Vec<(usize, usize)> = read
            .iter()
            .flatten()
            .map(|t| (t.0, FLOAT_VALUE + 8))
            .collect();
        let floats = Batch::read_merged(pid, &pieces, MERGE_GAP);
        let mut out = Vec::with_capacity(read.len());
        for timer in read {
            let Some((when, callback, args)) = timer else {
                out.push(None);
                continue;
            };
            let Some(raw) = floats.get(when, FLOAT_VALUE + 8) else {
                out.push(None);
                continue;
            };
            if types.of(pid, when, Some(raw))?.kind != Kind::Float {
                return Ok(None);
            }
            let at = f64::from_le_bytes(raw[FLOAT_VALUE..FLOAT_VALUE + 8].try_into()?);
            out.push((!at.is_nan() && at <= now).then_some((callback, args, at)));
        }
        Ok(Some(out))
    }

    /// The `(callback, args, time)` of the timers in the `_ready` deque of the loop at `lp`, due at
    /// `now`: moved there from the heap (due at the loop's pass, maybe after `now`), not yet
    /// run.
    fn queued(
        &mut self,
        pid: i32,
        layout: &Layout,
        types: &mut Types,
        lp: usize,
        now: f64,
    ) -> Result<Vec<Timer>> {
        let queue = ("_ready", Kind::Deque);
        let Some(head) = self.attribute(pid, layout, types, lp, queue, DEQUE_HEAD)? else {
            return Ok(Vec::new());
        };
        let handles = deque_items(pid, &head, MAX_DUE)?;
        // its timers (the rest are other callbacks)
        let pieces: Vec<(usize, usize)> = handles.iter().map(|&h| (h, 16)).collect();
        let heads = Batch::read_merged(pid, &pieces, MERGE_GAP);
        let timers: Vec<usize> = handles
            .into_iter()
            .filter(|&h| {
                heads.get(h, 16).is_some_and(|raw| {
                    matches!(types.of(pid, h, Some(raw)), Ok(i) if i.kind == Kind::TimerHandle)
                })
            })
            .collect();
        let Some(due) = self.due_of(pid, types, &timers, now)? else {
            bail!("a queue of callbacks that changed as it was read");
        };
        Ok(due.into_iter().flatten().collect())
    }

    /// The first `len` bytes of the loop at `lp`'s attribute `wanted` (None: a loop without
    /// one the scan can read, uvloop's). Read through the slot of the loop's values it was
    /// last found in, with the object in the same call, while the loop keeps it there; asyncio
    /// replaces its `_scheduled` list when many timers are cancelled, and then it is found
    /// again.
    fn attribute(
        &mut self,
        pid: i32,
        layout: &Layout,
        types: &mut Types,
        lp: usize,
        wanted: (&'static str, Kind),
        len: usize,
    ) -> Result<Option<Vec<u8>>> {
        let key = (lp, wanted.0);
        let mut buf = vec![0u8; SLOT_READ + len];
        if let Some(&Found {
            object,
            slot: Some(slot),
        }) = self.found.get(&key)
        {
            if let Ok(Some(now)) = slot.read_with(pid, (object, len), &mut buf) {
                if now == object {
                    return Ok(Some(buf.split_off(SLOT_READ)));
                }
            }
        }
        let info = types.of(pid, lp, None)?;
        if info.flags & MANAGED_DICT == 0 {
            return Ok(None);
        }
        let (object, slot) =
            find_attribute(pid, layout, types, (lp, info), wanted, LOOP_ATTRIBUTES, 0)?;
        let mut head = vec![0u8; len];
        read(pid, object, &mut head)?;
        self.found.insert(key, Found { object, slot });
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

/// The items of the deque whose head (`DEQUE_HEAD` bytes) is `head`, read block by block from
/// the first of the first to the last of the last; a deque of more than `most`, or whose blocks
/// do not hold as many as its length says (it changed as it was read), is refused.
fn deque_items(pid: i32, head: &[u8], most: usize) -> Result<Vec<usize>> {
    let count = usize_at(head, DEQUE_SIZE);
    let (mut block, last) = (
        usize_at(head, DEQUE_LEFT_BLOCK),
        usize_at(head, DEQUE_RIGHT_BLOCK),
    );
    let (mut index, end) = (
        usize_at(head, DEQUE_LEFT_INDEX),
        usize_at(head, DEQUE_RIGHT_INDEX),
    );
    if count == 0 {
        return Ok(Vec::new());
    }
    if count > most || index >= BLOCK_ITEMS || end >= BLOCK_ITEMS {
        bail!("a deque of {count} items: a torn read");
    }
    let mut items = Vec::with_capacity(count);
    let mut raw = [0u8; BLOCK_NEXT + 8];
    while items.len() < count {
        read(pid, block, &mut raw)?;
        let stop = if block == last { end + 1 } else { BLOCK_ITEMS };
        items.extend((index..stop).map(|i| usize_at(&raw, BLOCK_DATA + i * 8)));
        if block == last {
            break;
        }
        (block, index) = (usize_at(&raw, BLOCK_NEXT), 0);
    }
    if items.len() != count || items.contains(&0) {
        bail!("a deque that changed as it was read");
    }
    Ok(items)
}

/// The futures the due timers `(callback, args, time)` set, each with its timer's time: each
/// one's first argument, and the object its callback is a bound method of.
fn futures_of(
    pid: i32,
    tuple_items: usize,
    types: &mut Types,
    due: &[Timer],
) -> Result<Vec<(usize, f64)>> {
    let mut pieces: Vec<(usize, usize, f64)> = Vec::with_capacity(due.len() * 2);
    for &(callback, args, when) in due {
        if args != 0 {
            pieces.push((args, tuple_items + 8, when));
        }
        if callback != 0 {
            pieces.push((callback, METHOD_SELF + 8, when));
        }
    }
    let spans: Vec<(usize, usize)> = pieces.iter().map(|&(at, len, _)| (at, len)).collect();
    let batch = Batch::read_merged(pid, &spans, MERGE_GAP);
    let mut futures = Vec::new();
    for (at, len, when) in pieces {
        let Some(raw) = batch.get(at, len) else {
            continue;
        };
        match types.of(pid, at, Some(raw))?.kind {
            Kind::Tuple if usize_at(raw, TUPLE_SIZE) >= 1 => {
                futures.push((usize_at(raw, tuple_items), when))
            }
            Kind::Method => futures.push((usize_at(raw, METHOD_SELF), when)),
            _ => {}
        }
    }
    Ok(futures)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of this process's memory laid out as CPython's: items `first..` from `from`.
    fn block(from: usize, first: usize, next: usize) -> Box<[u8; BLOCK_NEXT + 8]> {
        let mut raw = Box::new([0u8; BLOCK_NEXT + 8]);
        for i in from..BLOCK_ITEMS {
            let at = BLOCK_DATA + i * 8;
            raw[at..at + 8].copy_from_slice(&(first + i - from).to_le_bytes());
        }
        raw[BLOCK_NEXT..].copy_from_slice(&next.to_le_bytes());
        raw
    }

    fn head(count: usize, left: usize, right: usize, indices: (usize, usize)) -> Vec<u8> {
        let mut head = vec![0u8; DEQUE_HEAD];
        for (at, word) in [
            (DEQUE_SIZE, count),
            (DEQUE_LEFT_BLOCK, left),
            (DEQUE_RIGHT_BLOCK, right),
            (DEQUE_LEFT_INDEX, indices.0),
            (DEQUE_RIGHT_INDEX, indices.1),
        ] {
            head[at..at + 8].copy_from_slice(&word.to_le_bytes());
        }
        head
    }

    #[test]
    fn a_deque_is_read_block_by_block_and_one_read_as_it_changed_is_refused() {
        let pid = std::process::id() as i32;
        // items 100.. from index 60 of the first block, on to index 5 of the second: 10 items
        let second = block(0, 104, 0);
        let first = block(60, 100, second.as_ptr() as usize);
        let (left, right) = (first.as_ptr() as usize, second.as_ptr() as usize);
        let items = deque_items(pid, &head(10, left, right, (60, 5)), 100).expect("reads");
        assert_eq!(items, (100..110).collect::<Vec<_>>());
        // one block, and an empty deque
        let items = deque_items(pid, &head(3, left, left, (60, 62)), 100).expect("reads");
        assert_eq!(items, vec![100, 101, 102]);
        assert!(deque_items(pid, &head(0, 0, 0, (0, 0)), 100)
            .expect("empty")
            .is_empty());
        // a length the blocks do not hold, indices past a block, more than the bound
        assert!(deque_items(pid, &head(12, left, right, (60, 5)), 100).is_err());
        assert!(deque_items(pid, &head(10, left, right, (64, 5)), 100).is_err());
        assert!(deque_items(pid, &head(10, left, right, (60, 5)), 9).is_err());
    }
}
