//! Stacks of a CPython 3.11 process read straight from its memory, with few system calls.
//!
//! A general reader reads every frame's code object, both names and the line table on every
//! sample (about eight reads per frame), and every thread's /proc state inside the read. This
//! walker keeps what does not change between samples: code objects with their names, files and
//! line tables, formatted frames and folded stacks. Per sample, one batched read of what recent
//! samples found (thread states, the top of each data stack, frames outside them, the headers
//! of the cached code objects, checked every sample) usually holds the whole stack; anything
//! new costs one more read. The run state is read for Python threads outside a known wait only,
//! through /proc files it keeps open.
//!
//! py-spy still attaches (it finds the interpreter and its version) and stays the reader for
//! other Python versions; the sampler compares this walker with it before trusting it.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use py_spy::PythonSpy;

use crate::fxhash::FxBuild;
use crate::sampler::ThreadStates;

/// Offsets in CPython 3.11 on 64-bit Linux, from its `Include/internal` headers.
mod layout {
    pub const INTERP_THREADS_HEAD: usize = 16;
    pub const TSTATE_NEXT: usize = 8;
    pub const TSTATE_CFRAME: usize = 56;
    pub const TSTATE_THREAD_ID: usize = 152;
    pub const TSTATE_NATIVE_THREAD_ID: usize = 160;
    pub const TSTATE_DATASTACK_CHUNK: usize = 296;
    pub const TSTATE_DATASTACK_TOP: usize = 304;
    pub const TSTATE_SIZE: usize = 320;
    /// `_PyStackChunk`: frames start after previous, size and top.
    pub const CHUNK_DATA: usize = 24;
    pub const CFRAME_CURRENT_FRAME: usize = 8;
    /// `_PyInterpreterFrame`: f_code at 32, previous at 48, prev_instr at 56.
    pub const FRAME_FIRST: usize = 32;
    pub const FRAME_SIZE: usize = 32;
    pub const FRAME_CODE: usize = 0;
    pub const FRAME_PREVIOUS: usize = 16;
    pub const FRAME_PREV_INSTR: usize = 24;
    /// `PyCodeObject` from co_firstlineno (72) to the end of co_linetable (144): fields that
    /// never change during a code object's life, so equal bytes mean the same code.
    pub const CODE_FIRST: usize = 72;
    pub const CODE_SIZE: usize = 72;
    pub const CODE_FIRSTLINENO: usize = 0;
    pub const CODE_FILENAME: usize = 40;
    pub const CODE_NAME: usize = 48;
    pub const CODE_QUALNAME: usize = 56;
    pub const CODE_LINETABLE: usize = 64;
    pub const CODE_ADAPTIVE: usize = 184;
    /// `PyASCIIObject`: length at 16, state bit field at 32; data after 48 bytes (ASCII) or
    /// 72 (`PyCompactUnicodeObject`).
    pub const STR_LENGTH: usize = 16;
    pub const STR_STATE: usize = 32;
    pub const STR_HEADER: usize = 40;
    pub const STR_ASCII_DATA: usize = 48;
    pub const STR_COMPACT_DATA: usize = 72;
    pub const BYTES_SIZE: usize = 16;
    pub const BYTES_DATA: usize = 32;
}

/// Sanity bounds against torn or garbage reads.
const MAX_THREADS: usize = 4096;
const MAX_DEPTH: usize = 4096;
const MAX_STRING: usize = 4096;
const MAX_LINETABLE: usize = 1 << 20;
/// What the code cache may hold before it is cleared (bytes, about).
const CODE_CACHE_BYTES: usize = 16 << 20;
const STACK_CACHE_BYTES: usize = 32 << 20;
/// process_vm_readv takes at most this many remote pieces per call.
const IOV_MAX: usize = 1024;
/// How much of the top of a thread's data stack (where the frames of plain calls live) is
/// read in one piece with the current frame's address.
const DATASTACK_READ: usize = 16 << 10;
/// At most this many frames and code objects are read ahead per sample.
const READ_AHEAD_MAX: usize = 8192;
/// Code objects and frames outside the data stacks are read ahead while some sample of the
/// last this many met them: a stack that alternates between a few leaves finds all of their
/// code headers in the batch instead of costing a second read every other sample.
const RECENT_SAMPLES: u64 = 64;
/// Beyond what the last sample met, at most this many of those addresses are read ahead.
const RECENT_EXTRA: usize = 16;
/// The top of a data stack read ahead reaches this far past the highest top recent samples
/// saw, so that a stack a few frames deeper than before is still inside it.
const STACK_SLACK: usize = 256;

