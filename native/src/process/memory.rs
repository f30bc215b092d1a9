//! Reads of the target's memory: single reads, and batches of many remote pieces in as few
//! `process_vm_readv` calls as the kernel allows, counted per thread.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use rustc_hash::FxBuildHasher;

/// process_vm_readv takes at most this many remote pieces per call.
const IOV_MAX: usize = 1024;

/// Reads of the target's memory: `process_vm_readv` calls, the remote pieces they named, the
/// bytes they copied, and the time spent in them (timed around each call, so that a benchmark
/// charges the kernel for the very reads made, as the machine was at that instant).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryReads {
    pub calls: u64,
    pub pieces: u64,
    pub bytes: u64,
    pub nanos: u64,
}

impl MemoryReads {
    /// Every read this thread made so far.
    pub fn of_this_thread() -> MemoryReads {
        READS.get()
    }

    /// Adds what this thread read between `before` and `after`.
    pub fn add_between(&mut self, before: MemoryReads, after: MemoryReads) {
        self.calls += after.calls - before.calls;
        self.pieces += after.pieces - before.pieces;
        self.bytes += after.bytes - before.bytes;
        self.nanos += after.nanos - before.nanos;
    }
}

/// A read as `record` keeps it: the target's PID and the remote pieces of one call.
pub type RecordedRead = (i32, Vec<(usize, usize)>);

/// While on, every read of one of `RECORDED`'s PIDs is kept there (`record`).
static RECORDING: AtomicBool = AtomicBool::new(false);
static RECORDED: Mutex<(Vec<i32>, Vec<RecordedRead>)> = Mutex::new((Vec::new(), Vec::new()));
/// At most this many reads are kept by one recording.
const RECORD_MAX: usize = 1 << 16;

/// Every read of the memory of `pids` that this process's threads make for `duration`, in
/// the order made (up to `RECORD_MAX` of them): what the machine's floor of a benchmark
/// replays to charge the kernel for the very reads sidecar made. One recording at a time.
pub fn record(pids: &[i32], duration: Duration) -> Result<Vec<RecordedRead>> {
    {
        let mut recorded = RECORDED.lock().unwrap_or_else(|e| e.into_inner());
        if RECORDING.swap(true, Ordering::SeqCst) {
            bail!("the reads are being recorded already");
        }
        recorded.0 = pids.to_vec();
        recorded.1.clear();
    }
    std::thread::sleep(duration);
    let mut recorded = RECORDED.lock().unwrap_or_else(|e| e.into_inner());
    RECORDING.store(false, Ordering::SeqCst);
    recorded.0.clear();
    Ok(std::mem::take(&mut recorded.1))
}

fn keep(pid: i32, pieces: &[(usize, usize)]) {
    let mut recorded = RECORDED.lock().unwrap_or_else(|e| e.into_inner());
    if recorded.0.contains(&pid) && recorded.1.len() < RECORD_MAX {
        recorded.1.push((pid, pieces.to_vec()));
    }
}

thread_local! {
    /// Every read of this thread so far; a walker counts its own as the difference across
    /// one of its samples (the shared clock reads several targets on one thread).
    static READS: Cell<MemoryReads> = const { Cell::new(MemoryReads { calls: 0, pieces: 0, bytes: 0, nanos: 0 }) };
}

/// Remote pieces read in as few calls as the kernel allows; a piece that cannot be read
/// (freed, unmapped) is left out and the rest still read. A walker keeps one and refills it
/// every sample, so its tables and buffer are allocated once.
#[derive(Default)]
pub struct Batch {
    /// The pieces the next `fill` reads: (address, length).
    pub pieces: Vec<(usize, usize)>,
    /// Where each piece lies in `buf`, and whether the last fill read it whole.
    offsets: Vec<usize>,
    whole: Vec<bool>,
    /// Each piece's place in `pieces`, by (address, length); made again only when the pieces
    /// differ from those it was made for (a walker asks for much the same pieces sample after
    /// sample).
    index: HashMap<(usize, usize), u32, FxBuildHasher>,
    indexed: Vec<(usize, usize)>,
    buf: Vec<u8>,
    /// A merged batch's spans read whole, by address: (start, end, offset in `buf`); a piece
    /// anywhere within one is handed out.
    spans: Option<Vec<(usize, usize, usize)>>,
    /// Of a merged batch, the first of its spans (by index) on each page they touch, and the
    /// span the last piece handed out was in (the objects a scan reads in a row are mostly
    /// of one span: a task and its coroutines, made one after another).
    pages: HashMap<usize, u32, FxBuildHasher>,
    last_span: Cell<usize>,
    /// The pieces the last `fill_merged` was asked for, and the spans it made of them: a
    /// scan of parked tasks asks for the same pieces scan after scan, and they are not sorted
    /// and merged again.
    merged_from: Vec<(usize, usize)>,
    merged_gap: usize,
    merged: Vec<(usize, usize)>,
}

