//! Stacks of a CPython 3.11–3.15 process read straight from its memory, with few system calls.
//!
//! A general reader reads every frame's code object, both names and the line table on every
//! sample (about eight reads per frame), and every thread's /proc state inside the read. This
//! walker keeps what does not change between samples: code objects with their names, files and
//! line tables, formatted frames and folded stacks. Per sample, one batched read of what recent
//! samples found (thread states, the top of each data stack, frames outside them, the headers
//! of the cached code objects, checked every sample) usually holds the whole stack; anything
//! new costs one more read. From 3.14 the interpreter counts the code objects it frees, and
//! while that count stands the cached ones are not checked: their headers are not read. The
//! run state is read for Python threads outside a known wait only, through /proc files it
//! keeps open.
//!
//! The pieces, by concern: `crate::process::memory` (reads and batches), `layout` (where each version keeps
//! what is read: a table for 3.11 and 3.12, the target's own `_Py_DebugOffsets` from 3.13),
//! `objects` (strings, code objects, line tables), `frames` (the walk of one thread), `unchanged`
//! (a thread's last whole walk, taken again while the thread reads the same bytes), `ahead`
//! (what the next sample reads ahead). py-spy still attaches (it finds the interpreter and its
//! version) and stays the reader for other versions; the sampler compares this walker with it
//! before trusting it.

mod ahead;
mod compared;
mod debug_offsets;
mod dump;
mod frames;
pub mod gil;
mod layout;
pub(crate) mod objects;
mod unchanged;
pub(crate) mod values;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use anyhow::{bail, Result};
use py_spy::PythonSpy;

use crate::process::memory::{read, u32_at, usize_at, Batch, MemoryReads};
use crate::process::runstate::{Futex, ThreadStates};
use crate::rules::Wait;
use crate::stack::{GilRole, RunState, Stack, Trace};
use ahead::{AheadStack, Recent};
use compared::Compared;
pub use dump::{DumpedFrame, DumpedThread};
use frames::WalkedFrame;
use gil::{At, Gil, GilRead, GilTable};
#[cfg(test)]
pub(crate) use layout::MINORS;
pub use layout::{tuple_items, GenLayout, Layout};
use objects::{Code, ShortFiles};
use rustc_hash::FxBuildHasher;
pub use values::UNREADABLE;

use crate::budget::{self, Charge};

/// Sanity bound against torn or garbage reads.
const MAX_THREADS: usize = 4096;
/// What the code and stack caches may hold before they are cleared (bytes, about); the
/// process's walkers and task scanners share a budget of each kind too (`budget`).
const CODE_CACHE_BYTES: usize = 16 << 20;
const STACK_CACHE_BYTES: usize = 32 << 20;
/// For how many samples after a cached code object was found changed the names of cached
/// ones are checked too (`Walker::churning`).
const CHURN_SAMPLES: u64 = 1000;

/// A frame as walked: its code object and the instruction offset in it.
type RawFrame = (usize, i64);

/// A thread as read: OS thread id, where its frames (innermost first) are in the sample's
/// list of frames, what its state says of the GIL (the holder's, or 3.15's own flags), and its
/// count of contexts entered and left (`Layout::tstate_context_ver`).
type RawThread = (u64, Range<usize>, GilRole, u64);

/// What a sample builds and lets go, kept between samples so that one allocates nothing once
/// the walker has met the target's threads and stacks.
#[derive(Default)]
struct Scratch {
    threads: Vec<RawThread>,
    /// Every thread's frames, one thread after another.
    frames: Vec<RawFrame>,
    /// Frames met outside the data stacks.
    outside: Vec<usize>,
    /// A thread state the batch did not hold.
    tstate: Vec<u8>,
    /// The sample's code objects (sorted), and those of the frames it was made of, frame by
    /// frame.
    codes: Vec<usize>,
    frame_codes: Vec<usize>,
    /// The code objects whose headers the batch reads ahead, by address.
    ahead_codes: Vec<usize>,
    /// The code objects whose headers the sample checks, and those the batch lacked.
    checks: Vec<usize>,
    missing: Vec<usize>,
}

/// The marks of a cached code object's names as a read holds them (`Walker::marks_in`).
enum Marks<'b> {
    /// Not needed: code objects are not being freed and made again.
    Unchecked,
    /// The name's and the file name's.
    Read(&'b [u8], &'b [u8]),
    /// Needed, but the read lacks them.
    Unreadable,
}

/// A thread's frames as a sample folded them: its stack and whether it waits
/// (`Walker::folded`); forgotten with the cache of folded stacks.
#[derive(Default)]
struct LastFold {
    frames: Vec<RawFrame>,
    stack: Option<Stack>,
    waits: Wait,
}