/// A thread as read: OS thread id, holds the GIL, (code object, instruction offset) of each
/// frame innermost first.
type RawThread = (u64, bool, Vec<(usize, i64)>);

/// One Python thread's stack in one sample.
#[derive(Debug, Clone)]
pub struct Trace {
    /// OS thread id as the interpreter knows it.
    pub tid: u64,
    pub owns_gil: bool,
    /// On CPU: the OS says running and the innermost frame is not a known wait.
    pub active: bool,
    /// Folded, outermost frame first; None when the thread runs no Python code.
    pub stack: Option<Arc<str>>,
}

/// A code object as first read, with its formatted frames by instruction offset.
struct Code {
    serial: u64,
    header: [u8; layout::CODE_SIZE],
    name: String,
    /// The filename as shown: shortened to its package path like py-spy does.
    shown: String,
    first_line: i32,
    table: Vec<u8>,
    /// The function is a known wait (`threading.wait`, `selectors.select`, ...).
    waits: bool,
    frames: HashMap<i64, Arc<str>, FxBuild>,
}

/// Reads the stacks of one CPython 3.11 process.
pub struct Walker {
    pid: i32,
    interpreter: usize,
    gil_holder: usize,
    dockerized: bool,
    codes: HashMap<usize, Code, FxBuild>,
    code_bytes: usize,
    serial: u64,
    stacks: HashMap<Vec<(u64, i64)>, Arc<str>, FxBuild>,
    stack_bytes: usize,
    short_files: HashMap<String, String>,
    states: ThreadStates,
    /// Code objects recent samples checked; the next one reads their headers ahead.
    checked: Recent,
    /// The current frame's address and the top of a thread's data stack, as last read.
    stack: Vec<u8>,
    /// Thread states of the previous sample and frames outside the data stacks of recent
    /// ones: read ahead, with the code headers in `checked`, in one batch at the start of
    /// the next.
    ahead_threads: Vec<usize>,
    ahead_frames: Recent,
    /// By thread state: where the thread's current frame and the top of its data stack were,
    /// read ahead in the next batch.
    ahead_stacks: HashMap<usize, AheadStack, FxBuild>,
    /// Samples read so far.
    samples: u64,
    /// What reading them took: system calls, remote pieces and bytes.
    reads: MemoryReads,
}

/// Reads of the target's memory: `process_vm_readv` calls, the remote pieces they named, and
/// the bytes they copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryReads {
    pub calls: u64,
    pub pieces: u64,
    pub bytes: u64,
}

thread_local! {
    /// Every read of this thread so far; a walker counts its own as the difference across
    /// one of its samples (the shared clock reads several targets on one thread).
    static READS: Cell<MemoryReads> = const { Cell::new(MemoryReads { calls: 0, pieces: 0, bytes: 0 }) };
}

/// The run state a sample uses for each thread.
pub enum RunState<'a> {
    /// Read now from /proc (the threads run).
    Read,
    /// Read before the threads were stopped.
    Known(&'a HashMap<i32, bool>),
}

impl Walker {
    /// A walker for the process `spy` attached to, when it runs CPython 3.11 on a 64-bit
    /// little-endian machine; None otherwise.
    pub fn new(spy: &PythonSpy) -> Option<Walker> {
        let supported = cfg!(all(target_os = "linux", target_pointer_width = "64"))
            && cfg!(target_endian = "little")
            && spy.version.major == 3
            && spy.version.minor == 11;
        if !supported || spy.addresses.interpreter_address == 0 {
            return None;
        }
        Some(Walker {
            pid: spy.pid,
            interpreter: spy.addresses.interpreter_address,
            gil_holder: spy.addresses.threadstate_address,
            dockerized: spy.dockerized,
            codes: HashMap::default(),
            code_bytes: 0,
            serial: 0,
            stacks: HashMap::default(),
            stack_bytes: 0,
            short_files: HashMap::new(),
            states: ThreadStates::new(spy.pid),
            checked: Recent::default(),
            stack: Vec::new(),
            ahead_threads: Vec::new(),
            ahead_frames: Recent::default(),
            ahead_stacks: HashMap::default(),
            samples: 0,
            reads: MemoryReads::default(),
        })
    }

    /// Every Python thread's stack, innermost frame last in the folded text.
    pub fn read(&mut self, run_state: RunState<'_>) -> Result<Vec<Trace>> {
        let before = READS.get();
        let result = self.read_all(run_state);
        let after = READS.get();
        self.reads.calls += after.calls - before.calls;
        self.reads.pieces += after.pieces - before.pieces;
        self.reads.bytes += after.bytes - before.bytes;
        result
    }

