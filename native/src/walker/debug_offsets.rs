//! The layout of a CPython 3.13+ target from its own `_Py_DebugOffsets`, the struct at the
//! start of `_PyRuntime` (cookie `xdebugpy`) in which the interpreter publishes where its
//! structures keep their fields. The struct is stable within a minor version only, so each
//! minor version has a row naming where its fields are; what it does not give (the top of the
//! data stack, frame owners to leave out, tag bits, the data of non-ASCII strings) is a short
//! rule per version here too. Everything read is checked before it is used.

use anyhow::{anyhow, bail, Result};

use super::gil::{At, GilTable};
use super::layout::{GenLayout, Layout};
use crate::process::memory::{read, usize_at};

/// Sizes past which an offset is garbage rather than a field.
const MAX_STRUCT: usize = 1 << 16;
const MAX_FRAME: usize = 256;
const MAX_CODE: usize = 1024;

impl Layout {
    /// The layout of a 3.13+ target from the `_Py_DebugOffsets` at `runtime` (the address of
    /// its `_PyRuntime`), checked against the version py-spy found and against itself.
    pub fn from_debug_offsets(pid: i32, runtime: usize, minor: u64) -> Result<Layout> {
        Layout::parse_debug_offsets(&read_debug_offsets(pid, runtime, minor)?, minor)
    }

    /// The layout a 3.13+ `_Py_DebugOffsets` gives (`raw`, read from the target), checked.
    pub fn parse_debug_offsets(raw: &[u8], minor: u64) -> Result<Layout> {
        let Some(row) = DebugRow::of(minor) else {
            bail!("no _Py_DebugOffsets layout for Python 3.{minor}");
        };
        if raw.len() < row.words * 8 {
            bail!("the debug offsets were read short");
        }
        let word = |i: usize| usize_at(raw, i * 8);
        if &raw[..8] != b"xdebugpy" {
            bail!("_PyRuntime does not start with the debug offsets' cookie");
        }
        let version = word(1);
        if (version >> 24) & 0xff != 3 || ((version >> 16) & 0xff) as u64 != minor {
            bail!("the debug offsets are of version {version:#x}, not 3.{minor}");
        }
        if word(2) != 0 {
            bail!(FREE_THREADED);
        }
        let tstate_size = word(row.tstate_size);
        let frame_size = word(row.frame_size);
        let code_size = word(row.code_size);
        if tstate_size > MAX_STRUCT || frame_size > MAX_FRAME || code_size > MAX_CODE {
            bail!("the debug offsets give implausible sizes ({tstate_size}, {frame_size}, {code_size})");
        }
        let ascii = word(row.ascii_size);
        let layout = Layout {
            minor,
            source: "_Py_DebugOffsets",
            interp_threads_head: word(row.threads_head),
            interp_modules: word(row.imports_modules),
            interp_code_generation: row.code_generation.map(word),
            tstate_next: word(row.tstate_next),
            tstate_frame: word(row.tstate_current_frame),
            cframe_current: None,
            tstate_thread_id: word(row.tstate_thread_id),
            tstate_native_thread_id: word(row.tstate_native_thread_id),
            tstate_datastack_chunk: word(row.tstate_datastack_chunk),
            // not given: the top follows the chunk in every version
            tstate_datastack_top: word(row.tstate_datastack_chunk) + 8,
            tstate_context_ver: row.context_ver,
            tstate_size: 0,
            chunk_data: 24,
            frame_code: word(row.frame_executable),
            frame_previous: word(row.frame_previous),
            frame_instr: word(row.frame_instr_ptr),
            frame_owner: Some(word(row.frame_owner)),
            frame_first: 0,
            frame_size: 0,
            owner_hidden: Some(3),
            code_tags: if minor >= 14 { 7 } else { 0 },
            code_firstlineno: word(row.code_firstlineno),
            code_filename: word(row.code_filename),
            code_name: word(row.code_name),
            code_qualname: word(row.code_qualname),
            code_linetable: word(row.code_linetable),
            code_adaptive: word(row.code_adaptive),
            code_localsplusnames: word(row.code_localsplusnames),
            code_localspluskinds: word(row.code_localsplusnames + 1),
            frame_localsplus: word(row.frame_instr_ptr + 1),
            local_tags: if minor >= 14 { 3 } else { 0 },
            code_first: 0,
            code_size: 0,
            str_length: word(row.str_length),
            str_state: word(row.str_state),
            str_ascii_data: ascii,
            str_compact_data: match row.compact_size {
                Some(i) => word(i),
                None => ascii + 16,
            },
            bytes_size: word(row.bytes_size),
            bytes_data: word(row.bytes_data),
            gen: gen_layout(raw, &row, minor, frame_size)?,
        }
        .finish();
        let fields_inside = layout.tstate_size <= tstate_size
            && layout.frame_first + layout.frame_size <= frame_size
            && layout.code_first + layout.code_size <= code_size
            && layout.code_adaptive <= code_size
            && layout.code_localspluskinds + 8 <= code_size
            && layout.code_localsplusnames + 8 <= code_size
            && layout.frame_localsplus <= frame_size
            && layout.frame_localsplus >= layout.frame_first + layout.frame_size
            && layout.interp_threads_head < MAX_STRUCT
            && layout.interp_modules < MAX_STRUCT
            && layout
                .interp_code_generation
                .is_none_or(|at| at < MAX_STRUCT && at % 8 == 0)
            && (32..=64).contains(&ascii)
            && layout.str_state < ascii
            && layout.str_length < ascii
            && layout.str_compact_data <= 128
            && layout.bytes_data <= 64;
        if !fields_inside {
            bail!("the debug offsets name fields outside their structures");
        }
        Ok(layout)
    }

