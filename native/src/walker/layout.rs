//! Where a CPython version keeps what the walker reads: one `Layout` per target, of offsets
//! and per-version rules.
//!
//! 3.11 and 3.12 come from a table (their `Include/internal` headers on 64-bit Linux). From
//! 3.13 on, CPython publishes most offsets itself in `_Py_DebugOffsets` at the start of
//! `_PyRuntime` (cookie `xdebugpy`): the walker reads them from the target, checks them, and
//! keeps a short row per version for what they do not give. The struct is stable within a
//! minor version only, so each minor version names where its fields are.

/// Python 3.x minor versions the walker reads.
pub const MINORS: std::ops::RangeInclusive<u64> = 11..=15;

/// Where a tuple's first item lies: after its header (24 bytes), and from 3.14 after the hash
/// it caches too.
pub const fn tuple_items(minor: u64) -> usize {
    if minor >= 14 {
        32
    } else {
        24
    }
}

/// Offsets into the target's structures, and the rules that differ by version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub minor: u64,
    /// Where the offsets came from: "table" or "_Py_DebugOffsets".
    pub source: &'static str,
    pub interp_threads_head: usize,
    /// The interpreter state's `sys.modules` (`modules`, 3.12+ `imports.modules`).
    pub interp_modules: usize,
    /// The interpreter's count of code objects freed (`_code_object_generation`, 3.14+ through
    /// `_Py_DebugOffsets`): while it stands, no cached code object's memory went to another.
    pub interp_code_generation: Option<usize>,
    pub tstate_next: usize,
    /// The thread state's field that leads to the current frame: the frame's address itself
    /// (3.13+), or that of a `_PyCFrame` whose field at `cframe_current` holds it.
    pub tstate_frame: usize,
    pub cframe_current: Option<usize>,
    pub tstate_thread_id: usize,
    pub tstate_native_thread_id: usize,
    pub tstate_datastack_chunk: usize,
    pub tstate_datastack_top: usize,
    /// How much of a thread state is read: through the last field above.
    /// `PyThreadState.context_ver`: counts the contexts the thread entered and left, two a
    /// callback of an event loop (each runs in its context); the same in every build of a
    /// minor version, and in no `_Py_DebugOffsets`.
    pub tstate_context_ver: usize,
    pub tstate_size: usize,
    /// Where a `_PyStackChunk`'s frames start (after previous, size and top).
    pub chunk_data: usize,
    pub frame_code: usize,
    pub frame_previous: usize,
    /// The last instruction started (`prev_instr`, up to 3.12) or the one running
    /// (`instr_ptr`, 3.13+): either way, its offset from `co_code_adaptive` finds the line.
    pub frame_instr: usize,
    pub frame_owner: Option<usize>,
    /// The part of a frame read: from `frame_first`, `frame_size` bytes.
    pub frame_first: usize,
    pub frame_size: usize,
    /// Frames whose owner is this or more are not Python frames (3.12+: the C stack's entry
    /// frames, the interpreter's own); none are hidden in 3.11.
    pub owner_hidden: Option<u8>,
    /// Bits of the frame's code pointer that are tags, not address (3.14+).
    pub code_tags: usize,
    pub code_firstlineno: usize,
    pub code_filename: usize,
    pub code_name: usize,
    pub code_qualname: usize,
    pub code_linetable: usize,
    pub code_adaptive: usize,
    /// `co_localsplusnames` (a tuple of str) and `co_localspluskinds` (bytes, a kind each):
    /// the names of a frame's locals, cells and free variables, in the order of its
    /// `localsplus`, which lies at `frame_localsplus` in the frame (`crate::walker::values`).
    pub code_localsplusnames: usize,
    pub code_localspluskinds: usize,
    pub frame_localsplus: usize,
    /// Bits of a local's slot that are tags, not address: 3.14+ keeps `_PyStackRef`s there,
    /// whose low two bits say how it is counted, or (both set) that it is a small int itself.
    pub local_tags: usize,
    /// The part of a code object checked every sample: from `code_first`, `code_size` bytes,
    /// fields that never change during a code object's life, so equal bytes mean the same code.
    pub code_first: usize,
    pub code_size: usize,
    pub str_length: usize,
    pub str_state: usize,
    /// Where the characters of an ASCII string, and of any other compact string, start.
    pub str_ascii_data: usize,
    pub str_compact_data: usize,
    pub bytes_size: usize,
    pub bytes_data: usize,
    /// A coroutine or generator object, whose frame lies inside it.
    pub gen: GenLayout,
}

/// A coroutine or generator object: where its frame state (an int8) and its frame lie, and
/// what the states are. Each version has its row: the header is the same from 3.12 on, 3.11's
/// is a word longer (`gi_code`). From 3.14 on `_Py_DebugOffsets` gives where the state and the
/// frame lie, and the walker takes them from there (the states stay the row's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenLayout {
    pub frame_state: usize,
    pub iframe: usize,
    /// Frame states: executing (running now, in its thread's chain of frames), not started
    /// yet, and the first past which no frame is left (completed, then cleared).
    pub executing: i8,
    pub created: i8,
    pub completed: i8,
}

impl GenLayout {
    pub fn of(minor: u64) -> Option<GenLayout> {
        let (frame_state, iframe) = match minor {
            11 => (75, 80),
            12..=15 => (67, 72),
            _ => return None,
        };
        // 3.13 added a state before suspended (suspended in a `yield from`); 3.15 numbers
        // them from created at 0
        let (created, executing, completed) = match minor {
            11 | 12 => (-2, 0, 1),
            13 | 14 => (-3, 0, 1),
            _ => (0, 4, 5),
        };
        Some(GenLayout {
            frame_state,
            iframe,
            executing,
            created,
            completed,
        })
    }
}