const PAGE: usize = 4096;

impl Batch {
    /// A batch of `pieces`, read at once.
    pub fn read(pid: i32, pieces: &[(usize, usize)]) -> Batch {
        let mut batch = Batch {
            pieces: pieces.to_vec(),
            ..Batch::default()
        };
        batch.fill(pid);
        batch
    }

    /// A batch of `pieces`, read as spans: pieces less than `gap` bytes apart (at most a page,
    /// so that a span touches only the pages its pieces do) are read as one remote piece, the
    /// bytes between them too. The kernel pins each remote piece's pages in turn, so many small
    /// objects of the same pages (tasks, coroutines) cost a pin per page instead of one each.
    pub fn read_merged(pid: i32, pieces: &[(usize, usize)], gap: usize) -> Batch {
        let mut batch = Batch::default();
        batch.fill_merged(pid, pieces, gap);
        batch
    }

    /// `read_merged` into this batch, replacing what it held; its tables and buffer are kept
    /// and reused (a scanner refills one every scan).
    pub fn fill_merged(&mut self, pid: i32, pieces: &[(usize, usize)], gap: usize) {
        let gap = gap.min(4096);
        if pieces != self.merged_from.as_slice() || gap != self.merged_gap {
            self.merge(pieces, gap);
        }
        let last = self.spans.take().unwrap_or_default();
        self.pieces.clear();
        self.pieces.extend_from_slice(&self.merged);
        self.read_in(pid);
        let mut whole = Vec::with_capacity(self.pieces.len());
        whole.extend(
            self.pieces
                .iter()
                .zip(&self.offsets)
                .zip(&self.whole)
                .filter(|(_, &read)| read)
                .map(|((&(start, len), &offset), _)| (start, start + len, offset)),
        );
        // the same spans read whole as last time: the table of pages stands
        if whole != last || self.pages.is_empty() {
            self.pages.clear();
            self.pages.reserve(whole.len());
            for (i, &(start, end, _)) in whole.iter().enumerate() {
                for page in start / PAGE..=end.saturating_sub(1).max(start) / PAGE {
                    self.pages.entry(page).or_insert(i as u32);
                }
            }
        }
        self.spans = Some(whole);
    }

    /// `pieces` sorted by address and merged into spans (`merged`): those less than `gap`
    /// bytes apart are one span, the bytes between them too.
    fn merge(&mut self, pieces: &[(usize, usize)], gap: usize) {
        self.merged_from.clear();
        self.merged_from.extend_from_slice(pieces);
        self.merged_gap = gap;
        let mut sorted = std::mem::take(&mut self.pieces);
        sorted.clear();
        sorted.extend_from_slice(pieces);
        // a radix sort: linear in a scan's thousands of pieces
        radsort::sort_by_key(&mut sorted, |piece| piece.0);
        self.merged.clear();
        for &(address, len) in &sorted {
            match self.merged.last_mut() {
                Some((start, span_len)) if address <= (*start + *span_len).saturating_add(gap) => {
                    *span_len = (*span_len).max(address.saturating_add(len) - *start);
                }
                _ => self.merged.push((address, len)),
            }
        }
        self.pieces = sorted;
    }

    /// Reads `self.pieces`, replacing what the batch held.
    pub fn fill(&mut self, pid: i32) {
        self.read_in(pid);
        self.index();
    }

