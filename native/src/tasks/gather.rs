//! The tasks a `gather` or a `TaskGroup` waits for, on 3.11–3.13 (3.14+ tasks say which task
//! awaits them). A task that awaits a `gather` waits on its `_GatheringFuture`, which keeps the
//! futures it gathers in its `_children` (a list, in the future's dict): each child that is a
//! task of the scan is awaited by that task. A task of a `TaskGroup` has the group's
//! `_on_task_done` as its first done callback: the group's `_parent_task` awaits it. A task
//! that another awaits has that one's wakeup (a method bound to it) as its first done
//! callback: it says which task awaits it even when that one's read tore.

use std::collections::HashMap;

use anyhow::{bail, Result};
use rustc_hash::FxBuildHasher as FxBuild;

use super::chain::{awaited_by_of, RawTask, TaskState};
use super::objects::{
    dict_get, Kind, Types, FUT_CALLBACK0, LIST_ITEMS, LIST_SIZE, MERGE_GAP, METHOD_SELF,
};
use super::registry::first_attribute;
use super::Target;
use crate::process::memory::{read, usize_at, Batch};
use crate::walker::Layout;

/// Sanity bound against torn or garbage reads.
const MAX_CHILDREN: usize = 1 << 16;

/// Marks the children of each `gather` a task of the scan awaits as awaited by that task; a
/// `gather` whose reads tore links none of them.
pub fn link_gathered(target: &Target, types: &mut Types, tasks: &mut [RawTask]) {
    let (pid, layout, tl) = (target.pid, &target.layout, &target.tl);
    let Some(dict_at) = tl.fut_dict else {
        return;
    };
    let gathering: Vec<(usize, usize)> = tasks
        .iter()
        .filter(|t| t.waits_gathering)
        .map(|t| (t.address, t.waiter()))
        .collect();
    if gathering.is_empty() {
        return;
    }
    let index: HashMap<usize, usize, FxBuild> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.address, i))
        .collect();
    for (parent, future) in gathering {
        let Ok(children) = children(pid, layout, types, future, dict_at) else {
            continue;
        };
        for child in children {
            if let Some(&i) = index.get(&child) {
                let task = &mut tasks[i];
                if task.address != parent {
                    task.awaited_by.get_or_insert(parent);
                }
            }
        }
    }
}

/// Marks each task whose first done callback is a method bound to another task (its wakeup,
/// set when that task awaits it) as awaited by that task, and each whose first done callback
/// is a `TaskGroup`'s bound method as awaited by the group's parent task; a group whose reads
/// tore links none. Among the tasks at `torn` (left out, read or not) an awaiter is known by
/// its address alone.
pub fn link_awaiters(target: &Target, types: &mut Types, tasks: &mut [RawTask], torn: &[usize]) {
    let (pid, layout, tl) = (target.pid, &target.layout, &target.tl);
    if tl.fut_dict.is_none() {
        return;
    }
    let scanned: std::collections::HashSet<usize, FxBuild> = tasks
        .iter()
        .map(|t| t.address)
        .chain(torn.iter().copied())
        .collect();
    // each callback's type and, for a bound method, its `__self__`, in one batch
    let pieces: Vec<(usize, usize)> = tasks
        .iter()
        .filter(|t| t.awaited_by.is_none() && t.callback != 0)
        .map(|t| (t.callback, METHOD_SELF + 8))
        .collect();
    if pieces.is_empty() {
        return;
    }
    let batch = Batch::read_merged(pid, &pieces, MERGE_GAP);
    let mut parents: HashMap<usize, Option<usize>, FxBuild> = HashMap::default();
    for task in tasks.iter_mut() {
        if task.awaited_by.is_some() || task.callback == 0 {
            continue;
        }
        let Some(raw) = batch.get(task.callback, METHOD_SELF + 8) else {
            continue;
        };
        let kind = types
            .of(pid, task.callback, Some(raw))
            .map(|info| info.kind);
        if !matches!(kind, Ok(Kind::Method | Kind::Builtin)) {
            continue;
        }
        let bound = usize_at(raw, METHOD_SELF);
        // another task's wakeup (C asyncio's is built in, the Python one's a method); one the
        // scan did not find is still named, so that the task is not taken for one no task
        // awaits
        let awaiter = scanned.contains(&bound)
            || matches!(types.of(pid, bound, None), Ok(info) if info.kind == Kind::Task);
        if awaiter {
            if bound != task.address {
                task.awaited_by = Some(bound);
            }
            continue;
        }
        if kind.ok() != Some(Kind::Method) {
            continue;
        }
        let group = bound;
        let parent = *parents
            .entry(group)
            .or_insert_with(|| group_parent(pid, layout, types, group).ok());
        if parent != Some(task.address) {
            task.awaited_by = task.awaited_by.or(parent);
        }
    }
}

