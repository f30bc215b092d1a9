//! Python objects as the walker decodes them from the target's memory: strings, bytes, code
//! objects with their line tables, and how a frame of one is shown.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Result};

use super::layout::Layout;
use crate::process::memory::{read, read_pieces, u32_at, usize_at};
use crate::rules::{format_frame, wait_of, Wait};
use rustc_hash::FxBuildHasher;

/// Sanity bounds against torn or garbage reads.
const MAX_STRING: usize = 4096;
const MAX_LINETABLE: usize = 1 << 20;

/// A code object as first read, with its formatted frames by instruction offset.
pub struct Code {
    /// The fields checked every sample (`Layout::code_first`, `code_size`).
    pub header: Vec<u8>,
    /// The interpreter's count of code objects freed when the header was last checked (read
    /// before it), from 3.14: while the count stands there, the code is still this one.
    pub checked: Option<u64>,
    /// Where the heads of its name's and its file name's string objects lie, and what they
    /// held when it was loaded (`Layout::string_mark`): a code object freed and made again of
    /// the same shape, its strings at the same addresses, has the same header, but not these.
    pub marks_at: [(usize, usize); 2],
    pub marks: Vec<u8>,
    name: String,
    /// The filename as shown: shortened to its package path like py-spy does.
    shown: String,
    first_line: i32,
    table: Vec<u8>,
    /// Whether the function is a known wait (`threading.wait`, `selectors.select`, ...).
    pub waits: Wait,
    /// Not a frame of the program: the trampolines 3.13+ runs on entry (`<shim>`).
    pub hidden: bool,
    frames: HashMap<i64, Arc<str>, FxBuildHasher>,
}

impl Code {
    /// Reads the code object at `address` whose checked fields are `header`.
    ///
    /// Its names and line table are objects of their own, read after the header: were the
    /// code freed meanwhile, they could be freed too and their memory hold another's name (a
    /// thread that compiles and drops functions all the time showed `gen_761_5 (gen_762_0:3)`,
    /// the next function's name read as this one's file). So the object is read again after
    /// them and must still be this code, alive: the same header, the same type, a plausible
    /// reference count (`live_head`).
    pub fn load(
        pid: i32,
        layout: &Layout,
        address: usize,
        header: &[u8],
        files: &mut ShortFiles,
    ) -> Result<Code> {
        let mut head = [0u8; 16];
        read(pid, address, &mut head)?;
        let kind = live_head(&head, None)?;
        let field = |offset: usize| usize_at(header, offset - layout.code_first);
        let file_at = field(layout.code_filename);
        let file = string(pid, layout, file_at)?;
        let (name, name_at) = match string(pid, layout, field(layout.code_qualname)) {
            Ok(name) => (name, field(layout.code_qualname)),
            Err(_) => (
                string(pid, layout, field(layout.code_name))?,
                field(layout.code_name),
            ),
        };
        let table = bytes(pid, layout, field(layout.code_linetable))?;
        // the head and the header again, and the marks of the names, in one read
        let marks_at = [layout.string_mark(name_at), layout.string_mark(file_at)];
        let end = 16 + header.len();
        let mut again = vec![0u8; end + marks_at[0].1 + marks_at[1].1];
        let pieces = [
            (address, 16),
            (address + layout.code_first, header.len()),
            marks_at[0],
            marks_at[1],
        ];
        read_pieces(pid, &pieces, &mut again)?;
        live_head(&again[..16], Some(kind))?;
        if again[16..end] != *header {
            bail!("a code object that changed while it was read: a torn read");
        }
        let first_line = u32_at(header, layout.code_firstlineno - layout.code_first) as i32;
        Ok(Code {
            header: header.to_vec(),
            checked: None,
            marks_at,
            marks: again[end..].to_vec(),
            waits: wait_of(&name, &file),
            hidden: file.is_empty() || file == "<shim>",
            shown: files.short(&file),
            name,
            first_line,
            table,
            frames: HashMap::default(),
        })
    }

    /// The formatted frame at an instruction offset, cached.
    pub fn frame(&mut self, offset: i64) -> Arc<str> {
        if let Some(text) = self.frames.get(&offset) {
            return text.clone();
        }
        let line = line_number(&self.table, self.first_line, offset);
        let text: Arc<str> = Arc::from(format_frame(&self.name, &self.shown, line));
        if self.frames.len() < 4096 {
            self.frames.insert(offset, text.clone());
        }
        text
    }

    /// Its function's name, its file as shown and the line at an instruction offset.
    pub fn parts(&self, offset: i64) -> (&str, &str, i32) {
        let line = line_number(&self.table, self.first_line, offset);
        (&self.name, &self.shown, line)
    }

