//! The coroutines a running task is in. A running coroutine's frame holds no trace of what it
//! awaits (its value stack is not saved while it runs), but the thread that runs it does: its
//! frames, innermost first, lead down to the task's coroutine, and the coroutine frames above
//! that one, each resumed by the one below it, are the task's await chain.

use anyhow::{bail, Result};

use super::chain::{RawTask, TaskState};
use super::objects::{Kind, Types};
use super::Target;
use crate::process::memory::{read, usize_at};
use crate::walker::Layout;

/// Sanity bounds against torn or garbage reads.
const MAX_THREADS: usize = 4096;
const MAX_FRAMES: usize = 1024;
/// `_PyInterpreterFrame.owner` of a generator's or coroutine's frame, in every version read.
const OWNED_BY_GENERATOR: u8 = 1;
/// Where 3.11 keeps a frame's owner (the walker, which does not need it there, has none).
const OWNER_311: usize = 69;

/// One frame of a thread as read: its address, code, instruction and owner.
struct Frame {
    address: usize,
    code: usize,
    instr: usize,
    owner: u8,
}

/// Appends to each running task's chain the coroutines it is in, read from the frames of the
/// thread that runs it. A running task whose coroutine no thread runs any more (it yielded
/// between the read of the task and that of the threads), or whose threads could not be read,
/// is a torn read: it is left out, and the addresses of those left out are returned.
pub fn add_running_chains(
    target: &Target,
    types: &mut Types,
    tasks: &mut Vec<RawTask>,
) -> Vec<usize> {
    let (pid, layout, tl) = (target.pid, &target.layout, &target.tl);
    let mut torn = Vec::new();
    if !tasks.iter().any(|t| t.state == TaskState::Running) {
        return torn;
    }
    let threads = thread_frames(pid, layout, target.interpreter).unwrap_or_default();
    let hidden = layout.owner_hidden.unwrap_or(u8::MAX);
    // where each running task's coroutine is: its thread, and how deep in its frames
    let mut places: Vec<(usize, usize, usize)> = Vec::new();
    tasks.retain_mut(|task| {
        if task.state != TaskState::Running {
            return true;
        }
        let outermost = task.coro() + tl.gen.iframe;
        let Some((thread, frames, at)) = threads.iter().enumerate().find_map(|(i, frames)| {
            let at = frames.iter().position(|f| f.address == outermost)?;
            Some((i, frames, at))
        }) else {
            torn.push(task.address);
            return false;
        };
        places.push((task.address, thread, at));
        // from the task's coroutine up: the coroutines each resumed, until a function
        for frame in frames[..at].iter().rev() {
            if frame.owner >= hidden {
                continue; // the C stack's entry into a coroutine resumed from C
            }
            if frame.owner != OWNED_BY_GENERATOR || frame.code == 0 {
                break;
            }
            // the frame lies in its coroutine object: checked, or the chain ends here
            let gen = frame.address.wrapping_sub(tl.gen.iframe);
            let kind = types.of(pid, gen, None).map(|info| info.kind);
            if !matches!(kind, Ok(Kind::Coroutine | Kind::Generator)) {
                break;
            }
            let offset = frame.instr as i64 - (frame.code + layout.code_adaptive) as i64;
            task.frames.push((frame.code, offset));
        }
        true
    });
    link_nested(tasks, &places);
    torn
}

/// A task running inside another's step on the same thread (started eagerly: its first step
/// runs as the task that made it calls `Task(..., eager_start=True)`, which awaits it next)
/// is marked as awaited by that one, the nearest running task below it in the thread's
/// frames; else its stack would begin as if no task awaited it. `places` holds each running
/// task's address, thread, and the depth of its coroutine's frame (innermost first).
fn link_nested(tasks: &mut [RawTask], places: &[(usize, usize, usize)]) {
    if places.len() < 2 {
        return;
    }
    for task in tasks.iter_mut().filter(|t| t.state == TaskState::Running) {
        let Some(&(_, thread, at)) = places.iter().find(|p| p.0 == task.address) else {
            continue;
        };
        let below = places
            .iter()
            .filter(|p| p.1 == thread && p.2 > at)
            .min_by_key(|p| p.2);
        if let Some(&(outer, _, _)) = below {
            task.awaited_by.get_or_insert(outer);
        }
    }
}

/// The frames of every Python thread, innermost first.
fn thread_frames(pid: i32, layout: &Layout, interpreter: usize) -> Result<Vec<Vec<Frame>>> {
    let owner_at = match layout.frame_owner {
        Some(at) => at,
        None if layout.minor == 11 => OWNER_311,
        None => bail!("no frame owner in Python 3.{}", layout.minor),
    };
    let size = [
        layout.frame_code,
        layout.frame_previous,
        layout.frame_instr,
        owner_at,
    ]
    .into_iter()
    .max()
    .unwrap_or(0)
        + 8;
    let mut word = [0u8; 8];
    read(pid, interpreter + layout.interp_threads_head, &mut word)?;
    let mut thread = usize_at(&word, 0);
    let mut out = Vec::new();
    let mut raw = vec![0u8; size];
    while thread != 0 {
        if out.len() > MAX_THREADS {
            bail!("more than {MAX_THREADS} Python threads: a torn read");
        }
        read(pid, thread + layout.tstate_frame, &mut word)?;
        let mut frame = usize_at(&word, 0);
        if let (Some(at), true) = (layout.cframe_current, frame != 0) {
            read(pid, frame + at, &mut word)?;
            frame = usize_at(&word, 0);
        }
        let mut frames = Vec::new();
        while frame != 0 && frames.len() < MAX_FRAMES {
            if read(pid, frame, &mut raw).is_err() {
                break; // the thread moved on as it was read: what was read stands
            }
            frames.push(Frame {
                address: frame,
                code: usize_at(&raw, layout.frame_code) & !layout.code_tags,
                instr: usize_at(&raw, layout.frame_instr),
                owner: raw[owner_at],
            });
            frame = usize_at(&raw, layout.frame_previous);
        }
        out.push(frames);
        read(pid, thread + layout.tstate_next, &mut word)?;
        thread = usize_at(&word, 0);
    }
    Ok(out)
}
