//! Tornado's old-school coroutines: a `@gen.coroutine` generator is driven by a `Runner`, not
//! by a task, and what a task awaits of it is the coroutine's result future. That future's
//! first done callback is `lambda _: runner` (Tornado keeps its runner alive so), whose
//! closure holds the runner; the runner holds the generator (`gen`) and the future it yielded
//! (`future`), which, when another `@gen.coroutine`'s result, leads to that one's runner. The
//! generators' frames, outermost first, extend the chain of the task that awaits them.

use anyhow::{bail, Result};

use super::chain::{read_gen, RawTask};
use super::layout::TaskLayout;
use super::objects::{Kind, Types, CELL_REF, FUNC_CLOSURE, FUT_CALLBACK0, MERGE_GAP};
use super::registry::{find_attribute, first_attribute};
use super::Target;
use crate::process::memory::{read, usize_at, Batch, Reads};
use crate::walker::Layout;

/// Sanity bound: runners followed per task.
const MAX_RUNNERS: usize = 32;

/// Appends to the chain of each task that awaits a Tornado coroutine's future the frames of
/// its generator and of those it waits for in turn; a runner whose reads tore ends the chain
/// there. `heads` is left with the pieces of the futures' callbacks it read, for the next
/// scan's first read.
pub fn add_runner_chains(
    target: &Target,
    types: &mut Types,
    known: &Batch,
    tasks: &mut [RawTask],
    heads: &mut Vec<(usize, usize)>,
) {
    let (pid, layout, tl) = (target.pid, &target.layout, &target.tl);
    heads.clear();
    let awaited: Vec<usize> = tasks
        .iter()
        .filter_map(|t| match t.future {
            Some((future, Kind::Future)) if !t.runnerless => Some(future),
            _ => None,
        })
        .collect();
    if awaited.is_empty() {
        return;
    }
    // the futures' first callbacks, in one batch: most are no function at all
    let pieces: Vec<(usize, usize)> = awaited.iter().map(|&f| (f, FUT_CALLBACK0 + 8)).collect();
    let batch = Reads::read(pid, known, &pieces, MERGE_GAP);
    let callbacks: Vec<usize> = awaited
        .iter()
        .filter_map(|&f| batch.get(f, FUT_CALLBACK0 + 8))
        .map(|raw| usize_at(raw, FUT_CALLBACK0))
        .filter(|&c| c != 0)
        .collect();
    // and their types: a task's wakeup is no function
    heads.extend(callbacks.iter().map(|&c| (c, 16)));
    let heads = Reads::read(pid, known, heads, MERGE_GAP);
    for task in tasks.iter_mut() {
        let Some((future, Kind::Future)) = task.future.filter(|_| !task.runnerless) else {
            continue;
        };
        let Some(raw) = batch.get(future, FUT_CALLBACK0 + 8) else {
            task.walked_frames(); // a kept chain's frames of the last scan's runners
            continue;
        };
        let mut callback = usize_at(raw, FUT_CALLBACK0);
        let kind = heads
            .get(callback, 16)
            .and_then(|head| types.of(pid, callback, Some(head)).ok())
            .map(|info| info.kind);
        // a task's wakeup, say: read, and no function
        task.runnerless = kind.is_some_and(|kind| kind != Kind::Function);
        let frames = task.walked_frames();
        if kind != Some(Kind::Function) {
            continue;
        }
        for _ in 0..MAX_RUNNERS {
            let Ok((frame, next)) = runner_step(pid, layout, tl, types, callback) else {
                break;
            };
            frames.push(frame);
            callback = next;
        }
    }
}

/// From a future's first callback, its runner's generator frame, and the first callback of
/// the future the generator yielded (0 when there is none).
fn runner_step(
    pid: i32,
    layout: &Layout,
    tl: &TaskLayout,
    types: &mut Types,
    callback: usize,
) -> Result<((usize, i64), usize)> {
    if callback == 0 || types.of(pid, callback, None)?.kind != Kind::Function {
        bail!("no function");
    }
    let closure = word(pid, callback + FUNC_CLOSURE)?;
    if closure == 0 || types.of(pid, closure, None)?.kind != Kind::Tuple {
        bail!("no closure");
    }
    let cell = word(pid, closure + tl.tuple_items)?;
    types.expect(pid, cell, None, Kind::Cell)?;
    let runner = word(pid, cell + CELL_REF)?;
    let info = types.expect(pid, runner, None, Kind::Runner)?;
    let gen = first_attribute(
        pid,
        layout,
        types,
        (runner, info),
        ("gen", Kind::Generator),
        8,
    )?;
    let mut raw = vec![0u8; tl.gen_size()];
    read(pid, gen, &mut raw)?;
    let read = read_gen(pid, layout, tl, types, gen, &raw)?;
    let offset = read.instr as i64 - (read.code + layout.code_adaptive) as i64;
    // what it yielded: the runner's `future`, the second future it holds after its result
    let yielded = second_future(pid, layout, types, runner, info).unwrap_or(0);
    let next = if yielded == 0 {
        0
    } else {
        word(pid, yielded + FUT_CALLBACK0).unwrap_or(0)
    };
    Ok(((read.code, offset), next))
}

fn word(pid: i32, at: usize) -> Result<usize> {
    let mut raw = [0u8; 8];
    read(pid, at, &mut raw)?;
    Ok(usize_at(&raw, 0))
}

/// The runner's `future`: its attributes are set in the order `ctx_run`, `gen`,
/// `result_future`, `future`, ...; found by name once its dict is materialized.
fn second_future(
    pid: i32,
    layout: &Layout,
    types: &mut Types,
    runner: usize,
    info: super::objects::TypeInfo,
) -> Result<usize> {
    let result = first_attribute(
        pid,
        layout,
        types,
        (runner, info),
        ("result_future", Kind::Future),
        8,
    )?;
    let (future, _) = find_attribute(
        pid,
        layout,
        types,
        (runner, info),
        ("future", Kind::Future),
        8,
        result,
    )?;
    Ok(future)
}
