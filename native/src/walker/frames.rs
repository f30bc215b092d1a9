//! The frame walk of one thread: its current frame, then each previous one, innermost first.
//!
//! Frames of plain calls lie at the top of the thread's data stack: that part and the
//! current frame's address come from the batch when they lie where recent samples found
//! them, else from one read. Only frames elsewhere (coroutines and generators keep theirs
//! inside the object) come from the batch's frames read ahead, or cost a read each.

use anyhow::{bail, Result};

use super::ahead::AheadStack;
use super::Walker;
use crate::memory::{read, read_pieces, usize_at, Batch};

/// Sanity bound against torn or garbage reads.
const MAX_DEPTH: usize = 4096;
/// The most of a frame a layout may read (`Layout::frame_size`).
pub const MAX_FRAME_READ: usize = 256;
/// How much of the top of a thread's data stack (where the frames of plain calls live) is
/// read in one piece with the current frame's address.
const DATASTACK_READ: usize = 16 << 10;

/// A frame as walked: its code object and the instruction offset in it.
pub type RawFrame = (usize, i64);

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
        self.stack.resize(8 + stack_len, 0);
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
        match read_ahead {
            Some((current, stack)) => {
                self.stack[..8].copy_from_slice(&current.to_le_bytes());
                self.stack[8..].copy_from_slice(stack);
            }
            None if current_at != 0 => {
                let pieces = [(current_at, 8), (stack_start, stack_len)];
                read_pieces(
                    self.pid,
                    &pieces[..if stack_len > 0 { 2 } else { 1 }],
                    &mut self.stack,
                )?;
            }
            None => {
                self.stack[..8].copy_from_slice(&field.to_le_bytes());
                if stack_len > 0 {
                    read(self.pid, stack_start, &mut self.stack[8..])?;
                }
            }
        }
        if stack_len > 0 {
            let next = AheadStack::next(ahead, current_at, stack_start, top, self.samples);
            self.ahead_stacks.insert(thread, next);
        }
        self.walk(out, stack_start, top, batch, outside)
    }

    /// Follows the frames from the current one (the first 8 bytes of `self.stack`, the data
    /// stack from `stack_start` to `top` after them), innermost first, into `out`.
    fn walk(
        &self,
        out: &mut Vec<RawFrame>,
        stack_start: usize,
        top: usize,
        batch: &Batch,
        outside: &mut Vec<usize>,
    ) -> Result<()> {
        let layout = &self.layout;
        let (first_at, size) = (layout.frame_first, layout.frame_size);
        let field = |raw: &[u8], offset: usize| usize_at(raw, offset - first_at);
        let mut frame = usize_at(&self.stack, 0);
        let mut read_here = [0u8; MAX_FRAME_READ];
        let mut seen = 0usize;
        // Brent's cycle check: a chain torn into a loop ends at once, not after MAX_DEPTH reads
        let (mut tortoise, mut power, mut steps) = (frame, 1usize, 0usize);
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
            let raw: &[u8] = if first >= stack_start && first + size <= top {
                let at = 8 + first - stack_start;
                &self.stack[at..at + size]
            } else {
                outside.push(frame);
                match batch.get(first, size) {
                    Some(bytes) => bytes,
                    None => {
                        read(self.pid, first, &mut read_here[..size])?;
                        &read_here[..size]
                    }
                }
            };
            let previous = field(raw, layout.frame_previous);
            let hidden = match (layout.frame_owner, layout.owner_hidden) {
                (Some(owner), Some(hidden)) => raw[owner - first_at] >= hidden,
                _ => false,
            };
            let code = field(raw, layout.frame_code) & !layout.code_tags;
            // A frame without code is one being set up or torn down as it is read: like
            // py-spy (and CPython's own remote reader), the walk passes over it.
            if !hidden && code != 0 {
                let instr = field(raw, layout.frame_instr);
                let offset = instr as i64 - (code + layout.code_adaptive) as i64;
                out.push((code, offset));
            }
            frame = previous;
        }
        Ok(())
    }
}