    /// The offset of the interpreters' list in `_PyRuntime` (3.13+), where the walker checks
    /// that it found the runtime py-spy found.
    pub fn interpreters_head(pid: i32, runtime: usize, minor: u64) -> Result<usize> {
        let mut word = [0u8; 8];
        read(pid, runtime + 5 * 8, &mut word)?;
        let offset = usize_at(&word, 0);
        if offset == 0 || offset > MAX_STRUCT || DebugRow::of(minor).is_none() {
            bail!("the debug offsets give no interpreters list");
        }
        Ok(offset)
    }
}

impl GilTable {
    /// Where the 3.13+ target `pid` keeps its GIL and GC state, from the `_Py_DebugOffsets` at
    /// `runtime`.
    pub fn read_debug_offsets(pid: i32, runtime: usize, minor: u64) -> Result<GilTable> {
        let raw = read_debug_offsets(pid, runtime, minor)?;
        Layout::parse_debug_offsets(&raw, minor)?;
        GilTable::from_debug_offsets(&raw, minor)
    }

    /// Where a 3.13+ target keeps its GIL and GC state, from its `_Py_DebugOffsets` (`raw`,
    /// already parsed into a `Layout`, so its cookie and version are checked): the GIL as the
    /// interpreter's own `_gil`, whose `last_holder` and `locked` must lie where every version
    /// has kept them; the GC state's `collecting`; 3.15's flags of a thread state.
    pub fn from_debug_offsets(raw: &[u8], minor: u64) -> Result<GilTable> {
        let Some(row) = DebugRow::of(minor) else {
            bail!("no _Py_DebugOffsets layout for Python 3.{minor}");
        };
        let word = |i: usize| usize_at(raw, i * 8);
        let gil = word(row.gil_runtime_state);
        if gil == 0
            || gil > MAX_STRUCT
            || word(row.gil_holder) != gil + 8
            || word(row.gil_locked) != gil + 16
        {
            bail!("the debug offsets place the GIL's holder and lock where no version kept them");
        }
        let (gc, collecting) = (word(row.gc), word(row.gc_collecting));
        if gc == 0 || gc > MAX_STRUCT || collecting >= word(row.gc_size) {
            bail!("the debug offsets give an implausible GC state ({gc}, {collecting})");
        }
        let flags = row
            .tstate_gil_flags
            .map(|(holds, requested)| (word(holds), word(requested)));
        let tstate_size = word(row.tstate_size);
        if flags.is_some_and(|(h, r)| h + 4 > tstate_size || r + 4 > tstate_size) {
            bail!("the debug offsets place a thread's GIL flags outside its state");
        }
        Ok(GilTable {
            gil: At::Interpreter(gil),
            collecting: At::Interpreter(gc + collecting),
            tstate_thread_id: word(row.tstate_thread_id),
            flags,
        })
    }
}

