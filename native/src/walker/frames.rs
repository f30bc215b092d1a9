//! The frame walk of one thread: its current frame, then each previous one, innermost first.
//!
//! Frames of plain calls lie at the top of the thread's data stack: that part and the
//! current frame's address come from the batch when they lie where recent samples found
//! them, else from one read. Only frames elsewhere (coroutines and generators keep theirs
//! inside the object) come from the batch's frames read ahead, or cost a read each. A thread
//! that reads the same bytes as its last whole walk has its frames (`unchanged`).
//!
//! The target runs on while it is read, so these reads are not of one instant, and a walk can
//! end before the thread's first frame: a stack without its root. A coroutine's frame links to
//! its caller only while it runs (resumed, CPython sets its `previous`; when it yields, clears
//! it), so one read a little before it was resumed ends the walk there; so does one whose
//! memory went to another coroutine since, and, in 3.11 and 3.12, a current frame read from a
//! `_PyCFrame` whose C call has just returned (it still names the frame that call ran, left
//! as it was). A thread's first frame lies at the second slot of its first chunk of data
//! stack (a later chunk's first frame at its first slot, linked to the chunk before), found
//! through the chunks' links when the stack spans several; a walk that ends anywhere else is
//! checked with one more read, and stands only when what it read is still so (a thread whose
//! first frame is a generator's); else it is a torn read, and the sample is read again.

use anyhow::{bail, Result};

use super::ahead::AheadStack;
use super::unchanged::Read;
use super::{RawFrame, Walker};
use crate::process::memory::{read, read_pieces, usize_at, Batch};

/// Sanity bound against torn or garbage reads.
const MAX_DEPTH: usize = 4096;
/// The most chunks of data stack followed to a thread's first one (each holds 16 KiB or more:
/// a megabyte of frames, some ten thousand of them).
const MAX_CHUNKS: usize = 64;
/// The most of a frame a layout may read (`Layout::frame_size`).
pub const MAX_FRAME_READ: usize = 256;
/// How much of the top of a thread's data stack (where the frames of plain calls live) is
/// read in one piece with the current frame's address.
const DATASTACK_READ: usize = 16 << 10;

/// A frame as the walk read it: what the check of a walk that does not end at the thread's
/// first frame compares with.
#[derive(Clone, Copy)]
pub struct WalkedFrame {
    frame: usize,
    previous: usize,
    code: usize,
    owner: Option<u8>,
    /// Read with the data stack, not on its own (a coroutine's frame, a frame of an older
    /// chunk, one the current frame's address led to elsewhere).
    on_stack: bool,
}

/// Owners of frames that lie in an object, not on a data stack: a generator's or coroutine's
/// (in the chain while it runs), and a frame object's (its call has returned). The same values
/// in 3.11–3.15.
const OWNED_BY_GENERATOR: u8 = 1;
const OWNED_BY_FRAME_OBJECT: u8 = 2;

/// How a walk began and ended: whether its first frame lay outside the data stack as read,
/// where its last frame of the program was (with code or without), whether that one lies in
/// an object, and whether it had code.
struct Ends {
    first_outside: bool,
    last: Option<usize>,
    last_in_object: bool,
    last_with_code: bool,
    /// The chain's final frame (the one whose link is 0) is not one of the program's: from
    /// 3.12 every thread's chain ends at an entry frame on the C stack.
    final_hidden: bool,
}