/// Why the walker does not read a target.
#[derive(Debug)]
pub struct Unsupported {
    pub reason: String,
    /// No reader can read it right: refuse the target instead of reading it through py-spy.
    pub refuse: bool,
}

/// Reads the stacks of one CPython 3.11–3.15 process.
pub struct Walker {
    pid: i32,
    layout: Layout,
    interpreter: usize,
    codes: HashMap<usize, Code, FxBuildHasher>,
    code_bytes: Charge,
    /// Folded stacks by the frames they were folded from (`fold`).
    stacks: HashMap<Vec<RawFrame>, Option<Stack>, FxBuildHasher>,
    stack_bytes: Charge,
    files: ShortFiles,
    states: ThreadStates,
    /// Code objects recent samples checked; the next one reads their headers ahead. Up to
    /// 3.13, which of those headers were the cached code's, and what they read then.
    checked: Recent,
    compared: Compared,
    /// A thread's current frame's address and the top of its data stack, when the batch did
    /// not hold them and they were read on their own.
    stack: Vec<u8>,
    /// Thread states of the previous sample and frames outside the data stacks of recent
    /// ones: read ahead, with the code headers in `checked`, in one batch at the start of
    /// the next.
    ahead_threads: Vec<usize>,
    ahead_frames: Recent,
    /// By thread state: where the thread's current frame and the top of its data stack were,
    /// read ahead in the next batch.
    ahead_stacks: HashMap<usize, AheadStack, FxBuildHasher>,
    /// The previous sample's `ahead_stacks` while a sample fills the new one.
    previous_stacks: HashMap<usize, AheadStack, FxBuildHasher>,
    /// The frames of a thread's walk, as read.
    walked: Vec<WalkedFrame>,
    /// Each thread's last whole walk, with what it read: taken again while it reads the same.
    unchanged: unchanged::Walks,
    /// Room a sample reuses: the batch it refills and its scratch (boxed, so that a sample
    /// moves a pointer, not the structures, to borrow them beside the walker).
    room: Option<Box<(Batch, Scratch)>>,
    /// Samples read so far.
    samples: u64,
    /// What reading them took: system calls, remote pieces and bytes.
    reads: MemoryReads,
    /// Run states read from /proc so far (threads in a known wait are not read).
    state_reads: u64,
    /// The interpreter's count of code objects freed, as the last sample read it (3.14+).
    generation: Option<u64>,
    /// Until which sample the names of cached code objects are checked too (`churning`).
    churn_until: u64,
    /// By thread: its frames in the last sample folded, and what they folded to.
    last_folds: HashMap<u64, LastFold, FxBuildHasher>,
    /// The last sample met a thread whose run state this sidecar cannot read (not a thread
    /// of the target as its /proc sees it: another PID namespace), counted as running.
    guessed: bool,
    /// The target's GIL and GC state, when it can be read; else why not.
    gil: std::result::Result<Gil, String>,
    /// While a read for a dump runs (`dump`): the address of each frame it walks, in the
    /// order of the sample's frames.
    dumped: Option<Vec<usize>>,
}

impl Walker {
    /// A walker for the process `spy` attached to, when it runs a CPython version the walker
    /// knows on a 64-bit little-endian Linux machine, reading the GIL's and the collector's
    /// state with the stacks when `gil` says so; else why not.
    pub fn new(spy: &PythonSpy, gil: bool) -> Result<Walker, Unsupported> {
        let unsupported = |reason: String| Unsupported {
            reason,
            refuse: false,
        };
        let version = &spy.version;
        let platform = cfg!(all(target_os = "linux", target_pointer_width = "64"))
            && cfg!(target_endian = "little");
        if !platform || version.major != 3 || !layout::MINORS.contains(&version.minor) {
            return Err(unsupported(format!("Python {version}")));
        }
        let interpreter = spy.addresses.interpreter_address;
        if interpreter == 0 {
            return Err(unsupported("no interpreter found".into()));
        }
        let mut layout = match Layout::table(version.minor) {
            Some(layout) => layout,
            None => debug_layout(spy).map_err(|err| {
                let reason = format!("{err:#}");
                Unsupported {
                    refuse: reason == debug_offsets::FREE_THREADED,
                    reason,
                }
            })?,
        };
        if layout.frame_size > frames::MAX_FRAME_READ {
            return Err(unsupported(format!(
                "frames of {} bytes to read",
                layout.frame_size
            )));
        }
        let gil = gil_of(spy, gil);
        if let Some((holds, requested)) = gil.as_ref().ok().and_then(|gil| gil.flags) {
            // the thread state read covers its GIL flags
            layout.tstate_size = layout.tstate_size.max(holds.max(requested) + 4);
        }
        Ok(Walker {
            pid: spy.pid,
            unchanged: unchanged::Walks::new(layout.frame_first, layout.frame_size),
            layout,
            interpreter,
            codes: HashMap::default(),
            code_bytes: Charge::new(&budget::CODES, CODE_CACHE_BYTES),
            stacks: HashMap::default(),
            stack_bytes: Charge::new(&budget::STACKS, STACK_CACHE_BYTES),
            files: ShortFiles::new(spy.pid, spy.dockerized),
            states: ThreadStates::new(spy.pid),
            checked: Recent::default(),
            compared: Compared::default(),
            stack: Vec::new(),
            ahead_threads: Vec::new(),
            ahead_frames: Recent::default(),
            ahead_stacks: HashMap::default(),
            previous_stacks: HashMap::default(),
            walked: Vec::new(),
            room: None,
            samples: 0,
            reads: MemoryReads::default(),
            state_reads: 0,
            generation: None,
            churn_until: 0,
            last_folds: HashMap::default(),
            guessed: false,
            gil,
            dumped: None,
        })
    }