/// The raw `_Py_DebugOffsets` of the 3.`minor` target `pid`, at `runtime`: its version's
/// row's words.
fn read_debug_offsets(pid: i32, runtime: usize, minor: u64) -> Result<Vec<u8>> {
    let Some(row) = DebugRow::of(minor) else {
        bail!("no _Py_DebugOffsets layout for Python 3.{minor}");
    };
    let mut raw = vec![0u8; row.words * 8];
    read(pid, runtime, &mut raw)?;
    Ok(raw)
}

/// The line a free-threaded target gets.
pub const FREE_THREADED: &str =
    "free-threaded CPython builds (3.13t, 3.14t) are not supported: their objects and frames are laid out otherwise";

/// Where a minor version's `_Py_DebugOffsets` keeps each field the walker uses, counted in
/// 8-byte words from the start of the struct (the cookie is word 0, the version word 1, the
/// free-threaded flag word 2, the interpreters' list word 5 in every version).
struct DebugRow {
    words: usize,
    threads_head: usize,
    imports_modules: usize,
    /// `interpreter_state.code_object_generation` (3.14+).
    code_generation: Option<usize>,
    tstate_size: usize,
    tstate_next: usize,
    tstate_current_frame: usize,
    tstate_thread_id: usize,
    tstate_native_thread_id: usize,
    tstate_datastack_chunk: usize,
    /// Not a word of the struct: the offset of `PyThreadState.context_ver` itself, which it
    /// does not give (`Layout::tstate_context_ver`).
    context_ver: usize,
    frame_size: usize,
    frame_previous: usize,
    frame_executable: usize,
    frame_instr_ptr: usize,
    frame_owner: usize,
    code_size: usize,
    code_filename: usize,
    code_name: usize,
    code_qualname: usize,
    code_linetable: usize,
    code_firstlineno: usize,
    code_adaptive: usize,
    /// `code_object.localsplusnames`, followed by `localspluskinds`; a frame's `localsplus`
    /// follows its `instr_ptr` in every row.
    code_localsplusnames: usize,
    bytes_size: usize,
    bytes_data: usize,
    str_state: usize,
    str_length: usize,
    ascii_size: usize,
    compact_size: Option<usize>,
    /// `gen_object`'s size (3.14+), followed by `gi_name`, `gi_iframe` and `gi_frame_state`.
    gen_object: Option<usize>,
    /// `interpreter_state.gil_runtime_state` (the interpreter's own `_gil`), its `locked` and
    /// `holder`; `interpreter_state.gc`, and the GC state's size and `collecting`.
    gil_runtime_state: usize,
    gil_locked: usize,
    gil_holder: usize,
    gc: usize,
    gc_size: usize,
    gc_collecting: usize,
    /// `thread_state.holds_gil` and `gil_requested` (3.15+).
    tstate_gil_flags: Option<(usize, usize)>,
}

/// A coroutine object of Python 3.`minor`: the version's row, with where its frame state and
/// frame lie as the debug offsets give them (3.14+), checked: the state before the frame, and
/// the frame (`frame_size` bytes before its locals) inside the object.
fn gen_layout(raw: &[u8], row: &DebugRow, minor: u64, frame_size: usize) -> Result<GenLayout> {
    let mut gen =
        GenLayout::of(minor).ok_or_else(|| anyhow!("no coroutine layout for Python 3.{minor}"))?;
    if let Some(at) = row.gen_object {
        let word = |i: usize| usize_at(raw, i * 8);
        let (size, iframe, frame_state) = (word(at), word(at + 2), word(at + 3));
        if size > MAX_STRUCT || frame_state >= iframe || iframe + frame_size > size {
            bail!(
                "the debug offsets give an implausible coroutine object \
                 ({size}, {iframe}, {frame_state})"
            );
        }
        (gen.iframe, gen.frame_state) = (iframe, frame_state);
    }
    Ok(gen)
}