impl Walker {
    /// (code object, instruction offset) of each Python frame of the thread whose state is
    /// `tstate`, innermost first, onto `out`. Frames met outside the data stacks go to
    /// `outside` for the next sample's batch.
    pub(super) fn frames(
        &mut self,
        thread: usize,
        ahead: Option<AheadStack>,
        tstate: &[u8],
        batch: &Batch,
        out: &mut Vec<RawFrame>,
        outside: &mut Vec<usize>,
    ) -> Result<()> {
        let layout = &self.layout;
        let field = usize_at(tstate, layout.tstate_frame);
        if field == 0 {
            return Ok(());
        }
        // 3.11 and 3.12 keep the current frame in a `_PyCFrame`, read with the stack; 3.13+
        // in the thread state itself.
        let current_at = layout.cframe_current.map_or(0, |at| field + at);
        let chunk = usize_at(tstate, layout.tstate_datastack_chunk);
        let top = usize_at(tstate, layout.tstate_datastack_top);
        let base = chunk + layout.chunk_data;
        let stack_start = if chunk != 0 && top > base && top - base <= 64 << 20 {
            base.max(top - DATASTACK_READ.min(top - base))
        } else {
            top
        };
        let stack_len = top.saturating_sub(stack_start);
        if stack_len > 0 {
            let next = AheadStack::next(ahead, current_at, stack_start, top, self.samples);
            self.ahead_stacks.insert(thread, next);
        }
        // the current frame and the data stack: where the batch holds them, else read now
        let read_ahead = ahead
            .filter(|a| a.current == current_at && a.start <= stack_start && top <= a.end)
            .and_then(|a| {
                let current = if current_at != 0 {
                    usize_at(batch.get(current_at, 8)?, 0)
                } else {
                    field
                };
                let stack = batch.get(a.start, a.end - a.start)?;
                Some((current, &stack[stack_start - a.start..top - a.start]))
            });
        let (current, stack) = match read_ahead {
            Some(read) => read,
            None if current_at != 0 => {
                self.stack.resize(8 + stack_len, 0);
                let pieces = [(current_at, 8), (stack_start, stack_len)];
                read_pieces(
                    self.pid,
                    &pieces[..if stack_len > 0 { 2 } else { 1 }],
                    &mut self.stack,
                )?;
                (usize_at(&self.stack, 0), &self.stack[8..])
            }
            None => {
                self.stack.resize(stack_len, 0);
                if stack_len > 0 {
                    read(self.pid, stack_start, &mut self.stack)?;
                }
                (field, &self.stack[..])
            }
        };
        // the same bytes as the thread's last whole walk read: the same frames
        let read = Read {
            current,
            base,
            stack_start,
            stack,
        };
        // a dump walks every frame, to know where each lies
        if self.dumped.is_none() && self.unchanged.replay(thread, &read, batch, out, outside) {
            return Ok(());
        }
        let mut walked = std::mem::take(&mut self.walked);
        walked.clear();
        let start = out.len();
        let ends = self.walk(out, current, stack, stack_start, batch, &mut walked)?;
        if let Some(addresses) = self.dumped.as_mut() {
            // the frames `walk` gave, in its order
            let shown = |f: &&WalkedFrame| f.code != 0 && !layout.hides(f.owner);
            addresses.extend(walked.iter().filter(shown).map(|f| f.frame));
        }
        let outside_start = outside.len();
        outside.extend(walked.iter().filter(|f| !f.on_stack).map(|f| f.frame));
        // A thread's first frame is the first one pushed on its first chunk of data stack, at
        // its second slot (3.11–3.15: CPython skips the first slot of the chunk without a
        // previous one only; a later chunk's first frame is at its first slot, and the
        // second frame of any chunk lies a whole frame further on), so a walk that ends there
        // is whole. For a stack that spans several chunks that frame lies in an older one,
        // found once through the chunks' links. A walk that ends anywhere else is checked.
        let root = ahead.map_or(0, |a| a.root);
        let first_frame = |last: usize| last == base + 8;
        let whole = |last: usize| first_frame(last) || (last == root && !ends.last_in_object);
        let in_chunk = |last: usize| last >= base && last < top;
        // From 3.12 a chain that does not end at an entry frame on the C stack was read as a
        // frame was pushed or popped: a generator's frame that yielded (its caller link cleared)
        // just after the thread state named it current, which a check can read alike.
        let unrooted = layout.owner_hidden.is_some() && !ends.final_hidden;
        let torn = unrooted
            || match ends.last {
                Some(last) if !whole(last) => {
                    let older = !in_chunk(last) && !ends.last_in_object;
                    if older && self.first_chunk_frame(chunk) == Some(last) {
                        if let Some(stack) = self.ahead_stacks.get_mut(&thread) {
                            stack.root = last;
                        }
                        false
                    } else if !ends.last_with_code {
                        // Short of the first frame at one without code: memory read before a
                        // frame was set up there, such as a chunk of data stack the thread freed
                        // and was given again (it reads as zeros until it recurses that deep
                        // again, so a check reads it alike).
                        true
                    } else {
                        let all = ends.first_outside || ends.last_in_object || in_chunk(last);
                        !self.still_as_read(thread, field, current_at, current, all, &walked)
                    }
                }
                Some(last) => {
                    // kept only when it ended at the first frame itself (not at a root a check
                    // found)
                    if first_frame(last) {
                        self.unchanged.keep(
                            thread,
                            &read,
                            batch,
                            &outside[outside_start..],
                            &out[start..],
                        );
                    }
                    false
                }
                // no frame of the program: in 3.11 and 3.12, a `_PyCFrame` read as its C call
                // began or after it returned may name none, or frames without code
                None if current_at != 0 => {
                    !self.still_as_read(thread, field, current_at, current, true, &walked)
                }
                None => false,
            };
        self.walked = walked;
        if torn {
            bail!("a chain of frames that ends outside the data stack: a torn read");
        }
        Ok(())
    }

