//! A frame's local variables and short reprs of what they hold, read from the target's memory
//! and never by running code in it (`sidecar dump --locals`).
//!
//! A frame keeps its locals, cells and free variables in `localsplus`, in the order of its
//! code object's `co_localsplusnames`, each slot's kind in `co_localspluskinds`. Up to 3.13 a
//! slot holds an object's address (0: not bound yet, or deleted); from 3.14 a `_PyStackRef`,
//! whose low two bits are tags (both set: a small int held in the slot itself). A cell
//! variable's slot holds the cell once the function made it, and the value is the cell's.
//!
//! Values are shown as Python would write them where that is short and needs no code of the
//! target: `None`, `True`, an int, a float, a str or bytes cut at a length; a list, tuple,
//! dict, set or frozenset by its type and length; anything else by its type and address. The
//! type is told by its name (`tp_name`): a subclass of str shows as an object. The target runs
//! on while it is read: a value that does not read (freed, torn) shows as `<unreadable>`, and
//! never fails the dump.

use std::collections::HashMap;

use anyhow::{bail, Result};

use super::layout::{tuple_items, Layout};
use super::objects::{bytes, string};
use crate::process::memory::{read, u32_at, usize_at};
use rustc_hash::FxBuildHasher;

/// `co_localspluskinds` bits: a hidden local (3.12+, the inlined comprehension's), and the
/// cell and free variables, whose slots hold cells.
const KIND_HIDDEN: u8 = 0x10;
const KIND_CELL: u8 = 0x40;
const KIND_FREE: u8 = 0x80;
/// Sanity bounds against torn or garbage reads.
const MAX_LOCALS: usize = 1024;
const MAX_TYPE_NAME: usize = 96;
/// Digits of 30 bits an int may have to be shown whole (120 bits).
const MAX_INT_DIGITS: usize = 4;
/// `PyTypeObject.tp_name`, after the variable-size object header, in every version read.
const TP_NAME: usize = 24;
/// `PyLongObject`'s size (3.11) or tag (3.12+) word, its digits after it; a float's value,
/// a list's or tuple's size, a dict's count, a cell's object: the word after the header.
const WORD_AFTER_HEAD: usize = 16;
const DIGITS: usize = 24;
/// `PySetObject.used`, after its `fill`.
const SET_USED: usize = 24;

/// The reads of one dump: the names of each code object's locals and the names of types met,
/// by address, kept across its frames.
pub struct Values<'a> {
    pid: i32,
    layout: &'a Layout,
    /// Characters of a str (bytes of a bytes) shown before it is cut.
    max_chars: usize,
    names: HashMap<usize, Vec<(String, u8)>, FxBuildHasher>,
    types: HashMap<usize, String, FxBuildHasher>,
}