    /// The target's memory reads of every sample so far.
    pub fn reads(&self) -> MemoryReads {
        self.reads
    }

    fn read_all(&mut self, run_state: RunState<'_>) -> Result<Vec<Trace>> {
        // What recent samples read, read again in one batch: thread states, the current frame
        // and the top of each data stack, frames outside them, code object headers. Most are
        // still what this sample needs.
        self.samples += 1;
        let head = (self.interpreter + layout::INTERP_THREADS_HEAD, 8);
        let mut pieces = vec![head];
        if self.gil_holder != 0 {
            pieces.push((self.gil_holder, 8));
        }
        pieces.extend(self.ahead_threads.iter().map(|&t| (t, layout::TSTATE_SIZE)));
        pieces.extend(
            self.ahead_frames
                .addresses()
                .map(|f| (f + layout::FRAME_FIRST, layout::FRAME_SIZE)),
        );
        // the code objects recent samples checked
        pieces.extend(
            self.checked
                .addresses()
                .map(|c| (c + layout::CODE_FIRST, layout::CODE_SIZE)),
        );
        // last, as a piece past the end of a stack's mapping ends the call
        for stack in self.ahead_stacks.values() {
            pieces.push((stack.cframe + layout::CFRAME_CURRENT_FRAME, 8));
            pieces.push((stack.start, stack.end - stack.start));
        }
        let batch = Batch::read(self.pid, &pieces);
        let Some(first) = batch.get(head.0, 8) else {
            bail!("failed to read the interpreter's list of threads");
        };
        let mut thread = usize_at(first, 0);
        let gil = if self.gil_holder != 0 {
            match batch.get(self.gil_holder, 8) {
                Some(holder) => usize_at(holder, 0),
                None => bail!("failed to read which thread holds the GIL"),
            }
        } else {
            0
        };

        let mut threads: Vec<RawThread> = Vec::new();
        let mut thread_addresses = Vec::new();
        let mut outside = Vec::new();
        let mut tstate = [0u8; layout::TSTATE_SIZE];
        let mut previous_stacks = std::mem::take(&mut self.ahead_stacks);
        while thread != 0 {
            if threads.len() >= MAX_THREADS {
                bail!("more than {MAX_THREADS} Python threads: a torn read");
            }
            match batch.get(thread, layout::TSTATE_SIZE) {
                Some(bytes) => tstate.copy_from_slice(bytes),
                None => read(self.pid, thread, &mut tstate)?,
            }
            thread_addresses.push(thread);
            let native = usize_at(&tstate, layout::TSTATE_NATIVE_THREAD_ID) as u64;
            let tid = if native != 0 {
                native
            } else {
                usize_at(&tstate, layout::TSTATE_THREAD_ID) as u64
            };
            let ahead = previous_stacks.remove(&thread);
            let frames = self.frames(thread, ahead, &tstate, &batch, &mut outside)?;
            threads.push((tid, thread == gil, frames));
            thread = usize_at(&tstate, layout::TSTATE_NEXT);
        }

        self.check_codes(&threads, &batch)?;
        self.ahead_threads = thread_addresses;
        self.ahead_frames.seen(&outside, self.samples);
        let mut traces = Vec::with_capacity(threads.len());
        for (tid, owns_gil, frames) in threads {
            let waits = frames
                .first()
                .and_then(|(code, _)| self.codes.get(code))
                .is_some_and(|code| code.waits);
            // A thread in a known wait is idle whatever the OS says: its /proc file is not read.
            let running = match &run_state {
                _ if waits => Some(false),
                RunState::Read => self.states.running(tid as i32),
                RunState::Known(known) => known.get(&(tid as i32)).copied(),
            };
            traces.push(Trace {
                tid,
                owns_gil,
                // A thread this sidecar cannot see counts as running, as in py-spy.
                active: running.unwrap_or(true),
                stack: self.fold(&frames),
            });
        }
        if let RunState::Read = run_state {
            let alive: Vec<i32> = traces.iter().map(|t| t.tid as i32).collect();
            self.states.keep(&alive);
        }
        Ok(traces)
    }