/// Of the tasks that no task awaits, as read, those that a task began to await as the scan
/// read them: their first done callback, or (3.14+) the task said to await them, read again
/// now, is set since. A task made eagerly (`Task(coro, eager_start=True)`, as aiohttp makes a
/// request's task from 3.12 on) runs its first step inside the step of the task that makes it
/// and parks; that one, running meanwhile, awaits it a moment later. Read in between, it is
/// awaited by no task, and its stack would begin as if none awaited it (4 in 282,574
/// task-samples of requests to a busy aiohttp on 3.12). Only a scan that read a task running
/// can have met one, and only then are they read again.
pub fn awaited_since_read(target: &Target, tasks: &[RawTask]) -> Vec<usize> {
    let tl = &target.tl;
    let awaited = super::awaiters(tasks);
    let pieces: Vec<(usize, usize)> = tasks
        .iter()
        .filter(|t| t.state != TaskState::Running && t.callback == 0 && t.awaited_by.is_none())
        .filter(|t| !awaited.contains_key(&t.address))
        .map(|t| (t.address, tl.task_size))
        .collect();
    if pieces.is_empty() {
        return Vec::new();
    }
    let batch = Batch::read_merged(target.pid, &pieces, MERGE_GAP);
    // a task freed since was done: what was read of it stands
    pieces
        .iter()
        .filter(|&&(address, size)| {
            batch.get(address, size).is_some_and(|raw| {
                usize_at(raw, FUT_CALLBACK0) != 0 || awaited_by_of(tl, raw).is_some()
            })
        })
        .map(|&(address, _)| address)
        .collect()
}

/// The `_parent_task` of the `TaskGroup` at `group`: the first task among its attributes.
fn group_parent(pid: i32, layout: &Layout, types: &mut Types, group: usize) -> Result<usize> {
    let info = types.expect(pid, group, None, Kind::TaskGroup)?;
    first_attribute(
        pid,
        layout,
        types,
        (group, info),
        ("_parent_task", Kind::Task),
        8,
    )
}

/// The `_children` of the gathering future at `future`.
fn children(
    pid: i32,
    layout: &Layout,
    types: &mut Types,
    future: usize,
    dict_at: isize,
) -> Result<Vec<usize>> {
    let mut word = [0u8; 8];
    read(pid, future.wrapping_add_signed(dict_at), &mut word)?;
    let dict = usize_at(&word, 0);
    if dict == 0 {
        bail!("a gather without its dict");
    }
    let Some(list) = dict_get(pid, layout, types, dict, "_children")? else {
        bail!("a gather without its children");
    };
    let mut head = [0u8; LIST_ITEMS + 8];
    read(pid, list, &mut head)?;
    types.expect(pid, list, Some(&head), Kind::List)?;
    let size = usize_at(&head, LIST_SIZE);
    let items = usize_at(&head, LIST_ITEMS);
    if size > MAX_CHILDREN || (size > 0 && items == 0) {
        bail!("a list of {size} children: a torn read");
    }
    let mut raw = vec![0u8; size * 8];
    read(pid, items, &mut raw)?;
    Ok(raw.chunks_exact(8).map(|w| usize_at(w, 0)).collect())
}