impl DebugRow {
    fn of(minor: u64) -> Option<DebugRow> {
        Some(match minor {
            13 => DebugRow {
                words: 73,
                threads_head: 9,
                imports_modules: 11,
                code_generation: None,
                tstate_size: 19,
                tstate_next: 21,
                tstate_current_frame: 23,
                tstate_thread_id: 24,
                tstate_native_thread_id: 25,
                tstate_datastack_chunk: 26,
                context_ver: 216,
                frame_size: 28,
                frame_previous: 29,
                frame_executable: 30,
                frame_instr_ptr: 31,
                frame_owner: 33,
                code_size: 34,
                code_filename: 35,
                code_name: 36,
                code_qualname: 37,
                code_linetable: 38,
                code_firstlineno: 39,
                code_adaptive: 43,
                code_localsplusnames: 41,
                bytes_size: 65,
                bytes_data: 66,
                str_state: 68,
                str_length: 69,
                ascii_size: 70,
                compact_size: None,
                gen_object: None,
                gil_runtime_state: 15,
                gil_locked: 17,
                gil_holder: 18,
                gc: 10,
                gc_size: 71,
                gc_collecting: 72,
                tstate_gil_flags: None,
            },
            14 => DebugRow {
                words: 95,
                threads_head: 9,
                imports_modules: 12,
                code_generation: Some(20),
                tstate_size: 22,
                tstate_next: 24,
                tstate_current_frame: 26,
                tstate_thread_id: 27,
                tstate_native_thread_id: 28,
                tstate_datastack_chunk: 29,
                context_ver: 216,
                frame_size: 31,
                frame_previous: 32,
                frame_executable: 33,
                frame_instr_ptr: 34,
                frame_owner: 36,
                code_size: 39,
                code_filename: 40,
                code_name: 41,
                code_qualname: 42,
                code_linetable: 43,
                code_firstlineno: 44,
                code_adaptive: 48,
                code_localsplusnames: 46,
                bytes_size: 75,
                bytes_data: 76,
                str_state: 78,
                str_length: 79,
                ascii_size: 80,
                compact_size: None,
                gen_object: Some(83),
                gil_runtime_state: 16,
                gil_locked: 18,
                gil_holder: 19,
                gc: 11,
                gc_size: 81,
                gc_collecting: 82,
                tstate_gil_flags: None,
            },
            15 => DebugRow {
                words: 111,
                threads_head: 9,
                imports_modules: 12,
                code_generation: Some(20),
                tstate_size: 22,
                tstate_next: 24,
                tstate_current_frame: 26,
                tstate_thread_id: 30,
                tstate_native_thread_id: 31,
                tstate_datastack_chunk: 32,
                context_ver: 240,
                frame_size: 39,
                frame_previous: 40,
                frame_executable: 41,
                frame_instr_ptr: 42,
                frame_owner: 44,
                code_size: 47,
                code_filename: 48,
                code_name: 49,
                code_qualname: 50,
                code_linetable: 51,
                code_firstlineno: 52,
                code_adaptive: 56,
                code_localsplusnames: 54,
                bytes_size: 87,
                bytes_data: 88,
                str_state: 90,
                str_length: 91,
                ascii_size: 92,
                compact_size: Some(93),
                gen_object: Some(99),
                gil_runtime_state: 16,
                gil_locked: 18,
                gil_holder: 19,
                gc: 11,
                gc_size: 94,
                gc_collecting: 95,
                tstate_gil_flags: Some((34, 35)),
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first words of `_PyRuntime` in real interpreters (3.13.0 from pyenv, 3.14.10 and
    /// 3.15.2 from Debian), as a walker reads them.
    #[rustfmt::skip]
    const DEBUG_313: [u64; 73] = [
        8750607829840520312, 51183856, 0, 283320, 608, 632, 194968, 7272, 7264, 7344, 7400, 7656,
        7640, 7648, 16, 7752, 0, 7768, 7760, 304, 0, 8, 16, 72, 152, 160, 232, 32, 80, 8, 0, 56,
        72, 70, 208, 112, 120, 128, 136, 68, 52, 96, 104, 200, 16, 8, 416, 24, 88, 168, 32, 24, 16,
        40, 24, 16, 48, 32, 40, 24, 16, 32, 16, 24, 40, 16, 32, 64, 32, 16, 40, 240, 200,
    ];
    #[rustfmt::skip]
    const DEBUG_314: [u64; 95] = [
        8750607829840520312, 51251952, 0, 316616, 784, 808, 225864, 7280, 7272, 7344, 7360, 7408,
        7688, 7672, 7680, 16, 7784, 0, 7800, 7792, 7992, 0, 832, 0, 8, 16, 72, 152, 160, 232, 32,
        88, 8, 0, 56, 80, 74, 64, 0, 216, 112, 120, 128, 136, 68, 52, 96, 104, 208, 0, 16, 8, 416,
        24, 88, 168, 40, 32, 16, 40, 24, 16, 200, 24, 40, 32, 48, 32, 40, 24, 16, 32, 16, 24, 40,
        16, 32, 64, 32, 16, 40, 264, 192, 160, 24, 72, 67, 0, 8, 24, 304, 8076, 0, 4, 512,
    ];
    #[rustfmt::skip]
    const DEBUG_315: [u64; 111] = [
        8750607829840520312, 51315440, 0, 346568, 912, 936, 226240, 7272, 7264, 7336, 7352, 7400,
        7592, 7576, 7584, 16, 7736, 0, 7752, 7744, 7944, 0, 888, 0, 8, 16, 72, 80, 88, 96, 176,
        184, 256, 32, 36, 40, 136, 288, 0, 88, 8, 0, 56, 80, 74, 64, 0, 216, 112, 120, 128, 136,
        68, 52, 96, 104, 208, 0, 16, 8, 424, 24, 88, 168, 32, 288, 944, 888, 40, 32, 16, 40, 24,
        16, 200, 24, 40, 32, 48, 32, 40, 24, 16, 32, 16, 24, 40, 16, 32, 64, 32, 16, 40, 56, 176,
        112, 120, 1120, 104, 160, 24, 72, 67, 0, 8, 24, 344, 8028, 0, 4, 512,
    ];

    fn bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn debug_offsets_give_what_the_headers_say() {
        // each against offsetof() in the version's own Include/internal headers
        let l13 = Layout::parse_debug_offsets(&bytes(&DEBUG_313), 13).expect("3.13 parses");
        assert_eq!(l13.interp_threads_head, 7344);
        // sys.modules, where the task scan of 3.13 finds asyncio
        assert_eq!(l13.interp_modules, 7656);
        assert_eq!((l13.tstate_frame, l13.tstate_thread_id), (72, 152));
        assert_eq!(
            (l13.tstate_datastack_chunk, l13.tstate_datastack_top),
            (232, 240)
        );
        assert_eq!((l13.frame_instr, l13.frame_owner), (56, Some(70)));
        assert_eq!((l13.code_firstlineno, l13.code_adaptive), (68, 200));
        assert_eq!((l13.str_ascii_data, l13.str_compact_data), (40, 56));
        assert_eq!(l13.code_tags, 0);
        let l14 = Layout::parse_debug_offsets(&bytes(&DEBUG_314), 14).expect("3.14 parses");
        assert_eq!((l14.frame_owner, l14.code_adaptive), (Some(74), 208));
        // the count of code objects freed, after the GIL's state (3.14+ only)
        assert_eq!(l14.interp_code_generation, Some(7992));
        assert_eq!(l13.interp_code_generation, None);
        assert_eq!(l14.code_tags, 7);
        let l15 = Layout::parse_debug_offsets(&bytes(&DEBUG_315), 15).expect("3.15 parses");
        assert_eq!(
            (l15.tstate_thread_id, l15.tstate_native_thread_id),
            (176, 184)
        );
        assert_eq!(
            (l15.tstate_datastack_chunk, l15.tstate_datastack_top),
            (256, 264)
        );
        assert_eq!(l15.interp_threads_head, 7336);
        assert_eq!(l15.interp_code_generation, Some(7944));
        assert_eq!((l15.str_ascii_data, l15.str_compact_data), (40, 56));
        // the names of a frame's locals, and where their values lie (the C headers' offsets:
        // 3.13's `localsplus` at 72, as 3.11's and 3.12's; 3.14 grew the frame a word)
        for (l, localsplus, tags) in [(&l13, 72, 0), (&l14, 80, 3), (&l15, 80, 3)] {
            assert_eq!((l.code_localsplusnames, l.code_localspluskinds), (96, 104));
            assert_eq!((l.frame_localsplus, l.local_tags), (localsplus, tags));
        }
        // a coroutine's frame state and frame, given from 3.14 on, agree with the rows
        assert_eq!((l14.gen.frame_state, l14.gen.iframe), (67, 72));
        assert_eq!(l15.gen, GenLayout::of(15).expect("3.15 has a row"));
        // and are taken from the offsets: a 3.15 whose coroutine grew a word before its frame
        let mut moved = DEBUG_315;
        (moved[99], moved[101], moved[102]) = (168, 80, 75);
        let l = Layout::parse_debug_offsets(&bytes(&moved), 15).expect("still plausible");
        assert_eq!((l.gen.frame_state, l.gen.iframe), (75, 80));
        // 3.12's table and 3.13's offsets agree where the structures did not change
        let l12 = Layout::table(12).expect("3.12 is in the table");
        assert_eq!(
            (l12.code_filename, l12.code_linetable),
            (l13.code_filename, l13.code_linetable)
        );
        assert_eq!(
            (l12.code_localsplusnames, l12.frame_localsplus),
            (l13.code_localsplusnames, l13.frame_localsplus)
        );
    }

    #[test]
    fn debug_offsets_place_the_gil_and_the_collector() {
        // as the interpreters themselves read them (tests/live/test_gil.py checks it live)
        let g13 = GilTable::from_debug_offsets(&bytes(&DEBUG_313), 13).expect("3.13");
        assert_eq!(
            (g13.gil, g13.collecting, g13.tstate_thread_id, g13.flags),
            (At::Interpreter(7752), At::Interpreter(7600), 152, None)
        );
        let g14 = GilTable::from_debug_offsets(&bytes(&DEBUG_314), 14).expect("3.14");
        assert_eq!(
            (g14.gil, g14.collecting),
            (At::Interpreter(7784), At::Interpreter(7600))
        );
        let g15 = GilTable::from_debug_offsets(&bytes(&DEBUG_315), 15).expect("3.15");
        assert_eq!(
            (g15.gil, g15.collecting, g15.tstate_thread_id, g15.flags),
            (
                At::Interpreter(7736),
                At::Interpreter(7512),
                176,
                Some((36, 40))
            )
        );
        // a GIL whose lock moved is refused, not read at a guess
        let mut moved = DEBUG_314;
        moved[18] += 8;
        assert!(GilTable::from_debug_offsets(&bytes(&moved), 14).is_err());
    }

    #[test]
    fn bad_debug_offsets_are_refused() {
        let mut free = DEBUG_314;
        free[2] = 1;
        let err = Layout::parse_debug_offsets(&bytes(&free), 14).unwrap_err();
        assert_eq!(err.to_string(), FREE_THREADED);
        // another minor version's struct, a missing cookie, a field past its structure
        assert!(Layout::parse_debug_offsets(&bytes(&DEBUG_314), 15).is_err());
        // a coroutine's frame state past its frame, a frame past the object's end
        let mut state = DEBUG_314;
        state[86] = 80;
        assert!(Layout::parse_debug_offsets(&bytes(&state), 14).is_err());
        let mut frame = DEBUG_315;
        frame[101] = 100;
        assert!(Layout::parse_debug_offsets(&bytes(&frame), 15).is_err());
        let mut cookie = DEBUG_313;
        cookie[0] = 0;
        assert!(Layout::parse_debug_offsets(&bytes(&cookie), 13).is_err());
        let mut odd = DEBUG_314;
        odd[20] = 7993; // a count of code objects freed that is not a word of its own
        assert!(Layout::parse_debug_offsets(&bytes(&odd), 14).is_err());
        let mut wild = DEBUG_313;
        wild[43] = 1 << 20; // co_code_adaptive
        assert!(Layout::parse_debug_offsets(&bytes(&wild), 13).is_err());
        assert!(Layout::parse_debug_offsets(&bytes(&DEBUG_313[..40]), 13).is_err());
    }
}