    /// Where the offsets the walker reads with came from ("table", "_Py_DebugOffsets").
    pub fn layout_source(&self) -> &'static str {
        self.layout.source
    }

    /// Every Python thread's stack, innermost frame last in the folded text.
    pub fn read(&mut self, run_state: RunState<'_>) -> Result<Vec<Trace>> {
        let before = MemoryReads::of_this_thread();
        let mut room = self.room.take().unwrap_or_default();
        let (batch, scratch) = &mut *room;
        let result = self.read_all(run_state, batch, scratch);
        self.room = Some(room);
        self.reads
            .add_between(before, MemoryReads::of_this_thread());
        result
    }

    /// The target's memory reads of every sample so far.
    pub fn reads(&self) -> MemoryReads {
        self.reads
    }

    /// Run states read from /proc so far: threads in a known wait are not read.
    pub fn state_reads(&self) -> u64 {
        self.state_reads
    }

    /// Time spent in those reads so far (ns), timed around each.
    pub fn state_nanos(&self) -> u64 {
        self.states.nanos()
    }

    /// Whether runnable threads are told waiting for a CPU (`ThreadStates::set_cpu_waits`).
    pub(crate) fn set_cpu_waits(&mut self, on: bool) {
        self.states.set_cpu_waits(on);
    }

    /// Where waits for a CPU come from (`ThreadStates::cpu_wait_source`).
    pub(crate) fn cpu_wait_source(&self) -> &'static str {
        self.states.cpu_wait_source()
    }

    /// The /proc file the run states come from now: "stat" or "syscall" (`runstate`).
    pub fn state_file(&self) -> &'static str {
        self.states.file()
    }

    /// Where the GIL's holder and waiters come from (`Stats::gil`).
    pub fn gil_source(&self) -> &str {
        gil_source(&self.gil, self.states.futex_readable())
    }

    /// Whether the last sample guessed some thread's on-CPU state (`guessed`).
    pub fn guessed(&self) -> bool {
        self.guessed
    }

    /// A sample: one batch of what recent samples read, the walk of every thread from it,
    /// the code objects its frames run checked, and each thread's trace.
    fn read_all(
        &mut self,
        run_state: RunState<'_>,
        batch: &mut Batch,
        scratch: &mut Scratch,
    ) -> Result<Vec<Trace>> {
        self.samples += 1;
        let (head, generation_at) = self.plan_batch(batch, scratch);
        batch.fill(self.pid);
        let batch = &*batch;
        self.compare_ahead_codes(batch, scratch);
        let generation = generation_at
            .and_then(|(at, len)| batch.get(at, len))
            .map(|bytes| usize_at(bytes, 0) as u64);
        let before = std::mem::replace(&mut self.generation, generation);
        let calls = MemoryReads::of_this_thread().calls;
        let Some(first) = batch.get(head.0, 8) else {
            bail!("failed to read the interpreter's list of threads");
        };
        let gil = self.gil.as_ref().ok().copied();
        let gil_read = gil.and_then(|gil| gil.parse(|(at, len)| batch.get(at, len)));
        self.walk_threads(usize_at(first, 0), batch, scratch, gil, gil_read)?;
        // Frames read after the count (outside the batch) may run code freed since: their
        // sample checks every header.
        let standing = generation.filter(|_| MemoryReads::of_this_thread().calls == calls);
        self.check_codes(batch, scratch, standing, before)?;
        self.ahead_frames.seen(&scratch.outside, self.samples);
        let traces = self.traces(&run_state, scratch, gil, gil_read);
        self.forget_folds_of_gone_threads(&scratch.threads);
        if let RunState::Read = run_state {
            self.states.keep(traces.iter().map(|t| t.tid as i32));
        }
        Ok(traces)
    }

    /// Fills `batch`'s pieces with what recent samples read, to read again in one batch:
    /// thread states, the current frame and the top of each data stack, frames outside them,
    /// code object headers (most are still what this sample needs), and the GIL's and the
    /// collector's state. Returns the pieces of the interpreter's head of its list of thread
    /// states and of its count of code objects freed (3.14+).
    fn plan_batch(
        &self,
        batch: &mut Batch,
        scratch: &mut Scratch,
    ) -> ((usize, usize), Option<(usize, usize)>) {
        let layout = &self.layout;
        let head = (self.interpreter + layout.interp_threads_head, 8);
        let pieces = &mut batch.pieces;
        pieces.clear();
        pieces.push(head);
        // the GIL's holder and the GC flag, read with the thread states
        if let Ok(gil) = &self.gil {
            pieces.extend(gil.pieces().into_iter().filter(|piece| piece.1 > 0));
        }
        // The code objects recent samples checked: they do not change while they are read.
        // From 3.14 those checked while the count of code objects freed stood where it stands
        // now are not read: unless it moved, their headers are not needed (`check_codes`).
        let ahead_codes = &mut scratch.ahead_codes;
        ahead_codes.clear();
        ahead_codes.extend(
            self.checked
                .addresses()
                .filter(|&c| needs_check(&self.codes, c, self.generation)),
        );
        pieces.extend(
            ahead_codes
                .iter()
                .map(|&c| (c + layout.code_first, layout.code_size)),
        );
        // While code objects are freed and made again (up to 3.13), their names' marks too.
        if self.churning() {
            pieces.extend(
                self.checked
                    .addresses()
                    .filter_map(|c| self.codes.get(&c))
                    .flat_map(|code| code.marks_at),
            );
        }
        // Each thread state, then what it points to, then frames outside the data stacks: the
        // target runs on as they are read, so each piece is read right after what leads to it
        // (a coroutine's frame read before the stack that calls it may be one not resumed yet).
        // A piece past the end of a stack's mapping ends the call; the rest is read by another.
        for &thread in &self.ahead_threads {
            pieces.push((thread, layout.tstate_size));
            if let Some(stack) = self.ahead_stacks.get(&thread) {
                if stack.current != 0 {
                    pieces.push((stack.current, 8));
                }
                pieces.push((stack.start, stack.end - stack.start));
            }
        }
        pieces.extend(
            self.ahead_frames
                .addresses()
                .map(|f| (f + layout.frame_first, layout.frame_size)),
        );
        // The count of code objects freed comes last: read after every frame of the batch.
        let generation_at = layout
            .interp_code_generation
            .map(|at| (self.interpreter + at, 8));
        pieces.extend(generation_at);
        (head, generation_at)
    }

    /// Up to 3.13, takes the headers the batch read ahead as they were (not while code
    /// objects are freed and made again: then their names' marks are compared too).
    fn compare_ahead_codes(&mut self, batch: &Batch, scratch: &Scratch) {
        if self.layout.interp_code_generation.is_none() && !self.churning() {
            let headers = batch.run(1..1 + scratch.ahead_codes.len());
            self.compared
                .begin(&scratch.ahead_codes, headers, self.layout.code_size);
        } else {
            self.compared.forget();
        }
    }

    /// Walks every thread of the interpreter's list from the thread state at `thread`: its
    /// frames onto `scratch.frames` and the thread onto `scratch.threads`, with its role in
    /// the GIL; the thread states and stacks met are read ahead by the next sample.
    fn walk_threads(
        &mut self,
        mut thread: usize,
        batch: &Batch,
        scratch: &mut Scratch,
        gil: Option<Gil>,
        gil_read: Option<GilRead>,
    ) -> Result<()> {
        let Scratch {
            threads,
            frames,
            outside,
            tstate,
            ..
        } = scratch;
        threads.clear();
        frames.clear();
        outside.clear();
        self.ahead_threads.clear();
        std::mem::swap(&mut self.ahead_stacks, &mut self.previous_stacks);
        self.ahead_stacks.clear();
        let tstate_size = self.layout.tstate_size;
        while thread != 0 {
            if threads.len() >= MAX_THREADS {
                bail!("more than {MAX_THREADS} Python threads: a torn read");
            }
            let bytes = match batch.get(thread, tstate_size) {
                Some(bytes) => bytes,
                None => {
                    tstate.resize(tstate_size, 0);
                    read(self.pid, thread, tstate)?;
                    &tstate[..]
                }
            };
            self.ahead_threads.push(thread);
            let native = usize_at(bytes, self.layout.tstate_native_thread_id) as u64;
            let tid = if native != 0 {
                native
            } else {
                usize_at(bytes, self.layout.tstate_thread_id) as u64
            };
            let next = usize_at(bytes, self.layout.tstate_next);
            let ahead = self.previous_stacks.remove(&thread);
            let start = frames.len();
            self.frames(thread, ahead, bytes, batch, frames, outside)?;
            let role = gil_role(thread, bytes, gil, gil_read);
            let context_ver = usize_at(bytes, self.layout.tstate_context_ver) as u64;
            threads.push((tid, start..frames.len(), role, context_ver));
            thread = next;
        }
        self.previous_stacks.clear();
        self.unchanged.retain(&self.ahead_threads);
        Ok(())
    }

    /// Each walked thread's trace: its folded stack, whether it is on CPU (`running`), and
    /// its role in the GIL, a wait for it told from its futex where the thread states do not
    /// say (`waits_for_gil`).
    fn traces(
        &mut self,
        run_state: &RunState<'_>,
        scratch: &Scratch,
        gil: Option<Gil>,
        gil_read: Option<GilRead>,
    ) -> Vec<Trace> {
        let mut traces = Vec::with_capacity(scratch.threads.len());
        self.guessed = false;
        // Another thread holds the GIL: an off-CPU thread may wait for it, which its futex
        // tells (3.15 says so in its own flags).
        let contended = gil_read.is_some_and(|read| read.holder != 0)
            && gil.is_some_and(|gil| gil.flags.is_none());
        let read_now = matches!(run_state, RunState::Read);
        if read_now {
            self.states.tick();
        }
        for (tid, range, role, context_ver) in &scratch.threads {
            let (tid, mut role) = (*tid, *role);
            let frames = &scratch.frames[range.clone()];
            let (stack, wait) = self.folded(tid, frames);
            // A lock's wait is idle, unread; a poll is read as any frame is: a loop woken from
            // it is on a CPU, or runnable and waiting for one (a throttled container).
            let running = self.running(tid, wait == Wait::Lock, run_state);
            self.guessed |= running.is_none();
            // a poll too (a loop back from it waits for the GIL in its frame), not a lock's wait
            if let (true, GilRole::None, Some(gil), false) =
                (contended, role, gil, wait == Wait::Lock)
            {
                if self.waits_for_gil(tid, running, &gil) {
                    role = GilRole::Waits;
                }
            }
            // A thread this sidecar cannot see counts as running, as in py-spy.
            let active = running.unwrap_or(true) && role != GilRole::Waits;
            let cpu_wait =
                read_now && active && running.is_some() && self.states.waits_for_cpu(tid as i32);
            traces.push(Trace {
                tid,
                active,
                cpu_wait,
                stack,
                gil: role,
                gc: role == GilRole::Holds && gil_read.is_some_and(|read| read.collecting),
                contexts: *context_ver,
            });
        }
        traces
    }

    /// Whether the thread `tid` is on CPU, as `run_state` tells or its /proc file says; None
    /// when it cannot be read. A thread in a threading primitive's wait (`in_lock`) is idle
    /// whatever the OS says: its /proc file is not read.
    fn running(&mut self, tid: u64, in_lock: bool, run_state: &RunState<'_>) -> Option<bool> {
        match run_state {
            _ if in_lock => Some(false),
            // a thread born since the threads were stopped ran on: its state is read now
            RunState::Known(known) if known.contains_key(&(tid as i32)) => {
                known.get(&(tid as i32)).copied()
            }
            RunState::Read | RunState::Known(_) => {
                self.state_reads += 1;
                self.states.running(tid as i32)
            }
        }
    }

    /// Whether the thread `tid`, found `running` or not (never in a lock's wait: its state was
    /// read), waits for the GIL another thread holds: off CPU, on the futex of `gil`.
    fn waits_for_gil(&mut self, tid: u64, running: Option<bool>, gil: &Gil) -> bool {
        running == Some(false)
            && matches!(self.states.futex(tid as i32), Futex::At(address) if gil.is_gil_futex(address))
    }

    /// Forgets the last folds of threads the sample did not meet (they ended).
    fn forget_folds_of_gone_threads(&mut self, threads: &[RawThread]) {
        if self.last_folds.len() > threads.len() {
            self.last_folds
                .retain(|tid, _| threads.iter().any(|(t, _, _, _)| t == tid));
        }
    }

    /// Makes sure every code object of the sample's frames is cached and still the one
    /// cached: one batched read of all their headers, then a full read of the new or changed
    /// ones.
    ///
    /// From 3.14 the interpreter counts the code objects it frees (`_code_object_generation`,
    /// as CPython's own remote profiler uses it). `standing` is the count read after all of
    /// this sample's frames, `before` one read before any of its reads. A code checked while
    /// the count was what it still is now (`Code::checked` equal to `standing`) cannot have
    /// been freed since, so its memory is still that code: its header is not needed. The
    /// codes checked now are marked with `before`, which no free after it can equal.
    fn check_codes(
        &mut self,
        batch: &Batch,
        scratch: &mut Scratch,
        standing: Option<u64>,
        before: Option<u64>,
    ) -> Result<()> {
        // Bounded by bytes; cleared before a sample, never halfway through one.
        if self.code_bytes.over(0) {
            self.codes.clear();
            self.code_bytes.clear();
            self.forget_stacks();
            self.compared.forget();
        }
        let (first, size) = (self.layout.code_first, self.layout.code_size);
        let Scratch {
            frames,
            codes: all,
            checks: codes,
            missing,
            frame_codes,
            ..
        } = scratch;
        // the same code objects as the last sample's frames (threads that wait, or run on in
        // the same functions): the same sorted list
        if !frames.iter().map(|f| f.0).eq(frame_codes.iter().copied()) {
            frame_codes.clear();
            frame_codes.extend(frames.iter().map(|f| f.0));
            all.clone_from(frame_codes);
            all.sort_unstable();
            all.dedup();
        }
        codes.clear();
        codes.extend(
            all.iter()
                .copied()
                .filter(|&code| needs_check(&self.codes, code, standing)),
        );
        // Headers the batch holds are compared where they lie (with their names' marks while
        // code objects are freed and made again); the others are read at once.
        let churning = self.churning();
        missing.clear();
        for &code in codes.iter() {
            // read ahead as the last sample found it, the cached code's
            if self.compared.unchanged(code) {
                continue;
            }
            let marks = match churning {
                true => self.marks_in(batch, code),
                false => Marks::Unchecked,
            };
            match batch.get(code + first, size) {
                Some(header) if !matches!(marks, Marks::Unreadable) => {
                    self.settle(code, header, marks, before)?;
                    self.compared.settled(code);
                }
                _ => missing.push(code),
            }
        }
        if !missing.is_empty() {
            let mut pieces: Vec<(usize, usize)> = Vec::with_capacity(missing.len() * 3);
            for &code in missing.iter() {
                pieces.push((code + first, size));
                if let Some(cached) = self.codes.get(&code).filter(|_| churning) {
                    pieces.extend(cached.marks_at);
                }
            }
            let read = Batch::read(self.pid, &pieces);
            for &code in missing.iter() {
                let Some(header) = read.get(code + first, size) else {
                    bail!("failed to read a code object: a torn read");
                };
                let marks = match churning {
                    true => self.marks_in(&read, code),
                    false => Marks::Unchecked,
                };
                self.settle(code, header, marks, before)?;
            }
        }
        self.checked.seen(all, self.samples);
        Ok(())
    }

    /// A thread's folded stack and whether its innermost frame of the program (3.13+ entry
    /// trampolines are not) is a known wait. A thread whose frames are those of its last
    /// sample, no cached code object replaced since, has the stack it had: it is not folded
    /// again (a thread that waits, as most do, has the same frames sample after sample).
    fn folded(&mut self, tid: u64, frames: &[RawFrame]) -> (Option<Stack>, Wait) {
        if let Some(last) = self.last_folds.get(&tid) {
            if last.frames == frames {
                return (last.stack.clone(), last.waits);
            }
        }
        let waits = frames
            .iter()
            .filter_map(|(code, _)| self.codes.get(code))
            .find(|code| !code.hidden)
            .map_or(Wait::No, |code| code.waits);
        let stack = self.fold(frames);
        let last = self.last_folds.entry(tid).or_default();
        last.frames.clear();
        last.frames.extend_from_slice(frames);
        last.stack.clone_from(&stack);
        last.waits = waits;
        (stack, waits)
    }

    /// Whether code objects are being freed and made again, so that a cached one's header
    /// alone does not tell it is still that code: up to 3.13 (from 3.14 the interpreter's count
    /// of code objects freed tells), for `CHURN_SAMPLES` after a cached code object's header
    /// was found changed. The same function compiled again and again is made the same way,
    /// its strings taking the freed ones' addresses: 3.11 showed a function named after the
    /// one that lay there ten compilations before.
    fn churning(&self) -> bool {
        self.layout.interp_code_generation.is_none() && self.samples <= self.churn_until
    }

    /// The marks of the cached code object at `address`'s names, as `read` holds them; none
    /// are needed of a code object not cached (it is loaded).
    fn marks_in<'b>(&self, read: &'b Batch, address: usize) -> Marks<'b> {
        let Some(code) = self.codes.get(&address) else {
            return Marks::Unchecked;
        };
        let [(name, name_len), (file, file_len)] = code.marks_at;
        match (read.get(name, name_len), read.get(file, file_len)) {
            (Some(name), Some(file)) => Marks::Read(name, file),
            _ => Marks::Unreadable,
        }
    }

    /// Keeps the cached code object at `address` when its `header` (and, given them, its
    /// names' `marks`) are as cached, else loads it; either way marks it
    /// checked at `before`.
    fn settle(
        &mut self,
        address: usize,
        header: &[u8],
        marks: Marks<'_>,
        before: Option<u64>,
    ) -> Result<()> {
        if let Some(code) = self.codes.get_mut(&address) {
            let same_marks = match marks {
                Marks::Unchecked => true,
                Marks::Read(name, file) => {
                    let (at_name, at_file) = code.marks.split_at(code.marks_at[0].1);
                    at_name == name && at_file == file
                }
                Marks::Unreadable => false,
            };
            if code.header[..] == *header && same_marks {
                code.checked = before;
                return Ok(());
            }
            self.churn_until = self.samples + CHURN_SAMPLES;
        }
        let mut code = Code::load(self.pid, &self.layout, address, header, &mut self.files)?;
        code.checked = before;
        if let Some(old) = self.codes.remove(&address) {
            self.code_bytes.sub(old.cost());
            // stacks folded with the old code name it by this address
            self.forget_stacks();
        }
        self.code_bytes.add(code.cost());
        self.codes.insert(address, code);
        Ok(())
    }

    /// The folded stack of frames given innermost first, without the frames of code that is
    /// not the program's (3.13+ entry trampolines); None when no frame is left.
    ///
    /// The cache of folded stacks is keyed by the frames as walked (code object addresses and
    /// offsets): it is emptied whenever a cached code object is replaced or the cache of code
    /// objects is, so an address in a key always names the code it was folded with.
    fn fold(&mut self, frames: &[RawFrame]) -> Option<Stack> {
        if let Some(stack) = self.stacks.get(frames) {
            return stack.clone();
        }
        let mut text = String::new();
        let mut all_cached = true;
        for &(code, offset) in frames.iter().rev() {
            let code = self.codes.get_mut(&code);
            if code.as_ref().is_some_and(|c| c.hidden) {
                continue;
            }
            if !text.is_empty() {
                text.push(';');
            }
            match code {
                Some(code) => text.push_str(&code.frame(offset)),
                None => {
                    all_cached = false;
                    text.push_str("? (?:0)");
                }
            }
        }
        let stack = (!text.is_empty()).then(|| Stack::new(Arc::from(text)));
        // (every code object of a sample's frames is cached by now; a stack folded without
        // one is not kept)
        if all_cached {
            let text_len = stack.as_ref().map_or(0, |s| s.text().len());
            let cost = text_len + frames.len() * 16 + 64;
            if self.stack_bytes.over(cost) {
                self.forget_stacks();
            }
            self.stack_bytes.add(cost);
            self.stacks.insert(frames.to_vec(), stack.clone());
        }
        stack
    }

    /// Empties the cache of folded stacks, and each thread's last (`folded`).
    fn forget_stacks(&mut self) {
        self.stacks.clear();
        self.stack_bytes.clear();
        self.last_folds.clear();
    }
}