    /// Reads `self.pieces` into `buf`, noting which were read whole.
    fn read_in(&mut self, pid: i32) {
        let pieces = &self.pieces;
        self.offsets.clear();
        let mut total = 0usize;
        for &(_, len) in pieces {
            self.offsets.push(total);
            total += len;
        }
        self.offsets.push(total);
        self.whole.clear();
        self.whole.resize(pieces.len(), false);
        self.spans = None;
        // Grown, never cleared: only pieces read whole are handed out, so what earlier
        // samples left in the rest is never seen.
        if self.buf.len() < total {
            self.buf.resize(total, 0);
        }
        let offsets = &self.offsets;
        let mut i = 0;
        while i < pieces.len() {
            let end = (i + IOV_MAX).min(pieces.len());
            let n = read_vectored(
                pid,
                &pieces[i..end],
                &mut self.buf[offsets[i]..offsets[end]],
            );
            // Pieces are filled in order until the first that fails: keep the whole ones and
            // go on after the failed one.
            let mut j = i;
            while j < end && offsets[j + 1] - offsets[i] <= n {
                self.whole[j] = true;
                j += 1;
            }
            i = if j == end { end } else { j + 1 };
        }
    }

    /// Makes `index` for the pieces now asked for, unless it was made for these already.
    fn index(&mut self) {
        if self.indexed == self.pieces {
            return;
        }
        self.index.clear();
        self.index.reserve(self.pieces.len());
        for (i, &piece) in self.pieces.iter().enumerate() {
            self.index.entry(piece).or_insert(i as u32);
        }
        self.indexed.clone_from(&self.pieces);
    }

    /// The bytes of the pieces at `range` of `pieces`, which lie one after another in the
    /// batch, when every one of them was read whole (not of a merged batch).
    pub fn run(&self, range: std::ops::Range<usize>) -> Option<&[u8]> {
        if self.spans.is_some() || range.end > self.whole.len() {
            return None;
        }
        if !self.whole[range.clone()].iter().all(|&read| read) {
            return None;
        }
        self.buf
            .get(self.offsets[range.start]..self.offsets[range.end])
    }

    /// The bytes of a piece that was asked for exactly so and read whole; of a merged batch,
    /// of any piece within a span read whole.
    pub fn get(&self, address: usize, len: usize) -> Option<&[u8]> {
        if let Some(spans) = &self.spans {
            let within = |&(start, end, offset): &(usize, usize, usize)| {
                (start <= address && address < end).then(|| {
                    let at = offset + (address - start);
                    (address.checked_add(len)? <= end).then(|| self.buf.get(at..at + len))?
                })
            };
            if let Some(found) = spans.get(self.last_span.get()).and_then(within) {
                return found;
            }
            // from the first span on the address's page, the one that holds it
            let first = *self.pages.get(&(address / PAGE))? as usize;
            for (i, span) in spans.iter().enumerate().skip(first) {
                if span.0 > address {
                    break;
                }
                if let Some(found) = within(span) {
                    self.last_span.set(i);
                    return found;
                }
            }
            return None;
        }
        let i = *self.index.get(&(address, len))? as usize;
        if !self.whole[i] {
            return None;
        }
        let at = self.offsets[i];
        self.buf.get(at..at + len)
    }
}

/// What a step of a scan reads: the pieces that an earlier read of the scan (`known`) holds
/// are taken from it, as they were at that instant, and the others read now in one merged
/// batch.
pub struct Reads<'a> {
    known: &'a Batch,
    fresh: Batch,
}

impl<'a> Reads<'a> {
    pub fn read(pid: i32, known: &'a Batch, pieces: &[(usize, usize)], gap: usize) -> Reads<'a> {
        let missing: Vec<(usize, usize)> = pieces
            .iter()
            .filter(|&&(address, len)| known.get(address, len).is_none())
            .copied()
            .collect();
        Reads {
            known,
            fresh: Batch::read_merged(pid, &missing, gap),
        }
    }

    /// The bytes of a piece, from whichever read holds it.
    pub fn get(&self, address: usize, len: usize) -> Option<&[u8]> {
        self.known
            .get(address, len)
            .or_else(|| self.fresh.get(address, len))
    }
}

/// The little-endian word at `at`, 0 when `buf` is too short.
pub fn usize_at(buf: &[u8], at: usize) -> usize {
    buf.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, |b: [u8; 8]| u64::from_le_bytes(b) as usize)
}