    /// The second slot of the thread's first chunk of data stack, where its first frame lies:
    /// followed from its current chunk `chunk` through each chunk's `previous` (the first word
    /// of its header) to the one without. None when a link does not read, or after
    /// `MAX_CHUNKS` links (a torn read, or a stack too deep to follow).
    fn first_chunk_frame(&self, chunk: usize) -> Option<usize> {
        let mut at = chunk;
        for _ in 0..MAX_CHUNKS {
            let mut previous = [0u8; 8];
            read(self.pid, at, &mut previous).ok()?;
            match usize_at(&previous, 0) {
                0 => return Some(at + self.layout.chunk_data + 8),
                older => at = older,
            }
        }
        None
    }

    /// Whether a walk that did not end at the thread's first frame read the thread as it is:
    /// read again at once, each frame it read outside the data stack still links to the same
    /// frame, runs the same code and has the same owner, a coroutine's or generator's frame
    /// is its object's, executing (read with its state: a frame in a thread's chain is
    /// running), and in 3.11 and 3.12 the thread's current frame is still found through the
    /// same `_PyCFrame`; with `all`, each frame of the data stack too, and the current frame is
    /// still the one the walk began at.
    ///
    /// A coroutine's frame read before it was resumed, or after its memory went to another
    /// coroutine, fails the first; so does one read suspended again, as it links to no caller,
    /// after the frame it called was read (the pieces are read in turn, and one plain call of
    /// the next task's step lies where that frame lay, so the thread's current frame is there
    /// again: aiohttp's `RequestHandler.start` once stood as a root under `create_task`);
    /// a current frame read from a `_PyCFrame` whose C call has
    /// returned, the second (or, as uvloop runs its callbacks from the same depth of the C
    /// stack and another C call's `_PyCFrame` may be at that address by then, the current
    /// frame); a data stack read a request earlier than the coroutine's frame it links to,
    /// its frames (a loop that calls the same function again and again has a current frame
    /// at the same address all along, but its callers link to another request's coroutine).
    /// A thread running on at a stack that spans several chunks is not checked with `all`:
    /// the top of its stack changes as it runs, the frames of its older chunks do not.
    #[allow(clippy::too_many_arguments)]
    fn still_as_read(
        &self,
        thread: usize,
        field: usize,
        current_at: usize,
        walked_from: usize,
        all: bool,
        walked: &[WalkedFrame],
    ) -> bool {
        let layout = &self.layout;
        let (first_at, size) = (layout.frame_first, layout.frame_size);
        let at = |raw: &[u8], offset: usize| usize_at(raw, offset - first_at);
        let checked = || walked.iter().filter(|f| all || !f.on_stack);
        // a coroutine's frame is read from its object's frame state on, in one piece: this
        // many bytes before the part of a frame read
        let gen = layout.gen;
        let back = |f: &WalkedFrame| {
            if f.owner == Some(OWNED_BY_GENERATOR) {
                gen.iframe - gen.frame_state + first_at
            } else {
                0
            }
        };
        // the frames first, the pointers that lead to them after
        let mut pieces: Vec<(usize, usize)> = checked()
            .map(|f| ((f.frame + first_at).wrapping_sub(back(f)), back(f) + size))
            .collect();
        pieces.push((thread + layout.tstate_frame, 8));
        if current_at != 0 {
            pieces.push((current_at, 8));
        }
        let again = Batch::read(self.pid, &pieces);
        let frames_as_read = checked().all(|f| {
            let back = back(f);
            let piece = again.get((f.frame + first_at).wrapping_sub(back), back + size);
            piece.is_some_and(|piece| {
                let raw = &piece[back..];
                (back == 0 || piece[0] as i8 == gen.executing)
                    && at(raw, layout.frame_previous) == f.previous
                    && at(raw, layout.frame_code) & !layout.code_tags == f.code
                    && layout.frame_owner.map(|owner| raw[owner - first_at]) == f.owner
            })
        });
        let word = |address: usize| again.get(address, 8).map(|bytes| usize_at(bytes, 0));
        let (cframe, current) = if current_at != 0 {
            (word(thread + layout.tstate_frame), word(current_at))
        } else {
            (Some(field), word(thread + layout.tstate_frame))
        };
        frames_as_read && cframe == Some(field) && (!all || current == Some(walked_from))
    }