    /// (code object, instruction offset) of each frame, innermost first.
    ///
    /// Frames of plain calls lie at the top of the thread's data stack: that part and the
    /// current frame's address come from the batch when they lie where recent samples found
    /// them, else from one read. Only frames elsewhere (coroutines and generators keep theirs
    /// inside the object) come from the batch's frames read ahead, or cost a read each; their
    /// addresses go to `outside` for the next sample's batch.
    fn frames(
        &mut self,
        thread: usize,
        ahead: Option<AheadStack>,
        tstate: &[u8],
        batch: &Batch,
        outside: &mut Vec<usize>,
    ) -> Result<Vec<(usize, i64)>> {
        let mut out = Vec::new();
        let cframe = usize_at(tstate, layout::TSTATE_CFRAME);
        if cframe == 0 {
            return Ok(out);
        }
        let chunk = usize_at(tstate, layout::TSTATE_DATASTACK_CHUNK);
        let top = usize_at(tstate, layout::TSTATE_DATASTACK_TOP);
        let base = chunk + layout::CHUNK_DATA;
        let stack_start = if chunk != 0 && top > base && top - base <= 64 << 20 {
            base.max(top - DATASTACK_READ.min(top - base))
        } else {
            top
        };
        let stack_len = top.saturating_sub(stack_start);
        self.stack.resize(8 + stack_len, 0);
        let read_ahead = ahead
            .filter(|a| a.cframe == cframe && a.start <= stack_start && top <= a.end)
            .and_then(|a| {
                let current = batch.get(cframe + layout::CFRAME_CURRENT_FRAME, 8)?;
                let stack = batch.get(a.start, a.end - a.start)?;
                Some((current, &stack[stack_start - a.start..top - a.start]))
            });
        match read_ahead {
            Some((current, stack)) => {
                self.stack[..8].copy_from_slice(current);
                self.stack[8..].copy_from_slice(stack);
            }
            None => {
                let pieces = [
                    (cframe + layout::CFRAME_CURRENT_FRAME, 8),
                    (stack_start, stack_len),
                ];
                read_pieces(
                    self.pid,
                    &pieces[..if stack_len > 0 { 2 } else { 1 }],
                    &mut self.stack,
                )?;
            }
        }
        if stack_len > 0 {
            let next = AheadStack::next(ahead, cframe, stack_start, top, self.samples);
            self.ahead_stacks.insert(thread, next);
        }
        self.walk(&mut out, stack_start, top, batch, outside)?;
        Ok(out)
    }

    /// Follows the frames from the current one (the first 8 bytes of `self.stack`, the data
    /// stack from `stack_start` to `top` after them), innermost first, into `out`.
    fn walk(
        &self,
        out: &mut Vec<(usize, i64)>,
        stack_start: usize,
        top: usize,
        batch: &Batch,
        outside: &mut Vec<usize>,
    ) -> Result<()> {
        let mut frame = usize_at(&self.stack, 0);
        let mut raw = [0u8; layout::FRAME_SIZE];
        while frame != 0 {
            if out.len() >= MAX_DEPTH {
                bail!("a stack deeper than {MAX_DEPTH} frames: a torn read");
            }
            let first = frame + layout::FRAME_FIRST;
            if first >= stack_start && first + layout::FRAME_SIZE <= top {
                let at = 8 + first - stack_start;
                raw.copy_from_slice(&self.stack[at..at + layout::FRAME_SIZE]);
            } else {
                match batch.get(first, layout::FRAME_SIZE) {
                    Some(bytes) => raw.copy_from_slice(bytes),
                    None => read(self.pid, first, &mut raw)?,
                }
                outside.push(frame);
            }
            let code = usize_at(&raw, layout::FRAME_CODE);
            let prev_instr = usize_at(&raw, layout::FRAME_PREV_INSTR);
            if code == 0 {
                bail!("a frame without code: a torn read");
            }
            let offset = prev_instr as i64 - (code + layout::CODE_ADAPTIVE) as i64;
            out.push((code, offset));
            frame = usize_at(&raw, layout::FRAME_PREVIOUS);
        }
        Ok(())
    }