/// The little-endian 32-bit value at `at`, 0 when `buf` is too short.
pub fn u32_at(buf: &[u8], at: usize) -> u32 {
    buf.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

pub fn read(pid: i32, address: usize, buf: &mut [u8]) -> Result<()> {
    let len = buf.len();
    read_pieces(pid, &[(address, len)], buf)
}

/// Reads remote `(address, length)` pieces into `out`, back to back, in one system call.
pub fn read_pieces(pid: i32, pieces: &[(usize, usize)], out: &mut [u8]) -> Result<()> {
    let total: usize = pieces.iter().map(|p| p.1).sum();
    if total > out.len() {
        bail!("read buffer too small");
    }
    let n = read_vectored(pid, pieces, &mut out[..total]);
    if n != total {
        // A read that fails at once sets errno; one that stops part way (at a piece whose
        // pages are not mapped, or are freed under it) returns what it read and sets none.
        let why = match n {
            0 => std::io::Error::last_os_error().to_string(),
            _ => "the rest is not mapped in the target".to_string(),
        };
        return Err(anyhow!(
            "failed to read the target's memory ({n} of {total} bytes): {why}"
        ));
    }
    Ok(())
}

/// Up to `len` bytes at `address` in the target: as many as its mappings hold from there on
/// (what lies at the end of a mapping), read a page at a time in one call.
pub fn read_upto(pid: i32, address: usize, len: usize) -> Vec<u8> {
    let end = address.saturating_add(len);
    let mut pieces = Vec::new();
    let mut at = address;
    while at < end {
        let next = ((at / PAGE) + 1).saturating_mul(PAGE).min(end);
        pieces.push((at, next - at));
        at = next;
    }
    let mut buf = vec![0u8; end - address];
    let n = read_vectored(pid, &pieces, &mut buf);
    buf.truncate(n);
    buf
}

/// One process_vm_readv of `pieces` into `out` (which holds their total length): the bytes
/// read, 0 on failure.
fn read_vectored(pid: i32, pieces: &[(usize, usize)], out: &mut [u8]) -> usize {
    /// Pieces described on the stack; more take an allocation.
    const ON_STACK: usize = 64;
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let iovec = |&(address, len): &(usize, usize)| libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: len,
    };
    let mut on_stack = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; ON_STACK];
    let on_heap: Vec<libc::iovec>;
    let remote: &[libc::iovec] = if pieces.len() <= ON_STACK {
        for (slot, piece) in on_stack.iter_mut().zip(pieces) {
            *slot = iovec(piece);
        }
        &on_stack[..pieces.len()]
    } else {
        on_heap = pieces.iter().map(iovec).collect();
        &on_heap
    };
    // SAFETY: `local` covers `out` exactly; the remote pieces are only read by the kernel,
    // which checks them against the target's mappings.
    let started = Instant::now();
    let n =
        unsafe { libc::process_vm_readv(pid, &local, 1, remote.as_ptr(), remote.len() as _, 0) };
    let took = started.elapsed();
    let n = n.max(0) as usize;
    if RECORDING.load(Ordering::Relaxed) {
        keep(pid, pieces);
    }
    READS.set({
        let mut reads = READS.get();
        reads.calls += 1;
        reads.pieces += pieces.len() as u64;
        reads.bytes += n as u64;
        reads.nanos += took.as_nanos() as u64;
        reads
    });
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_that_stops_part_way_says_so_and_one_that_fails_says_why() {
        let pid = std::process::id() as i32;
        let data = [5u8; 16];
        let mut out = [0u8; 24];
        let pieces = [(data.as_ptr() as usize, 16), (8, 8)];
        let err = read_pieces(pid, &pieces, &mut out).unwrap_err().to_string();
        assert!(
            err.ends_with("(16 of 24 bytes): the rest is not mapped in the target"),
            "{err}"
        );
        let err = read_pieces(pid, &[(8, 8)], &mut out)
            .unwrap_err()
            .to_string();
        assert!(err.contains("(0 of 8 bytes): Bad address"), "{err}");
    }

    #[test]
    fn a_merged_batch_hands_out_the_pieces_of_the_spans_it_read() {
        let pid = std::process::id() as i32;
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let base = data.as_ptr() as usize;
        // two pieces 100 bytes apart, merged into one span, and one far off
        let far: Vec<u8> = vec![7; 64];
        let pieces = [(base + 200, 16), (base, 100), (far.as_ptr() as usize, 64)];
        let batch = Batch::read_merged(pid, &pieces, 1024);
        assert_eq!(batch.get(base, 100), Some(&data[..100]));
        assert_eq!(batch.get(base + 200, 16), Some(&data[200..216]));
        // within the span read, though not asked for exactly so
        assert_eq!(batch.get(base + 150, 8), Some(&data[150..158]));
        assert_eq!(batch.get(far.as_ptr() as usize, 64), Some(&far[..]));
        // past the span's end, or before its start
        assert_eq!(batch.get(base + 210, 16), None);
        assert_eq!(batch.get(base - 8, 8), None);
        // a span that cannot be read (the null page) is left out, the others kept
        let batch = Batch::read_merged(pid, &[(8, 8), (base, 100)], 64);
        assert_eq!(batch.get(8, 8), None);
        assert_eq!(batch.get(base, 100), Some(&data[..100]));
        // spans apart on the same pages: each found, nothing between them
        let batch = Batch::read_merged(pid, &[(base + 200, 16), (base, 16), (base + 900, 8)], 64);
        assert_eq!(batch.get(base + 200, 16), Some(&data[200..216]));
        assert_eq!(batch.get(base + 8, 8), Some(&data[8..16]));
        assert_eq!(batch.get(base + 900, 8), Some(&data[900..908]));
        assert_eq!(batch.get(base + 100, 8), None);
        assert_eq!(batch.get(base + 210, 8), None);
    }

    #[test]
    fn a_batch_refilled_with_the_same_pieces_hands_out_what_it_read_now() {
        let pid = std::process::id() as i32;
        let mut data: Vec<u8> = vec![1; 256];
        let base = data.as_ptr() as usize;
        let mut batch = Batch {
            pieces: vec![(base, 16), (8, 8), (base + 100, 8), (base, 16)],
            ..Batch::default()
        };
        batch.fill(pid);
        assert_eq!(batch.get(base, 16), Some(&[1u8; 16][..]));
        assert_eq!(batch.get(8, 8), None);
        assert_eq!(batch.get(base + 100, 8), Some(&[1u8; 8][..]));
        // asked for exactly so only
        assert_eq!(batch.get(base, 8), None);
        data[..16].fill(2);
        data[100..108].fill(3);
        std::hint::black_box(&data);
        batch.fill(pid);
        assert_eq!(batch.get(base, 16), Some(&[2u8; 16][..]));
        assert_eq!(batch.get(base + 100, 8), Some(&[3u8; 8][..]));
        // other pieces: the old ones are no longer handed out
        batch.pieces = vec![(base + 200, 8)];
        batch.fill(pid);
        assert_eq!(batch.get(base + 200, 8), Some(&[1u8; 8][..]));
        assert_eq!(batch.get(base, 16), None);
    }

    #[test]
    fn a_merged_batch_refilled_reads_afresh_the_same_pieces_and_new_ones() {
        let pid = std::process::id() as i32;
        let mut data: Vec<u8> = vec![1; 4096];
        let base = data.as_ptr() as usize;
        let pieces = [(base + 200, 16), (base, 100)];
        let mut batch = Batch::default();
        batch.fill_merged(pid, &pieces, 1024);
        assert_eq!(batch.get(base + 200, 16), Some(&[1u8; 16][..]));
        // the same pieces again (their spans kept): the bytes read now
        data[200..216].fill(2);
        std::hint::black_box(&data);
        batch.fill_merged(pid, &pieces, 1024);
        assert_eq!(batch.get(base + 200, 16), Some(&[2u8; 16][..]));
        assert_eq!(batch.get(base + 150, 8), Some(&[1u8; 8][..]));
        // the same pieces at a smaller gap: two spans, nothing between them
        batch.fill_merged(pid, &pieces, 64);
        assert_eq!(batch.get(base + 150, 8), None);
        assert_eq!(batch.get(base, 100), Some(&[1u8; 100][..]));
        // other pieces: only theirs are handed out
        batch.fill_merged(pid, &[(base + 1000, 8)], 64);
        assert_eq!(batch.get(base + 1000, 8), Some(&[1u8; 8][..]));
        assert_eq!(batch.get(base + 200, 16), None);
    }
}