/// The role in the GIL of the thread whose state at `thread` reads `bytes`: 3.15's own flags
/// (`gil`'s), else whether the GIL's holder as read (`gil_read`) is this thread.
fn gil_role(thread: usize, bytes: &[u8], gil: Option<Gil>, gil_read: Option<GilRead>) -> GilRole {
    match (gil.and_then(|g| g.flags), gil_read) {
        // 3.15: the thread's own flags. A request waits only for a GIL another thread holds:
        // one taken uncontended (a loop back from its poll with no other thread) is requested
        // for an instant, and is no wait.
        (Some((holds, requested)), read) if bytes.len() >= holds.max(requested) + 4 => {
            let held_by_another = read.is_none_or(|r| r.holder != 0 && r.holder != thread);
            match (u32_at(bytes, holds), u32_at(bytes, requested)) {
                (1, _) => GilRole::Holds,
                (0, 1) if held_by_another => GilRole::Waits,
                _ => GilRole::None,
            }
        }
        (_, Some(read)) if read.holder == thread => GilRole::Holds,
        _ => GilRole::None,
    }
}

/// Whether the header of the code object at `address` is read to check it: not when it was
/// checked while the count of code objects freed stood at `standing` (3.14+), where it stands.
fn needs_check(
    codes: &HashMap<usize, Code, FxBuildHasher>,
    address: usize,
    standing: Option<u64>,
) -> bool {
    standing.is_none()
        || codes
            .get(&address)
            .is_none_or(|code| code.checked != standing)
}