impl Layout {
    /// The piece of a string object that marks it: its length, hash and state, and the first
    /// bytes after them (an ASCII string's first characters). Another string made at the same
    /// address almost always differs in these.
    pub fn string_mark(&self, string: usize) -> (usize, usize) {
        (
            string + self.str_length,
            self.str_ascii_data + 8 - self.str_length,
        )
    }

    /// The table for 3.11 and 3.12; None for other versions.
    pub fn table(minor: u64) -> Option<Layout> {
        let layout = match minor {
            11 => Layout {
                minor,
                source: "table",
                interp_threads_head: 16,
                interp_modules: 888,
                interp_code_generation: None,
                tstate_next: 8,
                tstate_frame: 56,
                cframe_current: Some(8),
                tstate_thread_id: 152,
                tstate_native_thread_id: 160,
                tstate_datastack_chunk: 296,
                tstate_datastack_top: 304,
                tstate_context_ver: 232,
                tstate_size: 0,
                chunk_data: 24,
                frame_code: 32,
                frame_previous: 48,
                frame_instr: 56,
                frame_owner: Some(69),
                frame_first: 0,
                frame_size: 0,
                owner_hidden: None,
                code_tags: 0,
                code_firstlineno: 72,
                code_filename: 112,
                code_name: 120,
                code_qualname: 128,
                code_linetable: 136,
                code_adaptive: 184,
                code_localsplusnames: 96,
                code_localspluskinds: 104,
                frame_localsplus: 72,
                local_tags: 0,
                code_first: 0,
                code_size: 0,
                str_length: 16,
                str_state: 32,
                str_ascii_data: 48,
                str_compact_data: 72,
                bytes_size: 16,
                bytes_data: 32,
                gen: GenLayout::of(minor)?,
            },
            12 => Layout {
                minor,
                source: "table",
                interp_threads_head: 72,
                interp_modules: 944,
                interp_code_generation: None,
                tstate_next: 8,
                tstate_frame: 56,
                cframe_current: Some(0),
                tstate_thread_id: 136,
                tstate_native_thread_id: 144,
                tstate_datastack_chunk: 232,
                tstate_datastack_top: 240,
                tstate_context_ver: 216,
                tstate_size: 0,
                chunk_data: 24,
                frame_code: 0,
                frame_previous: 8,
                frame_instr: 56,
                frame_owner: Some(70),
                frame_first: 0,
                frame_size: 0,
                owner_hidden: Some(3),
                code_tags: 0,
                code_firstlineno: 68,
                code_filename: 112,
                code_name: 120,
                code_qualname: 128,
                code_linetable: 136,
                code_adaptive: 192,
                code_localsplusnames: 96,
                code_localspluskinds: 104,
                frame_localsplus: 72,
                local_tags: 0,
                code_first: 0,
                code_size: 0,
                str_length: 16,
                str_state: 32,
                str_ascii_data: 40,
                str_compact_data: 56,
                bytes_size: 16,
                bytes_data: 32,
                gen: GenLayout::of(minor)?,
            },
            _ => return None,
        };
        Some(layout.finish())
    }

    /// Whether a frame of this owner is not one of the program's (`owner_hidden`).
    pub fn hides(&self, owner: Option<u8>) -> bool {
        match (owner, self.owner_hidden) {
            (Some(owner), Some(hidden)) => owner >= hidden,
            _ => false,
        }
    }

    /// Derives the parts read from the fields.
    pub(super) fn finish(mut self) -> Layout {
        self.tstate_size = [
            self.tstate_next,
            self.tstate_frame,
            self.tstate_thread_id,
            self.tstate_native_thread_id,
            self.tstate_datastack_chunk,
            self.tstate_datastack_top,
            self.tstate_context_ver,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
            + 8;
        let mut frame = vec![
            (self.frame_code, 8),
            (self.frame_previous, 8),
            (self.frame_instr, 8),
        ];
        if let Some(owner) = self.frame_owner {
            frame.push((owner, 1));
        }
        (self.frame_first, self.frame_size) = span(&frame);
        (self.code_first, self.code_size) = span(&[
            (self.code_firstlineno, 4),
            (self.code_filename, 8),
            (self.code_name, 8),
            (self.code_qualname, 8),
            (self.code_linetable, 8),
        ]);
        self
    }
}

/// From the first field's start to the last one's end: (start, length).
fn span(fields: &[(usize, usize)]) -> (usize, usize) {
    let first = fields.iter().map(|f| f.0).min().unwrap_or(0);
    let end = fields.iter().map(|f| f.0 + f.1).max().unwrap_or(0);
    (first, end - first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_reads_what_311_always_read() {
        let layout = Layout::table(11).expect("3.11 is in the table");
        // the code header checked every sample: co_firstlineno through co_linetable
        assert_eq!((layout.code_first, layout.code_size), (72, 72));
        // a frame: f_code at 32 through its owner at 69
        assert_eq!((layout.frame_first, layout.frame_size), (32, 38));
        assert_eq!(layout.tstate_size, 312);
        assert!(Layout::table(13).is_none());
    }

    #[test]
    fn a_312_frame_is_read_through_its_owner() {
        let layout = Layout::table(12).expect("3.12 is in the table");
        assert_eq!((layout.frame_first, layout.frame_size), (0, 71));
        assert_eq!(layout.owner_hidden, Some(3));
    }
}