    /// Follows the frames from `current`, innermost first, into `out`, and as read into
    /// `walked`; `stack` holds the data stack from `stack_start` on.
    fn walk(
        &self,
        out: &mut Vec<RawFrame>,
        current: usize,
        stack: &[u8],
        stack_start: usize,
        batch: &Batch,
        walked: &mut Vec<WalkedFrame>,
    ) -> Result<Ends> {
        let layout = &self.layout;
        let (first_at, size) = (layout.frame_first, layout.frame_size);
        let field = |raw: &[u8], offset: usize| usize_at(raw, offset - first_at);
        let top = stack_start + stack.len();
        let mut frame = current;
        let mut read_here = [0u8; MAX_FRAME_READ];
        let mut seen = 0usize;
        // Brent's cycle check: a chain torn into a loop ends at once, not after MAX_DEPTH reads
        let (mut tortoise, mut power, mut steps) = (frame, 1usize, 0usize);
        let mut ends = Ends {
            first_outside: false,
            last: None,
            last_in_object: false,
            last_with_code: false,
            final_hidden: true,
        };
        while frame != 0 {
            seen += 1;
            if seen > MAX_DEPTH {
                bail!("a stack deeper than {MAX_DEPTH} frames: a torn read");
            }
            if seen > 1 && frame == tortoise {
                bail!("a chain of frames that loops: a torn read");
            }
            steps += 1;
            if steps == power {
                (tortoise, power, steps) = (frame, power * 2, 0);
            }
            let first = frame + first_at;
            let on_stack = first >= stack_start && first + size <= top;
            let raw: &[u8] = if on_stack {
                let at = first - stack_start;
                &stack[at..at + size]
            } else {
                match batch.get(first, size) {
                    Some(bytes) => bytes,
                    None => {
                        read(self.pid, first, &mut read_here[..size])?;
                        &read_here[..size]
                    }
                }
            };
            let previous = field(raw, layout.frame_previous);
            let owner = layout.frame_owner.map(|at| raw[at - first_at]);
            let hidden = layout.hides(owner);
            let code = field(raw, layout.frame_code) & !layout.code_tags;
            ends.first_outside |= seen == 1 && !on_stack;
            walked.push(WalkedFrame {
                frame,
                previous,
                code,
                owner,
                on_stack,
            });
            // A frame without code is one being set up or torn down as it is read: like
            // py-spy (and CPython's own remote reader), the walk passes over it.
            if !hidden && code != 0 {
                let instr = field(raw, layout.frame_instr);
                let offset = instr as i64 - (code + layout.code_adaptive) as i64;
                out.push((code, offset));
            }
            ends.final_hidden = hidden;
            if !hidden {
                ends.last = Some(frame);
                ends.last_in_object =
                    matches!(owner, Some(OWNED_BY_GENERATOR | OWNED_BY_FRAME_OBJECT));
                ends.last_with_code = code != 0;
            }
            frame = previous;
        }
        Ok(ends)
    }
}