    /// Makes sure every code object in `threads` is cached and still the one cached: one
    /// batched read of all their headers, then a full read of the new or changed ones.
    fn check_codes(&mut self, threads: &[RawThread], batch: &Batch) -> Result<()> {
        // Bounded by bytes; cleared before a sample, never halfway through one.
        if self.code_bytes > CODE_CACHE_BYTES {
            self.codes.clear();
            self.code_bytes = 0;
        }
        let mut codes = Vec::new();
        for (_, _, frames) in threads {
            for &(code, _) in frames {
                codes.push(code);
            }
        }
        codes.sort_unstable();
        codes.dedup();
        let mut headers = vec![0u8; codes.len() * layout::CODE_SIZE];
        let mut missing: Vec<usize> = Vec::new();
        for (i, &code) in codes.iter().enumerate() {
            match batch.get(code + layout::CODE_FIRST, layout::CODE_SIZE) {
                Some(bytes) => headers[i * layout::CODE_SIZE..(i + 1) * layout::CODE_SIZE]
                    .copy_from_slice(bytes),
                None => missing.push(i),
            }
        }
        if !missing.is_empty() {
            let pieces: Vec<(usize, usize)> = missing
                .iter()
                .map(|&i| (codes[i] + layout::CODE_FIRST, layout::CODE_SIZE))
                .collect();
            let read = Batch::read(self.pid, &pieces);
            for (&i, &(address, len)) in missing.iter().zip(&pieces) {
                let Some(bytes) = read.get(address, len) else {
                    bail!("failed to read a code object: a torn read");
                };
                headers[i * layout::CODE_SIZE..(i + 1) * layout::CODE_SIZE].copy_from_slice(bytes);
            }
        }
        for (i, &address) in codes.iter().enumerate() {
            let header = &headers[i * layout::CODE_SIZE..(i + 1) * layout::CODE_SIZE];
            let same = self
                .codes
                .get(&address)
                .is_some_and(|code| code.header[..] == *header);
            if !same {
                let code = self.load_code(header)?;
                if let Some(old) = self.codes.remove(&address) {
                    self.code_bytes = self.code_bytes.saturating_sub(code_cost(&old));
                }
                self.code_bytes += code_cost(&code);
                self.codes.insert(address, code);
            }
        }
        self.checked.seen(&codes, self.samples);
        Ok(())
    }

    fn load_code(&mut self, header: &[u8]) -> Result<Code> {
        let mut fixed = [0u8; layout::CODE_SIZE];
        fixed.copy_from_slice(header);
        let file = self.string(usize_at(header, layout::CODE_FILENAME))?;
        let name = match self.string(usize_at(header, layout::CODE_QUALNAME)) {
            Ok(name) => name,
            Err(_) => self.string(usize_at(header, layout::CODE_NAME))?,
        };
        let table = self.bytes(usize_at(header, layout::CODE_LINETABLE))?;
        let first_line = i32::from_le_bytes(
            header[layout::CODE_FIRSTLINENO..layout::CODE_FIRSTLINENO + 4]
                .try_into()
                .unwrap_or_default(),
        );
        let shown = self.short_file(&file);
        self.serial += 1;
        Ok(Code {
            serial: self.serial,
            header: fixed,
            waits: is_wait(&name, &file),
            name,
            shown,
            first_line,
            table,
            frames: HashMap::default(),
        })
    }

    /// The folded text of a stack given innermost first.
    fn fold(&mut self, frames: &[(usize, i64)]) -> Option<Arc<str>> {
        if frames.is_empty() {
            return None;
        }
        let mut key: Vec<(u64, i64)> = Vec::with_capacity(frames.len());
        for &(code, offset) in frames.iter().rev() {
            key.push((self.codes.get(&code).map_or(0, |c| c.serial), offset));
        }
        if let Some(stack) = self.stacks.get(&key) {
            return Some(stack.clone());
        }
        let mut text = String::new();
        for &(code, offset) in frames.iter().rev() {
            if !text.is_empty() {
                text.push(';');
            }
            match self.codes.get_mut(&code) {
                Some(code) => text.push_str(&code.frame(offset)),
                None => text.push_str("? (?:0)"),
            }
        }
        let stack: Arc<str> = Arc::from(text);
        let cost = stack.len() + key.len() * 16 + 64;
        if self.stack_bytes + cost > STACK_CACHE_BYTES {
            self.stacks.clear();
            self.stack_bytes = 0;
        }
        self.stack_bytes += cost;
        self.stacks.insert(key, stack.clone());
        Some(stack)
    }

    fn string(&self, address: usize) -> Result<String> {
        if address == 0 {
            bail!("a null string");
        }
        let mut head = [0u8; layout::STR_HEADER];
        read(self.pid, address, &mut head)?;
        let length = usize_at(&head, layout::STR_LENGTH);
        let state = u32::from_le_bytes(
            head[layout::STR_STATE..layout::STR_STATE + 4]
                .try_into()
                .unwrap_or_default(),
        );
        let kind = ((state >> 2) & 7) as usize;
        let compact = state & (1 << 5) != 0;
        let ascii = state & (1 << 6) != 0;
        if !compact || !matches!(kind, 1 | 2 | 4) || length > MAX_STRING {
            bail!("a string this reader does not handle (kind {kind}, length {length})");
        }
        let data = if ascii {
            layout::STR_ASCII_DATA
        } else {
            layout::STR_COMPACT_DATA
        };
        let mut raw = vec![0u8; length * kind];
        read(self.pid, address + data, &mut raw)?;
        let text = match kind {
            1 => raw.iter().map(|&b| char::from(b)).collect(),
            2 => raw
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .map(|u| char::from_u32(u32::from(u)).unwrap_or('\u{fffd}'))
                .collect(),
            _ => raw
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .map(|u| char::from_u32(u).unwrap_or('\u{fffd}'))
                .collect(),
        };
        Ok(text)
    }