/// The layout of the CPython 3.11–3.15 process `spy` attached to: from the table, or from the
/// target's own `_Py_DebugOffsets`.
pub fn layout_of(spy: &PythonSpy) -> Result<Layout> {
    match Layout::table(spy.version.minor) {
        Some(layout) => Ok(layout),
        None => debug_layout(spy),
    }
}

/// Where a reader's GIL states come from, for `Stats::gil`: the thread states' own flags
/// (3.15), or the holder from the GIL and the waiters from their futex; what is missing, why
/// (`gil_of`'s error, said as it is).
pub fn gil_source(gil: &std::result::Result<Gil, String>, waits_read: bool) -> &str {
    match gil {
        Ok(gil) if gil.flags.is_some() => "the thread states' flags",
        Ok(_) if waits_read => "the GIL's holder, and the waiters' futex in /proc",
        Ok(_) => {
            "the GIL's holder only: a thread's /proc syscall file could not be read, \
             so waits for the GIL read as idle or blocked"
        }
        Err(why) => why,
    }
}

/// The GIL of the target `spy` attached to, when `asked`; else why not, as `Stats::gil` says
/// it ("not read (...)").
pub fn gil_of(spy: &PythonSpy, asked: bool) -> std::result::Result<Gil, String> {
    match asked {
        true => locate_gil(spy).map_err(|err| format!("not read ({err:#})")),
        false => Err("not read (not asked for)".to_string()),
    }
}