impl<'a> Values<'a> {
    pub fn new(pid: i32, layout: &'a Layout, max_chars: usize) -> Values<'a> {
        Values {
            pid,
            layout,
            max_chars: max_chars.max(1),
            names: HashMap::default(),
            types: HashMap::default(),
        }
    }

    /// The bound locals of the frame at `frame`, running the code object at `code` whose
    /// checked header (`Layout::code_first`, `code_size`) is `header`: (name, repr) each, in
    /// the code's order; an error when the frame or the code's names do not read.
    pub fn locals(
        &mut self,
        frame: usize,
        code: usize,
        header: &[u8],
    ) -> Result<Vec<(String, String)>> {
        if !self.names.contains_key(&code) {
            let names = local_names(self.pid, self.layout, header)?;
            self.names.insert(code, names);
        }
        let names = self.names.get(&code).cloned().unwrap_or_default();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut slots = vec![0u8; names.len() * 8];
        read(self.pid, frame + self.layout.frame_localsplus, &mut slots)?;
        let mut locals = Vec::new();
        for (i, (name, kind)) in names.iter().enumerate() {
            if kind & KIND_HIDDEN != 0 {
                continue;
            }
            let slot = usize_at(&slots, i * 8);
            let shown = match self.slot(slot) {
                Slot::Unbound => continue,
                Slot::Int(value) => value.to_string(),
                Slot::Object(address) if kind & (KIND_CELL | KIND_FREE) != 0 => {
                    match self.cell_content(address) {
                        Ok(Some(0)) => continue,
                        Ok(Some(inner)) => self.repr(inner),
                        Ok(None) => self.repr(address),
                        Err(_) => UNREADABLE.to_string(),
                    }
                }
                Slot::Object(address) => self.repr(address),
            };
            locals.push((name.clone(), shown));
        }
        Ok(locals)
    }

    /// What a slot of `localsplus` holds.
    fn slot(&self, raw: usize) -> Slot {
        slot_of(self.layout, raw)
    }

    /// The object a cell holds (0: empty), or None when `address` is not a cell (a cell
    /// variable's argument, before the function made its cell).
    fn cell_content(&mut self, address: usize) -> Result<Option<usize>> {
        let mut head = [0u8; 24];
        read(self.pid, address, &mut head)?;
        if self.type_name(usize_at(&head, 8))? != "cell" {
            return Ok(None);
        }
        Ok(Some(usize_at(&head, WORD_AFTER_HEAD)))
    }

    /// The short repr of the object at `address`; `<unreadable>` when it does not read.
    pub fn repr(&mut self, address: usize) -> String {
        self.try_repr(address)
            .unwrap_or_else(|_| UNREADABLE.to_string())
    }

    fn try_repr(&mut self, address: usize) -> Result<String> {
        if !address.is_multiple_of(8) || address < 1 << 12 {
            bail!("not an object's address");
        }
        let mut head = [0u8; 32];
        read(self.pid, address, &mut head)?;
        let kind = self.type_name(usize_at(&head, 8))?;
        let word = usize_at(&head, WORD_AFTER_HEAD);
        Ok(match kind.as_str() {
            "NoneType" => "None".to_string(),
            "bool" => if self.int(address, word)? == "0" {
                "False"
            } else {
                "True"
            }
            .to_string(),
            "int" => self.int(address, word)?,
            "float" => float_repr(f64::from_bits(word as u64)),
            "str" => self.str_repr(address)?,
            "bytes" => self.bytes_repr(address)?,
            "list" | "tuple" | "dict" => sized(&kind, word)?,
            "set" | "frozenset" => sized(&kind, usize_at(&head, SET_USED))?,
            _ => format!("<{kind} at {address:#x}>"),
        })
    }

    /// The name of the type at `address`, cached.
    fn type_name(&mut self, address: usize) -> Result<String> {
        if let Some(name) = self.types.get(&address) {
            return Ok(name.clone());
        }
        if !address.is_multiple_of(8) || address < 1 << 12 {
            bail!("not a type's address");
        }
        let mut pointer = [0u8; 8];
        read(self.pid, address + TP_NAME, &mut pointer)?;
        let mut raw = [0u8; MAX_TYPE_NAME];
        read(self.pid, usize_at(&pointer, 0), &mut raw)?;
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        let name = String::from_utf8_lossy(&raw[..end]).into_owned();
        if name.is_empty() || name.chars().any(|c| c.is_control()) {
            bail!("a type name that does not read: a torn read");
        }
        self.types.insert(address, name.clone());
        Ok(name)
    }

    /// An int's value in decimal, from its size (3.11) or tag (3.12+) `word`; one of more
    /// than 120 bits by its size.
    fn int(&self, address: usize, word: usize) -> Result<String> {
        let (digits, negative) = if self.layout.minor <= 11 {
            let size = word as i64;
            (size.unsigned_abs() as usize, size < 0)
        } else {
            (word >> 3, word & 3 == 2)
        };
        if digits > MAX_INT_DIGITS {
            return Ok(format!("<int of {} bits>", digits * 30));
        }
        let mut raw = vec![0u8; digits * 4];
        read(self.pid, address + DIGITS, &mut raw)?;
        let mut value: u128 = 0;
        for i in (0..digits).rev() {
            value = (value << 30) | u128::from(u32_at(&raw, i * 4) & ((1 << 30) - 1));
        }
        Ok(if negative && value != 0 {
            format!("-{value}")
        } else {
            value.to_string()
        })
    }

    /// A str's repr, cut at `max_chars` characters (its length said after).
    fn str_repr(&self, address: usize) -> Result<String> {
        let layout = self.layout;
        let mut head = vec![0u8; layout.str_state.max(layout.str_length) + 8];
        read(self.pid, address, &mut head)?;
        let length = usize_at(&head, layout.str_length);
        let state = u32_at(&head, layout.str_state);
        let kind = ((state >> 2) & 7) as usize;
        let (compact, ascii) = (state & (1 << 5) != 0, state & (1 << 6) != 0);
        if !compact || !matches!(kind, 1 | 2 | 4) || length > 1 << 40 {
            return Ok(format!("<str of {length} characters>"));
        }
        let shown = length.min(self.max_chars);
        let data = if ascii {
            layout.str_ascii_data
        } else {
            layout.str_compact_data
        };
        let mut raw = vec![0u8; shown * kind];
        read(self.pid, address + data, &mut raw)?;
        let chars = raw.chunks_exact(kind).map(|c| {
            let mut code = [0u8; 4];
            code[..kind].copy_from_slice(c);
            char::from_u32(u32::from_le_bytes(code)).unwrap_or('\u{fffd}')
        });
        Ok(cut(quoted(chars, ""), shown, length))
    }

    /// A bytes object's repr, cut at `max_chars` bytes (its size said after).
    fn bytes_repr(&self, address: usize) -> Result<String> {
        let layout = self.layout;
        let mut size = [0u8; 8];
        read(self.pid, address + layout.bytes_size, &mut size)?;
        let size = usize_at(&size, 0);
        if size > 1 << 40 {
            bail!("a bytes object of {size} bytes: a torn read");
        }
        let shown = size.min(self.max_chars);
        let mut raw = vec![0u8; shown];
        read(self.pid, address + layout.bytes_data, &mut raw)?;
        Ok(cut(
            quoted(raw.iter().map(|&b| char::from(b)), "b"),
            shown,
            size,
        ))
    }
}

/// The names and kinds of the `localsplus` of the code object whose checked header
/// (`Layout::code_first`, `code_size`) is `header`.
pub fn local_names(pid: i32, layout: &Layout, header: &[u8]) -> Result<Vec<(String, u8)>> {
    let end = layout.code_localsplusnames.max(layout.code_localspluskinds) + 8;
    if layout.code_localsplusnames < layout.code_first || end > layout.code_first + header.len() {
        bail!("the code object's header does not hold its local names");
    }
    let field = |offset: usize| usize_at(header, offset - layout.code_first);
    let (tuple, kinds_at) = (
        field(layout.code_localsplusnames),
        field(layout.code_localspluskinds),
    );
    let kinds = bytes(pid, layout, kinds_at)?;
    let mut head = [0u8; 24];
    read(pid, tuple, &mut head)?;
    let count = usize_at(&head, WORD_AFTER_HEAD);
    if count != kinds.len() || count > MAX_LOCALS {
        bail!("a code object's local names do not match their kinds: a torn read");
    }
    let mut items = vec![0u8; count * 8];
    read(pid, tuple + tuple_items(layout.minor), &mut items)?;
    (0..count)
        .map(|i| Ok((string(pid, layout, usize_at(&items, i * 8))?, kinds[i])))
        .collect()
}

/// The object a local's slot read as `raw` holds: None when it is unbound, or a small int
/// tagged in the slot itself (3.14+). A cell variable's slot holds its cell.
pub fn slot_object(layout: &Layout, raw: usize) -> Option<usize> {
    match slot_of(layout, raw) {
        Slot::Object(address) => Some(address),
        Slot::Unbound | Slot::Int(_) => None,
    }
}

fn slot_of(layout: &Layout, raw: usize) -> Slot {
    let tags = layout.local_tags;
    if tags != 0 && raw & tags == tags {
        return Slot::Int((raw as i64) >> 2);
    }
    match raw & !tags {
        0 => Slot::Unbound,
        address => Slot::Object(address),
    }
}

/// What a slot of a frame's `localsplus` holds.
enum Slot {
    Unbound,
    /// 3.14+: a small int tagged in the slot itself.
    Int(i64),
    Object(usize),
}

pub const UNREADABLE: &str = "<unreadable>";

/// A container by its type and length.
fn sized(kind: &str, length: usize) -> Result<String> {
    if length > 1 << 40 {
        bail!("a {kind} of {length} items: a torn read");
    }
    Ok(format!("<{kind} of {length}>"))
}

/// Characters written as Python writes a str (`prefix` "") or bytes (`prefix` "b") literal:
/// single quotes unless the text holds one and no double quote, escapes for the rest.
fn quoted(chars: impl Iterator<Item = char>, prefix: &str) -> String {
    let text: Vec<char> = chars.collect();
    let quote = if text.contains(&'\'') && !text.contains(&'"') {
        '"'
    } else {
        '\''
    };
    let bytes = !prefix.is_empty();
    let mut out = String::with_capacity(text.len() + 3);
    out.push_str(prefix);
    out.push(quote);
    for c in text {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if bytes && !(' '..='~').contains(&c) => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => match c as u32 {
                n if n <= 0xff => out.push_str(&format!("\\x{n:02x}")),
                n => out.push_str(&format!("\\u{n:04x}")),
            },
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// A literal of `shown` of `length` characters, said to be cut when it is.
fn cut(literal: String, shown: usize, length: usize) -> String {
    if shown < length {
        format!("{literal}... ({length} in all)")
    } else {
        literal
    }
}

/// A float as Python's `repr` writes it: the shortest digits that read back the same, with a
/// decimal point or a signed exponent of two digits or more.
fn float_repr(value: f64) -> String {
    if value.is_nan() {
        return "nan".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.into();
    }
    let magnitude = value.abs();
    if magnitude != 0.0 && !(1e-4..1e16).contains(&magnitude) {
        let text = format!("{value:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let (sign, digits) = match exponent.strip_prefix('-') {
            Some(digits) => ('-', digits),
            None => ('+', exponent),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    let text = format!("{value}");
    if text.contains('.') {
        text
    } else {
        format!("{text}.0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_python_writes_them() {
        let cases = [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1.5e300, "1.5e+300"),
            (1e-7, "1e-07"),
            (0.0001, "0.0001"),
            (0.0, "0.0"),
            (f64::INFINITY, "inf"),
        ];
        for (value, python) in cases {
            assert_eq!(float_repr(value), python, "{value}");
        }
    }

    #[test]
    fn literals_are_quoted_and_escaped_as_python_does() {
        assert_eq!(quoted("it's".chars(), ""), "\"it's\"");
        assert_eq!(quoted("a'b\"c".chars(), ""), "'a\\'b\"c'");
        assert_eq!(quoted("tab\there\n".chars(), ""), "'tab\\there\\n'");
        assert_eq!(quoted("\u{7}é".chars(), ""), "'\\x07é'");
        let raw = [b'a', 0, 0xff];
        assert_eq!(
            quoted(raw.iter().map(|&b| char::from(b)), "b"),
            "b'a\\x00\\xff'"
        );
        assert_eq!(cut("'abc'".into(), 3, 10), "'abc'... (10 in all)");
        assert_eq!(cut("'abc'".into(), 3, 3), "'abc'");
    }
}