    fn bytes(&self, address: usize) -> Result<Vec<u8>> {
        if address == 0 {
            bail!("a null bytes object");
        }
        let mut head = [0u8; 8];
        read(self.pid, address + layout::BYTES_SIZE, &mut head)?;
        let size = usize_at(&head, 0);
        if size > MAX_LINETABLE {
            bail!("a line table of {size} bytes: a torn read");
        }
        let mut raw = vec![0u8; size];
        read(self.pid, address + layout::BYTES_DATA, &mut raw)?;
        Ok(raw)
    }

    /// The file as py-spy shows it: relative to the outermost directory that is not a package.
    fn short_file(&mut self, file: &str) -> String {
        if let Some(short) = self.short_files.get(file) {
            return short.clone();
        }
        let in_root = format!("/proc/{}/root{file}", self.pid);
        let path = if self.dockerized && Path::new(&in_root).exists() {
            in_root.as_str()
        } else {
            file
        };
        let mut top = Path::new(path);
        while let Some(parent) = top.parent() {
            top = parent;
            if !parent.join("__init__.py").exists() {
                break;
            }
        }
        let short = Path::new(path)
            .strip_prefix(top)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| file.to_string());
        if self.short_files.len() > 65_536 {
            self.short_files.clear();
        }
        self.short_files.insert(file.to_string(), short.clone());
        short
    }
}

impl Code {
    /// The formatted frame at an instruction offset, cached.
    fn frame(&mut self, offset: i64) -> Arc<str> {
        if let Some(text) = self.frames.get(&offset) {
            return text.clone();
        }
        let line = line_number(&self.table, self.first_line, offset);
        let text: Arc<str> = Arc::from(crate::sampler::format_frame(&self.name, &self.shown, line));
        if self.frames.len() < 4096 {
            self.frames.insert(offset, text.clone());
        }
        text
    }
}

fn code_cost(code: &Code) -> usize {
    code.name.len() + code.shown.len() + code.table.len() + 256
}

/// The waits py-spy recognises by name to call a running thread idle.
fn is_wait(name: &str, file: &str) -> bool {
    (name == "wait" && file.ends_with("threading.py"))
        || (name == "select" && file.ends_with("selectors.py"))
        || (name == "poll"
            && (file.ends_with("asyncore.py")
                || file.contains("zmq")
                || file.contains("gevent")
                || file.contains("tornado")))
}

/// The source line of the instruction `offset` bytes into the code, from CPython 3.11's
/// location table: entries of a first byte (bit 7 set, code in bits 3–6, length in code
/// units minus one in bits 0–2) and, by code, varints of line delta and columns.
pub fn line_number(table: &[u8], first_line: i32, offset: i64) -> i32 {
    let mut line = i64::from(first_line);
    let mut end = 0i64;
    let mut i = 0usize;
    while i < table.len() {
        let byte = table[i];
        i += 1;
        end += (i64::from(byte & 7) + 1) * 2;
        let code = (byte >> 3) & 15;
        let delta = match code {
            15 => 0,
            14 => {
                let delta = signed_varint(table, &mut i);
                for _ in 0..3 {
                    varint(table, &mut i);
                }
                delta
            }
            13 => signed_varint(table, &mut i),
            10..=12 => {
                i += 2;
                i64::from(code - 10)
            }
            _ => {
                i += 1;
                0
            }
        };
        line += delta;
        if end > offset {
            break;
        }
    }
    line as i32
}

fn varint(table: &[u8], i: &mut usize) -> i64 {
    let mut value = 0i64;
    let mut shift = 0u32;
    while let Some(&byte) = table.get(*i) {
        *i += 1;
        value |= i64::from(byte & 63) << shift.min(62);
        shift += 6;
        if byte & 64 == 0 {
            break;
        }
    }
    value
}

fn signed_varint(table: &[u8], i: &mut usize) -> i64 {
    let value = varint(table, i);
    if value & 1 != 0 {
        -(value >> 1)
    } else {
        value >> 1
    }
}