    /// About what the code costs in memory, for the cache's bound.
    pub fn cost(&self) -> usize {
        self.name.len() + self.shown.len() + self.table.len() + self.header.len() + 256
    }
}

/// The type of a live object whose first two words (reference count, type) are `head`, when
/// it is `same` if given. Freed memory fails: the allocators write their links over the first
/// word (pymalloc an address or 0, glibc a pointer it mangles, its cache of freed blocks a
/// random key over the second too), so the count is 0 or an address, or the type no address.
/// (A count of 2**48 or more is 3.14's static objects: their flags are the word's top bits.)
fn live_head(head: &[u8], same: Option<usize>) -> Result<usize> {
    let (count, kind) = (usize_at(head, 0), usize_at(head, 8));
    let plausible = count != 0
        && !(1 << 40..1 << 48).contains(&count)
        && kind % 8 == 0
        && (1 << 16..1 << 47).contains(&kind)
        && same.is_none_or(|same| same == kind);
    if !plausible {
        bail!("a code object freed while it was read: a torn read");
    }
    Ok(kind)
}

/// A `str` object's text: compact strings of 1, 2 or 4 bytes a character.
pub(crate) fn string(pid: i32, layout: &Layout, address: usize) -> Result<String> {
    if address == 0 {
        bail!("a null string");
    }
    let mut head = vec![0u8; layout.str_state.max(layout.str_length) + 8];
    read(pid, address, &mut head)?;
    let length = usize_at(&head, layout.str_length);
    let state = u32_at(&head, layout.str_state);
    // the state bit field: interned (2 bits), kind (3), compact, ascii, in every version read
    let kind = ((state >> 2) & 7) as usize;
    let compact = state & (1 << 5) != 0;
    let ascii = state & (1 << 6) != 0;
    if !compact || !matches!(kind, 1 | 2 | 4) || length > MAX_STRING {
        bail!("a string this reader does not handle (kind {kind}, length {length})");
    }
    let data = if ascii {
        layout.str_ascii_data
    } else {
        layout.str_compact_data
    };
    let mut raw = vec![0u8; length * kind];
    read(pid, address + data, &mut raw)?;
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

/// A `bytes` object's contents.
pub(crate) fn bytes(pid: i32, layout: &Layout, address: usize) -> Result<Vec<u8>> {
    if address == 0 {
        bail!("a null bytes object");
    }
    let mut head = [0u8; 8];
    read(pid, address + layout.bytes_size, &mut head)?;
    let size = usize_at(&head, 0);
    if size > MAX_LINETABLE {
        bail!("a line table of {size} bytes: a torn read");
    }
    let mut raw = vec![0u8; size];
    read(pid, address + layout.bytes_data, &mut raw)?;
    Ok(raw)
}

/// Files as py-spy shows them: relative to the outermost directory that is not a package.
pub struct ShortFiles {
    pid: i32,
    dockerized: bool,
    known: HashMap<String, String>,
}

impl ShortFiles {
    pub fn new(pid: i32, dockerized: bool) -> Self {
        ShortFiles {
            pid,
            dockerized,
            known: HashMap::new(),
        }
    }

    fn short(&mut self, file: &str) -> String {
        if let Some(short) = self.known.get(file) {
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
        if self.known.len() > 65_536 {
            self.known.clear();
        }
        self.known.insert(file.to_string(), short.clone());
        short
    }
}

/// The source line of the instruction `offset` bytes into the code, from the location table
/// of CPython 3.11 and later (the format is the same through 3.15): entries of a first byte
/// (bit 7 set, code in bits 3–6, length in code units minus one in bits 0–2) and, by code,
/// varints of line delta and columns.
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
    fn an_object_read_after_it_was_freed_is_refused() {
        // an object's first two words: a count and a type
        let head =
            |words: [usize; 2]| -> Vec<u8> { words.iter().flat_map(|w| w.to_le_bytes()).collect() };
        let kind = 0x55d0_0040_1000usize;
        assert_eq!(live_head(&head([3, kind]), None).unwrap(), kind);
        assert_eq!(live_head(&head([3, kind]), Some(kind)).unwrap(), kind);
        // 3.14's static objects carry flags in the count's top bits
        assert!(live_head(&head([(3 << 30) | (1 << 50), kind]), Some(kind)).is_ok());
        // freed: pymalloc's link to the next free block, or none; glibc's mangled link with
        // the key of its cache of freed blocks over the type; another type than before
        for freed in [
            [0x7f3a_2c01_8e40, kind],
            [0, kind],
            [0x0005_5d00_0401, 0x9e1b_7c3f_22a4_5d10],
            [3, kind + 64],
        ] {
            assert!(live_head(&head(freed), Some(kind)).is_err(), "{freed:x?}");
        }
    }
}
