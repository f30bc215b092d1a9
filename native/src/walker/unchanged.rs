//! A thread's walk kept with what it was made of, so that a sample that reads the same bytes
//! takes its frames without walking again.
//!
//! A walk is a function of what it read: the current frame's address, the top of the data
//! stack (where it starts, its bytes) and the frames read outside it. A thread that waits, as
//! most do most of the time, reads the same bytes sample after sample. A walk is kept only if
//! it ended at the thread's first frame (whole, without the check of a walk that ends anywhere
//! else) and every frame it read outside the data stack came from the batch; the next sample
//! of the thread whose current frame, data stack and those frames, read now, are byte for byte
//! the same has the same frames. The code objects they run are checked as every sample's are.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use super::RawFrame;
use crate::process::memory::Batch;

/// What one thread's kept walk read and found.
#[derive(Default)]
struct Kept {
    /// False while it holds no walk to take again (its room stays for the thread's next).
    valid: bool,
    current: usize,
    base: usize,
    stack_start: usize,
    stack: Vec<u8>,
    /// Frames read outside the data stack, by address, and their bytes one after another.
    outside: Vec<usize>,
    outside_bytes: Vec<u8>,
    frames: Vec<RawFrame>,
}

/// Where a thread's walk began and what it read of its data stack (`Walks::replay`).
pub struct Read<'a> {
    pub current: usize,
    /// Where the frames of the thread's current chunk of data stack start (its first chunk's
    /// while the stack fits in one).
    pub base: usize,
    pub stack_start: usize,
    pub stack: &'a [u8],
}

impl Read<'_> {
    fn is(&self, kept: &Kept) -> bool {
        kept.valid
            && kept.current == self.current
            && kept.base == self.base
            && kept.stack_start == self.stack_start
            && kept.stack == self.stack
    }
}

/// The last whole walk of each thread, by thread state address.
pub struct Walks {
    /// Where a frame's read part starts and its length (`Layout::frame_first`, `frame_size`).
    first_at: usize,
    size: usize,
    kept: HashMap<usize, Kept, FxBuildHasher>,
}

impl Walks {
    pub fn new(first_at: usize, size: usize) -> Walks {
        Walks {
            first_at,
            size,
            kept: HashMap::default(),
        }
    }

    /// The frames of `thread`'s kept walk onto `out`, and the frames it read outside the data
    /// stack onto `outside`, when what it read is byte for byte what `read` and `batch` hold
    /// now; false (nothing added) otherwise.
    pub fn replay(
        &self,
        thread: usize,
        read: &Read<'_>,
        batch: &Batch,
        out: &mut Vec<RawFrame>,
        outside: &mut Vec<usize>,
    ) -> bool {
        let Some(kept) = self.kept.get(&thread).filter(|k| read.is(k)) else {
            return false;
        };
        let now = kept
            .outside
            .iter()
            .map(|&f| batch.get(f + self.first_at, self.size));
        let then = kept.outside_bytes.chunks_exact(self.size);
        if !now.zip(then).all(|(now, then)| now == Some(then)) {
            return false;
        }
        out.extend_from_slice(&kept.frames);
        outside.extend_from_slice(&kept.outside);
        true
    }

    /// Keeps `thread`'s walk that found `frames`, as read from `read`, and from `batch` the
    /// frames at `outside` (those it read outside the data stack, in the order walked): a
    /// whole walk. One that read such a frame the batch lacks (read on its own, by then maybe
    /// other bytes than the batch's) is not kept, and the thread's walk kept before it is not
    /// taken again (its buffers stay, for the thread's next walk).
    pub fn keep(
        &mut self,
        thread: usize,
        read: &Read<'_>,
        batch: &Batch,
        outside: &[usize],
        frames: &[RawFrame],
    ) {
        let kept = self.kept.entry(thread).or_default();
        kept.valid = false;
        kept.outside.clear();
        kept.outside_bytes.clear();
        for &frame in outside {
            let Some(bytes) = batch.get(frame + self.first_at, self.size) else {
                return;
            };
            kept.outside.push(frame);
            kept.outside_bytes.extend_from_slice(bytes);
        }
        kept.current = read.current;
        kept.base = read.base;
        kept.stack_start = read.stack_start;
        kept.stack.clear();
        kept.stack.extend_from_slice(read.stack);
        kept.frames.clear();
        kept.frames.extend_from_slice(frames);
        kept.valid = true;
    }

    /// Forgets the walks of threads not in `threads` once it holds more than those (a walk
    /// kept stays right for the bytes it was made of: a thread gone is only room).
    pub fn retain(&mut self, threads: &[usize]) {
        if self.kept.len() > threads.len() {
            self.kept.retain(|thread, _| threads.contains(thread));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_walk_is_taken_again_only_while_it_reads_the_same_bytes() {
        let pid = std::process::id() as i32;
        let mut frame = vec![3u8; 64];
        let at = frame.as_ptr() as usize;
        let stack = vec![5u8; 512];
        let read = Read {
            current: 0x1000,
            base: 0x2000,
            stack_start: 0x2100,
            stack: &stack,
        };
        let found: Vec<RawFrame> = vec![(0x50, 8), (0x60, 24)];
        let mut walks = Walks::new(0, 64);
        let batch = Batch::read(pid, &[(at, 64)]);
        walks.keep(7, &read, &batch, &[at], &found);
        let (mut out, mut outside) = (vec![(0x10, 2)], Vec::new());
        assert!(walks.replay(7, &read, &batch, &mut out, &mut outside));
        assert_eq!(out, [(0x10, 2), (0x50, 8), (0x60, 24)]);
        assert_eq!(outside, [at]);
        // another thread, another current frame, another byte of the stack: walked again
        let (mut out, mut outside) = (Vec::new(), Vec::new());
        assert!(!walks.replay(8, &read, &batch, &mut out, &mut outside));
        let moved = Read {
            current: 0x1040,
            ..read
        };
        assert!(!walks.replay(7, &moved, &batch, &mut out, &mut outside));
        let mut other = stack.clone();
        other[300] = 6;
        let changed = Read {
            stack: &other,
            ..read
        };
        assert!(!walks.replay(7, &changed, &batch, &mut out, &mut outside));
        assert!(out.is_empty() && outside.is_empty());
        // the frame outside the stack changed, or is not in the batch
        frame[10] = 4;
        let again = Batch::read(pid, &[(at, 64)]);
        assert!(!walks.replay(7, &read, &again, &mut out, &mut outside));
        assert!(!walks.replay(7, &read, &Batch::default(), &mut out, &mut outside));
        // a walk whose frame outside the stack the batch lacks is not kept, and the one
        // kept before it is not taken again
        walks.keep(7, &read, &again, &[at], &found);
        assert!(walks.replay(7, &read, &again, &mut out, &mut outside));
        out.clear();
        outside.clear();
        walks.keep(7, &read, &Batch::default(), &[at], &found);
        assert!(!walks.replay(7, &read, &again, &mut out, &mut outside));
        // threads gone are forgotten
        walks.keep(7, &read, &again, &[at], &found);
        walks.retain(&[]);
        assert!(!walks.replay(7, &read, &again, &mut out, &mut outside));
        assert!(out.is_empty() && outside.is_empty());
        drop(frame);
    }
}