/// Where a thread's stack was found: read ahead in the next sample's batch.
#[derive(Clone, Copy)]
struct AheadStack {
    /// The thread's `_PyCFrame`, whose current frame is read.
    cframe: usize,
    /// The part of the data stack read: from `start` to `end`, past the highest top.
    start: usize,
    end: usize,
    /// The highest top of the stack recent samples saw, and the sample that saw it.
    high: usize,
    high_seen: u64,
}

impl AheadStack {
    /// What the next sample reads ahead after this one found the data stack read from
    /// `start` up to `top`: up to the highest top recent samples saw, plus some slack.
    fn next(
        previous: Option<AheadStack>,
        cframe: usize,
        start: usize,
        top: usize,
        sample: u64,
    ) -> Self {
        let (high, high_seen) = match previous {
            Some(p)
                if p.cframe == cframe
                    && p.start == start
                    && p.high > top
                    && p.high_seen + RECENT_SAMPLES > sample =>
            {
                (p.high, p.high_seen)
            }
            _ => (top, sample),
        };
        AheadStack {
            cframe,
            start,
            end: high + STACK_SLACK,
            high,
            high_seen,
        }
    }
}

/// Addresses met by recent samples, with the last sample that met each.
#[derive(Default)]
struct Recent {
    last: HashMap<usize, u64, FxBuild>,
}

impl Recent {
    /// Notes the addresses `sample` met, and keeps of the others only the few met most
    /// recently, within the last RECENT_SAMPLES samples: a service whose stacks vary a lot
    /// should not read ahead every code object it ran lately.
    fn seen(&mut self, addresses: &[usize], sample: u64) {
        for &address in addresses {
            self.last.insert(address, sample);
        }
        let keep = (addresses.len() + RECENT_EXTRA).min(READ_AHEAD_MAX);
        if self.last.len() > addresses.len() {
            self.last
                .retain(|_, &mut last| last + RECENT_SAMPLES > sample);
        }
        if self.last.len() > keep {
            // the keep-th most recent sample; ties with it may stay, up to this sample's own
            let mut lasts: Vec<u64> = self.last.values().copied().collect();
            let (_, &mut cut, _) = lasts.select_nth_unstable_by(keep - 1, |a, b| b.cmp(a));
            self.last
                .retain(|_, &mut last| last > cut || (last == cut && cut == sample));
        }
    }

    fn addresses(&self) -> impl Iterator<Item = usize> + '_ {
        self.last.keys().copied().take(READ_AHEAD_MAX)
    }
}

/// Remote pieces read in as few calls as the kernel allows; a piece that cannot be read
/// (freed, unmapped) is left out and the rest still read.
#[derive(Default)]
struct Batch {
    at: HashMap<(usize, usize), usize, FxBuild>,
    buf: Vec<u8>,
}

impl Batch {
    fn read(pid: i32, pieces: &[(usize, usize)]) -> Batch {
        let mut offsets = Vec::with_capacity(pieces.len() + 1);
        let mut total = 0usize;
        for &(_, len) in pieces {
            offsets.push(total);
            total += len;
        }
        offsets.push(total);
        let mut batch = Batch {
            at: HashMap::default(),
            buf: vec![0u8; total],
        };
        let mut i = 0;
        while i < pieces.len() {
            let end = (i + IOV_MAX).min(pieces.len());
            let n = read_vectored(
                pid,
                &pieces[i..end],
                &mut batch.buf[offsets[i]..offsets[end]],
            );
            // Pieces are filled in order until the first that fails: keep the whole ones and
            // go on after the failed one.
            let mut j = i;
            while j < end && offsets[j + 1] - offsets[i] <= n {
                batch.at.insert(pieces[j], offsets[j]);
                j += 1;
            }
            i = if j == end { end } else { j + 1 };
        }
        batch
    }

    fn get(&self, address: usize, len: usize) -> Option<&[u8]> {
        let &at = self.at.get(&(address, len))?;
        self.buf.get(at..at + len)
    }
}

fn usize_at(buf: &[u8], at: usize) -> usize {
    buf.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, |b: [u8; 8]| u64::from_le_bytes(b) as usize)
}

fn read(pid: i32, address: usize, buf: &mut [u8]) -> Result<()> {
    let len = buf.len();
    read_pieces(pid, &[(address, len)], buf)
}

/// Reads remote `(address, length)` pieces into `out`, back to back, in one system call.
fn read_pieces(pid: i32, pieces: &[(usize, usize)], out: &mut [u8]) -> Result<()> {
    let total: usize = pieces.iter().map(|p| p.1).sum();
    if total > out.len() {
        bail!("read buffer too small");
    }
    let n = read_vectored(pid, pieces, &mut out[..total]);
    if n != total {
        let err = std::io::Error::last_os_error();
        return Err(anyhow!(
            "failed to read the target's memory ({n} of {total} bytes): {err}"
        ));
    }
    Ok(())
}