/// Where the target `spy` attached to keeps its GIL and GC state (CPython 3.8–3.15), checked;
/// else why it cannot be read.
pub fn locate_gil(spy: &PythonSpy) -> Result<Gil> {
    let minor = spy.version.minor;
    if spy.version.major != 3 || !(8..=15).contains(&minor) {
        bail!("Python {}", spy.version);
    }
    let interpreter = spy.addresses.interpreter_address;
    if interpreter == 0 {
        bail!("no interpreter found");
    }
    let table = GilTable::of(minor);
    let needs_runtime = table.is_none_or(|t| matches!(t.gil, At::Runtime(_)));
    let runtime = if needs_runtime {
        let info = py_spy::python_process_info::PythonProcessInfo::new(&spy.process)?;
        match info.get_symbol("_PyRuntime") {
            Some(&runtime) => runtime as usize,
            None => bail!("no _PyRuntime symbol in the interpreter's binary"),
        }
    } else {
        0
    };
    let table = match table {
        Some(table) => table,
        None => GilTable::read_debug_offsets(spy.pid, runtime, minor)?,
    };
    Gil::locate(spy.pid, &table, runtime, interpreter)
}

/// The layout of a 3.13+ target from its own `_Py_DebugOffsets`, at the start of the
/// `_PyRuntime` its binary names; the runtime found must lead to the interpreter py-spy found.
fn debug_layout(spy: &PythonSpy) -> Result<Layout> {
    let info = py_spy::python_process_info::PythonProcessInfo::new(&spy.process)?;
    let Some(&runtime) = info.get_symbol("_PyRuntime") else {
        bail!("no _PyRuntime symbol in the interpreter's binary");
    };
    let runtime = runtime as usize;
    let minor = spy.version.minor;
    let layout = Layout::from_debug_offsets(spy.pid, runtime, minor)?;
    let mut head = [0u8; 8];
    read(
        spy.pid,
        runtime + Layout::interpreters_head(spy.pid, runtime, minor)?,
        &mut head,
    )?;
    if usize_at(&head, 0) != spy.addresses.interpreter_address {
        bail!("the debug offsets lead to another interpreter than the one found");
    }
    Ok(layout)
}