/// One process_vm_readv of `pieces` into `out` (which holds their total length): the bytes
/// read, 0 on failure.
fn read_vectored(pid: i32, pieces: &[(usize, usize)], out: &mut [u8]) -> usize {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let remote: Vec<libc::iovec> = pieces
        .iter()
        .map(|&(address, len)| libc::iovec {
            iov_base: address as *mut libc::c_void,
            iov_len: len,
        })
        .collect();
    // SAFETY: `local` covers `out` exactly; the remote pieces are only read by the kernel,
    // which checks them against the target's mappings.
    let n =
        unsafe { libc::process_vm_readv(pid, &local, 1, remote.as_ptr(), remote.len() as _, 0) };
    let n = n.max(0) as usize;
    READS.set({
        let mut reads = READS.get();
        reads.calls += 1;
        reads.pieces += pieces.len() as u64;
        reads.bytes += n as u64;
        reads
    });
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::identity_op)] // entries spelled field by field, as the format defines them
    fn line_numbers_follow_the_location_table() {
        // 3 entries: short form (line +0), one-line form with +1, long form with -2.
        let table = [
            0x80 | (0 << 3) | 1, // 2 code units, code 0: one column byte
            5,
            0x80 | (11 << 3), // 1 unit, line +1, two column bytes
            1,
            2,
            0x80 | (14 << 3), // 1 unit, long form: line delta -2 (zigzag 5), end line, cols
            5,
            0,
            1,
            1,
        ];
        assert_eq!(line_number(&table, 10, 0), 10);
        assert_eq!(line_number(&table, 10, 2), 10);
        assert_eq!(line_number(&table, 10, 4), 11);
        assert_eq!(line_number(&table, 10, 6), 9);
        // before the first instruction: the first entry's line
        assert_eq!(line_number(&table, 10, -2), 10);
    }

    #[test]
    fn recent_addresses_are_few_beyond_the_last_sample() {
        let mut recent = Recent::default();
        // 40 samples of 10 new addresses each, then one of 5 known ones
        for sample in 1..=40u64 {
            let addresses: Vec<usize> = (0..10).map(|i| (sample as usize) * 100 + i).collect();
            recent.seen(&addresses, sample);
        }
        // the most recent ones stay, whole samples of them: 40 and 39 (38 would pass 10 + 16)
        assert_eq!(recent.last.len(), 20);
        assert!((0..10).all(|i| recent.last.contains_key(&(4000 + i))));
        assert!((0..10).all(|i| recent.last.contains_key(&(3900 + i))));
        recent.seen(&[4000, 4001, 4002, 4003, 4004], 41);
        assert!(recent.last.len() <= 5 + RECENT_EXTRA);
        // and none met longer ago than RECENT_SAMPLES samples
        recent.seen(&[1], 41 + RECENT_SAMPLES);
        assert_eq!(recent.addresses().collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn a_stack_is_read_ahead_up_to_the_highest_recent_top() {
        let first = AheadStack::next(None, 0x100, 0x1000, 0x1800, 1);
        assert_eq!((first.start, first.end), (0x1000, 0x1800 + STACK_SLACK));
        // a shallower stack keeps the higher top in reach while it is recent
        let lower = AheadStack::next(Some(first), 0x100, 0x1000, 0x1400, 2);
        assert_eq!(lower.end, 0x1800 + STACK_SLACK);
        let old = AheadStack::next(Some(lower), 0x100, 0x1000, 0x1400, 1 + RECENT_SAMPLES);
        assert_eq!(old.end, 0x1400 + STACK_SLACK);
        // a deeper one raises it; another C frame or chunk starts over
        let deeper = AheadStack::next(Some(old), 0x100, 0x1000, 0x2000, 70);
        assert_eq!((deeper.high, deeper.high_seen), (0x2000, 70));
        let moved = AheadStack::next(Some(deeper), 0x200, 0x1000, 0x1100, 71);
        assert_eq!(moved.end, 0x1100 + STACK_SLACK);
    }

    #[test]
    fn waits_are_recognised_like_pyspy() {
        assert!(is_wait("wait", "/usr/lib/python3.11/threading.py"));
        assert!(is_wait(
            "poll",
            "/srv/site-packages/tornado/platform/asyncio.py"
        ));
        assert!(!is_wait(
            "Condition.wait",
            "/usr/lib/python3.11/threading.py"
        ));
    }
}
