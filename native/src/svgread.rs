//! inferno's flamegraph SVGs (py-spy's, sidecar's) back into folded stacks, natively.
//!
//! This is the fast path of `sidecar/svg.py`, not a general reader: it answers only for a
//! document it can prove is well-formed XML with inferno's exact frame structure, and returns
//! `None` for anything else, so the Python reader (expat, hardened) reads it and gives its own
//! answer or error. Being stricter than expat costs only time; it must never be more lenient.
//!
//! What is checked, over the whole document, before an answer is given:
//! - UTF-8 (with an optional BOM; a declared encoding must be UTF-8), no character XML forbids;
//! - an XML declaration only at the start, no processing instructions, comments without `--`;
//! - a DOCTYPE only before the root and only without an internal subset: no entity can be
//!   declared, so nothing is expanded; an external subset is never read;
//! - ASCII names, attributes quoted, separated and not repeated, no `<` in their values;
//! - references: only `&lt;` `&gt;` `&amp;` `&quot;` `&apos;` and character references to
//!   characters XML allows; no `]]>` in text; one root element named `svg`, tags matched, no
//!   text outside it; nesting no deeper than the caller's limit (the Python reader refuses it).
//!
//! inferno's structure: one `<svg id="frames">` holding nothing but frames, each
//! `<g>[<a ...>]<title>NAME (COUNT UNIT, PCT%[; DELTA%])</title><rect ... y fg:x fg:w/>`
//! `[<text ...>...</text>][</a>]</g>`, and no `<g>` anywhere else. The frames are then put
//! together as the Python reader does (rows by `y`, the root row found, parents by sample
//! range) and folded; any inconsistency, or a case the Python reader decides from the SVG's
//! script, is left to it.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// Integers above this are not exact as floats; the Python reader takes them.
const EXACT: u64 = 1 << 53;
const PRUNED_FRAME: &str = "[pruned]";
const SEMICOLON_STANDIN: &str = "\u{ff1b}";

/// What the Python side needs to make the profile and its notes.
pub struct Read {
    /// Folded stacks (frames root first, ';' in names replaced) with their self counts,
    /// in the order the Python reader inserts them.
    pub stacks: Vec<(String, u64)>,
    /// The root frame's count: the graph's total.
    pub total: u64,
    /// The count in the root frame's title.
    pub root_title_count: u64,
    /// Some title has a differential part ("; +1.2%").
    pub differential: bool,
    /// Frames whose title count disagrees with fg:w (scaled by the root's ratio), and the first.
    pub off: usize,
    pub first_off: Option<String>,
    /// The frames container's `total_samples` attribute.
    pub total_samples: Option<String>,
    /// Frames whose name holds a ';'.
    pub renamed: usize,
    /// The root's count less its children's (top-level frames too narrow to draw).
    pub root_self: u64,
    /// The smallest positive count of a frame below the root, 0 if none.
    pub smallest: u64,
}

struct Frame {
    name: String,
    /// The name holds a ';' (written as U+FF1B in stacks).
    semicolon: bool,
    title_count: u64,
    y: u64,
    start: u64,
    width: u64,
}

/// The frames of an inferno SVG, folded; `None` when the Python reader must decide.
pub fn read(data: &[u8], max_depth: usize) -> Option<Read> {
    let doc = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
    if !characters_allowed(doc) {
        return None;
    }
    let (frames, total_samples, differential) = Scanner::new(doc, max_depth).scan()?;
    fold(frames, total_samples, differential)
}

/// Valid UTF-8 holding only characters XML allows (no C0 controls but tab, LF, CR; no
/// U+FFFE / U+FFFF; surrogates cannot be UTF-8).
fn characters_allowed(doc: &[u8]) -> bool {
    if std::str::from_utf8(doc).is_err() {
        return false;
    }
    // Blocks without a control byte or 0xEF (the lead byte of U+FFFE / U+FFFF) pass at once;
    // the flag is computed without branches so that it vectorizes.
    const BLOCK: usize = 256;
    for (number, block) in doc.chunks(BLOCK).enumerate() {
        let suspect = block.iter().fold(false, |flag, &b| {
            flag | ((b < 0x20) & (b != b'\t') & (b != b'\n') & (b != b'\r')) | (b == 0xEF)
        });
        if !suspect {
            continue;
        }
        for (i, &b) in block.iter().enumerate() {
            if b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r') {
                return false;
            }
            let at = number * BLOCK + i;
            if b == 0xEF
                && doc.get(at + 1) == Some(&0xBF)
                && matches!(doc.get(at + 2), Some(0xBE | 0xBF))
            {
                return false;
            }
        }
    }
    true
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// An XML name, restricted to ASCII (anything else goes to the Python reader).
fn is_name(name: &[u8]) -> bool {
    match name.split_first() {
        Some((first, rest)) => {
            (first.is_ascii_alphabetic() || matches!(first, b'_' | b':'))
                && rest
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.' | b'-'))
        }
        None => false,
    }
}

fn is_xml_char(code: u32) -> bool {
    matches!(code, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

/// The character a reference (what is between '&' and ';') stands for, if XML allows it.
fn resolve(reference: &[u8]) -> Option<char> {
    match reference {
        b"lt" => Some('<'),
        b"gt" => Some('>'),
        b"amp" => Some('&'),
        b"quot" => Some('"'),
        b"apos" => Some('\''),
        _ => {
            let number = reference.strip_prefix(b"#")?;
            let (digits, radix) = match number.strip_prefix(b"x") {
                Some(hex) => (hex, 16),
                None => (number, 10),
            };
            if digits.is_empty() || digits.len() > 8 {
                return None;
            }
            let code = u32::from_str_radix(std::str::from_utf8(digits).ok()?, radix).ok()?;
            if digits.iter().any(|b| !b.is_ascii_hexdigit()) || !is_xml_char(code) {
                return None;
            }
            char::from_u32(code)
        }
    }
}

/// An attribute value: no '<', every '&' a reference XML allows.
fn value_ok(value: &[u8]) -> bool {
    if !value.iter().any(|&b| b == b'<' || b == b'&') {
        return true;
    }
    if value.contains(&b'<') {
        return false;
    }
    let mut rest = value;
    while let Some(at) = rest.iter().position(|&b| b == b'&') {
        let tail = &rest[at + 1..];
        let Some(end) = tail.iter().position(|&b| b == b';') else {
            return false;
        };
        if resolve(&tail[..end]).is_none() {
            return false;
        }
        rest = &tail[end + 1..];
    }
    true
}

/// The attributes of a start tag, checked: `(S name S? = S? "value")* S?`, no name twice.
fn attributes<'a>(raw: &'a [u8], out: &mut Vec<(&'a [u8], &'a [u8])>) -> bool {
    out.clear();
    let mut i = 0;
    loop {
        let before = i;
        while i < raw.len() && is_space(raw[i]) {
            i += 1;
        }
        if i == raw.len() {
            return true;
        }
        if i == before {
            return false; // attributes are separated by white space
        }
        let name_start = i;
        while i < raw.len() && !is_space(raw[i]) && raw[i] != b'=' {
            i += 1;
        }
        let name = &raw[name_start..i];
        while i < raw.len() && is_space(raw[i]) {
            i += 1;
        }
        if i == raw.len() || raw[i] != b'=' {
            return false;
        }
        i += 1;
        while i < raw.len() && is_space(raw[i]) {
            i += 1;
        }
        let Some(&quote) = raw.get(i) else {
            return false;
        };
        if quote != b'"' && quote != b'\'' {
            return false;
        }
        let Some(len) = raw[i + 1..].iter().position(|&b| b == quote) else {
            return false;
        };
        let value = &raw[i + 1..i + 1 + len];
        i += len + 2;
        let repeated = out.iter().any(|(n, _)| same(n, name));
        if !is_name(name) || !value_ok(value) || repeated {
            return false;
        }
        out.push((name, value));
    }
}

fn attribute<'a>(attrs: &[(&'a [u8], &'a [u8])], name: &[u8]) -> Option<&'a [u8]> {
    attrs.iter().find(|(n, _)| same(n, name)).map(|(_, v)| *v)
}

/// Short names compared in line (a call to memcmp costs more than they do).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A value read as is: no reference and no white space that expat would normalize.
fn plain(value: &[u8]) -> Option<&str> {
    if value.iter().any(|&b| b == b'&' || is_space(b)) {
        return None;
    }
    std::str::from_utf8(value).ok()
}

/// An unsigned decimal integer below 2^53.
fn integer(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 16 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let number = value
        .iter()
        .fold(0u64, |n, &digit| n * 10 + u64::from(digit - b'0'));
    (number < EXACT).then_some(number)
}

/// `<?xml version="1.x" [encoding="UTF-8"] [standalone="yes|no"]?>`: what is inside `<?...?>`.
fn declaration_ok(content: &[u8]) -> bool {
    let Some(mut rest) = content.strip_prefix(b"xml") else {
        return false;
    };
    let mut seen = 0;
    let names: [&[u8]; 3] = [b"version", b"encoding", b"standalone"];
    loop {
        let trimmed = trim_start(rest);
        if trimmed.is_empty() {
            return seen > 0;
        }
        if trimmed.len() == rest.len() {
            return false;
        }
        rest = trimmed;
        let Some(index) = names.iter().position(|n| rest.starts_with(n)) else {
            return false;
        };
        if index < seen || (seen == 0 && index != 0) {
            return false;
        }
        seen = index + 1;
        rest = trim_start(&rest[names[index].len()..]);
        let Some(after) = rest.strip_prefix(b"=") else {
            return false;
        };
        rest = trim_start(after);
        let Some((&quote, after)) = rest.split_first() else {
            return false;
        };
        if quote != b'"' && quote != b'\'' {
            return false;
        }
        let Some(len) = after.iter().position(|&b| b == quote) else {
            return false;
        };
        let value = &after[..len];
        rest = &after[len + 1..];
        let ok = match index {
            0 => {
                value.len() > 2
                    && value.starts_with(b"1.")
                    && value[2..].iter().all(u8::is_ascii_digit)
            }
            1 => value.eq_ignore_ascii_case(b"utf-8"),
            _ => value == b"yes" || value == b"no",
        };
        if !ok {
            return false;
        }
    }
}

fn trim_start(bytes: &[u8]) -> &[u8] {
    let at = bytes
        .iter()
        .position(|&b| !is_space(b))
        .unwrap_or(bytes.len());
    &bytes[at..]
}

fn literal(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&quote, rest) = bytes.split_first()?;
    if quote != b'"' && quote != b'\'' {
        return None;
    }
    let len = rest.iter().position(|&b| b == quote)?;
    Some((&rest[..len], &rest[len + 1..]))
}

/// `svg`, optionally `PUBLIC "pubid" "system"` or `SYSTEM "system"`, and no internal subset.
fn doctype_ok(content: &[u8]) -> bool {
    let Some(rest) = content.strip_prefix(b"svg") else {
        return false;
    };
    let trimmed = trim_start(rest);
    if trimmed.is_empty() {
        return true;
    }
    if trimmed.len() == rest.len() {
        return false;
    }
    let rest = if let Some(after) = trimmed.strip_prefix(b"PUBLIC") {
        let after_space = trim_start(after);
        if after_space.len() == after.len() {
            return false;
        }
        let Some((pubid, after)) = literal(after_space) else {
            return false;
        };
        let pubid_char = |b: &u8| {
            b.is_ascii_alphanumeric()
                || matches!(b, b' ' | b'\r' | b'\n')
                || b"-'()+,./:=?;!*#@$_%".contains(b)
        };
        if !pubid.iter().all(pubid_char) {
            return false;
        }
        after
    } else if let Some(after) = trimmed.strip_prefix(b"SYSTEM") {
        after
    } else {
        return false;
    };
    let after_space = trim_start(rest);
    if after_space.len() == rest.len() {
        return false;
    }
    match literal(after_space) {
        Some((_, tail)) => trim_start(tail).is_empty(),
        None => false,
    }
}

/// What the scanner saw of one frame group's title.
fn parse_title(title: &str) -> Option<(&str, u64, bool)> {
    // The Python reader splits at the last " (" (a later one would put '(' in the counts).
    let at = title.rfind(" (")?;
    let (name, tail) = (&title[..at], &title[at + 2..]);
    let tail = tail.strip_suffix(')')?;
    // COUNT UNIT, PCT%[; DELTA%] with ASCII digits; UNIT without "(),;%" keeps it unambiguous.
    let (count, rest) = tail.split_once(' ')?;
    let (unit, rest) = rest.split_once(", ")?;
    if unit.contains(['(', ')', ',', ';', '%']) {
        return None;
    }
    let (pct, delta) = match rest.split_once("; ") {
        Some((pct, delta)) => (pct, Some(delta)),
        None => (rest, None),
    };
    let decimal = |s: &str| {
        let (whole, fraction) = s.split_once('.').unwrap_or((s, "1"));
        !whole.is_empty()
            && !fraction.is_empty()
            && whole.bytes().all(|b| b.is_ascii_digit())
            && fraction.bytes().all(|b| b.is_ascii_digit())
    };
    if !decimal(pct.strip_suffix('%')?) {
        return None;
    }
    if let Some(delta) = delta {
        let delta = delta.strip_suffix('%')?;
        if !decimal(delta.strip_prefix(['+', '-']).unwrap_or(delta)) {
            return None;
        }
    }
    let first = count.bytes().next()?;
    if !first.is_ascii_digit() || !count.bytes().all(|b| b.is_ascii_digit() || b == b',') {
        return None;
    }
    let digits: Vec<u8> = count.bytes().filter(|&b| b != b',').collect();
    Some((name, integer(&digits)?, delta.is_some()))
}

/// Where the scanner is in inferno's frame template.
#[derive(Clone, Copy, PartialEq)]
enum At {
    /// Outside the frames container.
    Outside,
    /// In the container, between frames.
    Frames,
    /// After `<g>`: an `<a>` or the `<title>`.
    Group,
    /// After `<a>`: the `<title>`.
    Link,
    /// In the `<title>`.
    Title,
    /// After `</title>`: the `<rect/>`.
    Rect,
    /// After the `<rect/>`: a `<text>`, `</a>` or `</g>`.
    AfterRect,
    /// In the frame's `<text>`.
    Label,
    /// After the `<text>`: `</a>` or `</g>`.
    AfterLabel,
    /// After `</a>`: `</g>`.
    Close,
    /// After the container.
    Done,
}

struct Scanner<'a> {
    doc: &'a [u8],
    reader: Reader<&'a [u8]>,
    max_depth: usize,
    open: Vec<&'a [u8]>,
    root_seen: bool,
}

type Scanned = (Vec<Frame>, Option<String>, bool);

impl<'a> Scanner<'a> {
    fn new(doc: &'a [u8], max_depth: usize) -> Self {
        let mut reader = Reader::from_reader(doc);
        let config = reader.config_mut();
        config.check_end_names = false; // checked here, against the open elements
        config.check_comments = true;
        config.allow_dangling_amp = false;
        config.allow_unmatched_ends = false;
        config.expand_empty_elements = false;
        config.trim_text(false);
        Scanner {
            doc,
            reader,
            max_depth,
            open: Vec::with_capacity(16),
            root_seen: false,
        }
    }

    fn scan(mut self) -> Option<Scanned> {
        let mut frames: Vec<Frame> = Vec::new();
        let mut total_samples: Option<String> = None;
        let mut differential = false;
        let mut at = At::Outside;
        let mut container_depth = 0;
        let mut title = String::new();
        let mut has_link = false;
        let mut doctype_allowed = true;
        let mut attrs: Vec<(&[u8], &[u8])> = Vec::with_capacity(8);
        let mut first = true;
        loop {
            let position = self.reader.buffer_position() as usize;
            let event = self.reader.read_event().ok()?;
            let starts = |prefix: &[u8]| self.doc[position..].starts_with(prefix);
            let is_first = std::mem::replace(&mut first, false);
            match event {
                Event::Decl(decl) => {
                    if !is_first || position != 0 || !starts(b"<?xml") || !declaration_ok(&decl) {
                        return None;
                    }
                }
                Event::PI(_) => return None,
                Event::DocType(doctype) => {
                    if !doctype_allowed
                        || self.root_seen
                        || !self.open.is_empty()
                        || !starts(b"<!DOCTYPE")
                        || !self.doc.get(position + 9).is_some_and(|&b| is_space(b))
                        || !doctype_ok(&doctype)
                    {
                        return None;
                    }
                    doctype_allowed = false;
                }
                Event::Comment(comment) => {
                    if (at != At::Outside && at != At::Done)
                        || !starts(b"<!--")
                        || comment.ends_with(b"-")
                        || comment.windows(2).any(|w| w == b"--")
                    {
                        return None;
                    }
                }
                Event::CData(_) => {
                    if self.open.is_empty() || at != At::Outside || !starts(b"<![CDATA[") {
                        return None;
                    }
                }
                Event::Text(text) => {
                    if self.open.is_empty() {
                        if !text.iter().all(|&b| is_space(b)) {
                            return None;
                        }
                        continue;
                    }
                    if text.windows(3).any(|w| w == b"]]>") {
                        return None;
                    }
                    match at {
                        At::Outside | At::Done | At::Label => {}
                        At::Title => {
                            // expat turns CR and CR LF into LF; leave that to it.
                            if text.contains(&b'\r') {
                                return None;
                            }
                            title.push_str(std::str::from_utf8(&text).ok()?);
                        }
                        _ => return None,
                    }
                }
                Event::GeneralRef(reference) => {
                    if self.open.is_empty() {
                        return None;
                    }
                    let ch = resolve(&reference)?;
                    match at {
                        At::Outside | At::Done | At::Label => {}
                        At::Title => title.push(ch),
                        _ => return None,
                    }
                }
                Event::Start(element) => {
                    let name = self.open_element(position, &element, &mut attrs)?;
                    self.open.push(name);
                    match (at, name) {
                        (At::Outside, b"g") | (At::Done, b"g") => return None,
                        (At::Outside, b"svg") if attribute(&attrs, b"id") == Some(b"frames") => {
                            total_samples = match attribute(&attrs, b"total_samples") {
                                Some(value) => Some(plain(value)?.to_owned()),
                                None => None,
                            };
                            container_depth = self.open.len();
                            at = At::Frames;
                        }
                        (At::Outside, _) | (At::Done, _) => {
                            if name == b"svg" && attribute(&attrs, b"id") == Some(b"frames") {
                                return None; // a second container
                            }
                        }
                        (At::Frames, b"g") => {
                            has_link = false;
                            at = At::Group;
                        }
                        (At::Group, b"a") => {
                            has_link = true;
                            at = At::Link;
                        }
                        (At::Group, b"title") | (At::Link, b"title") => {
                            title.clear();
                            at = At::Title;
                        }
                        (At::AfterRect, b"text") => at = At::Label,
                        _ => return None,
                    }
                }
                Event::Empty(element) => {
                    let name = self.open_element(position, &element, &mut attrs)?;
                    match (at, name) {
                        (At::Outside, b"g") | (At::Done, b"g") => return None,
                        (At::Outside, b"svg") | (At::Done, b"svg") => {
                            if attribute(&attrs, b"id") == Some(b"frames") {
                                return None;
                            }
                        }
                        (At::Outside, _) | (At::Done, _) => {}
                        (At::Rect, b"rect") => {
                            let (name, title_count, delta) = parse_title(&title)?;
                            differential |= delta;
                            frames.push(Frame {
                                name: name.to_owned(),
                                semicolon: name.contains(';'),
                                title_count,
                                y: integer(attribute(&attrs, b"y")?)?,
                                start: integer(attribute(&attrs, b"fg:x")?)?,
                                width: integer(attribute(&attrs, b"fg:w")?)?,
                            });
                            at = At::AfterRect;
                        }
                        (At::AfterRect, b"text") => at = At::AfterLabel,
                        _ => return None,
                    }
                    if self.open.is_empty() {
                        self.root_seen = true;
                    }
                }
                Event::End(element) => {
                    let name = self.open.pop()?;
                    if element.name().as_ref() != name || !is_name(name) {
                        return None;
                    }
                    at = match (at, name) {
                        (At::Outside, _) | (At::Done, _) => at,
                        (At::Frames, b"svg") if self.open.len() + 1 == container_depth => At::Done,
                        (At::Title, b"title") => At::Rect,
                        (At::Label, b"text") => At::AfterLabel,
                        (At::AfterRect, b"a") | (At::AfterLabel, b"a") if has_link => At::Close,
                        (At::AfterRect, b"g") | (At::AfterLabel, b"g") | (At::Close, b"g")
                            if !has_link || at == At::Close =>
                        {
                            At::Frames
                        }
                        _ => return None,
                    };
                    if self.open.is_empty() {
                        self.root_seen = true;
                    }
                }
                Event::Eof => break,
            }
        }
        if !self.root_seen || !self.open.is_empty() || at != At::Done || frames.is_empty() {
            return None;
        }
        Some((frames, total_samples, differential))
    }

    /// The name and attributes of an element that opens (or is empty), checked: one root
    /// named `svg`, nothing after it, nesting within the limit.
    fn open_element(
        &mut self,
        position: usize,
        element: &BytesStart<'_>,
        attrs: &mut Vec<(&'a [u8], &'a [u8])>,
    ) -> Option<&'a [u8]> {
        // The tag as a slice of the document (what follows its '<'), to keep its parts.
        let tag: &'a [u8] = self.doc.get(position + 1..position + 1 + element.len())?;
        if !std::ptr::eq(tag.as_ptr(), element.as_ptr()) {
            return None;
        }
        let (name, rest) = tag.split_at(element.name().as_ref().len());
        if !is_name(name) || !attributes(rest, attrs) || self.open.len() + 1 > self.max_depth {
            return None;
        }
        if self.open.is_empty() && (self.root_seen || name != b"svg") {
            return None;
        }
        Some(name)
    }
}

/// Rows, orientation, parents and self counts, as the Python reader computes them.
fn fold(frames: Vec<Frame>, total_samples: Option<String>, differential: bool) -> Option<Read> {
    // Rows: distinct y values, a new row where the gap is more than 1 px.
    let mut levels: Vec<u64> = frames.iter().map(|f| f.y).collect();
    levels.sort_unstable();
    levels.dedup();
    let mut row_of_level = Vec::with_capacity(levels.len());
    let mut row = 0usize;
    for (i, &y) in levels.iter().enumerate() {
        if i > 0 && y - levels[i - 1] > 1 {
            row += 1;
        }
        row_of_level.push(row);
    }
    let rows = row + 1;
    let row_of = |y: u64| row_of_level[levels.binary_search(&y).unwrap_or(0)];
    let mut per_row = vec![(0usize, 0usize); rows]; // (frames in the row, the last one)
    for (index, frame) in frames.iter().enumerate() {
        let entry = &mut per_row[row_of(frame.y)];
        entry.0 += 1;
        entry.1 = index;
    }
    // Orientation: the row holding only "all" is the root row; if that does not decide it,
    // the Python reader asks the SVG's script.
    let inverted = if rows == 1 {
        false
    } else {
        let is_root = |(count, index): (usize, usize)| count == 1 && frames[index].name == "all";
        let (top, bottom) = (is_root(per_row[0]), is_root(per_row[rows - 1]));
        if top == bottom {
            return None;
        }
        top
    };
    let depth_of = |frame: &Frame| {
        let r = row_of(frame.y);
        if inverted {
            r
        } else {
            rows - 1 - r
        }
    };
    let mut order: Vec<(usize, u64, usize)> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| (depth_of(f), f.start, i))
        .collect();
    order.sort_by_key(|&(depth, start, _)| (depth, start)); // stable, like Python's sort
    let depths: Vec<usize> = order.iter().map(|o| o.0).collect();
    let sorted: Vec<&Frame> = order.iter().map(|o| &frames[o.2]).collect();
    // One root frame named "all" (else the Python reader adds a synthetic one).
    if depths.get(1) == Some(&0) || sorted[0].name != "all" {
        return None;
    }
    // Parents: both rows in start order, one merge pass per row.
    let mut parent = vec![0usize; sorted.len()];
    let (mut lo, mut first) = (0, 1);
    while first < sorted.len() {
        let depth = depths[first];
        let end = first + depths[first..].iter().take_while(|&&d| d == depth).count();
        if depths[lo] + 1 != depth {
            return None;
        }
        let hi = first;
        let mut at = lo;
        let mut stop = sorted[at].start + sorted[at].width;
        for index in first..end {
            let frame = sorted[index];
            while frame.start >= stop && at + 1 < hi {
                at += 1;
                stop = sorted[at].start + sorted[at].width;
            }
            if frame.start < sorted[at].start || frame.start + frame.width > stop {
                return None;
            }
            parent[index] = at;
        }
        (lo, first) = (first, end);
    }
    // Self counts on the stacks that end in each frame.
    let mut children = vec![0u64; sorted.len()];
    for index in 1..sorted.len() {
        let sum = &mut children[parent[index]];
        *sum = sum.checked_add(sorted[index].width)?;
    }
    let mut stacks: Vec<(String, u64)> = Vec::new();
    let mut slot: HashMap<String, usize, FxBuildHasher> = HashMap::default();
    let mut add = |stacks: &mut Vec<(String, u64)>, path: String, count: u64| match slot.get(&path)
    {
        Some(&i) => stacks[i].1 += count,
        None => {
            slot.insert(path.clone(), stacks.len());
            stacks.push((path, count));
        }
    };
    let mut renamed = 0;
    let mut chain: Vec<usize> = Vec::new();
    for index in 1..sorted.len() {
        if sorted[index].semicolon {
            renamed += 1;
        }
        let own = sorted[index].width;
        if own < children[index] {
            return None; // wider children: the Python reader refuses the graph
        }
        if own == children[index] {
            continue;
        }
        chain.clear();
        let mut at = index;
        while at != 0 {
            chain.push(at);
            at = parent[at];
        }
        // As the Python reader joins them: a parent's empty path adds no separator.
        let mut path = String::new();
        for &frame in chain.iter().rev() {
            if !path.is_empty() {
                path.push(';');
            }
            let frame = sorted[frame];
            if frame.semicolon {
                path.push_str(&frame.name.replace(';', SEMICOLON_STANDIN));
            } else {
                path.push_str(&frame.name);
            }
        }
        add(&mut stacks, path, own - children[index]);
    }
    let root = sorted[0];
    let root_self = root.width.checked_sub(children[0])?;
    if root_self > 0 {
        add(&mut stacks, PRUNED_FRAME.to_owned(), root_self);
    }
    if stacks.is_empty() {
        return None;
    }
    // Titles that disagree with fg:w, scaled by the root's ratio (--factor).
    let factor = if root.width > 0 {
        root.title_count as f64 / root.width as f64
    } else {
        1.0
    };
    let mut off = 0;
    let mut first_off = None;
    for frame in &sorted {
        if (frame.title_count as f64 - frame.width as f64 * factor).abs() > 1.0 {
            off += 1;
            first_off.get_or_insert_with(|| frame.name.clone());
        }
    }
    let smallest = sorted[1..]
        .iter()
        .map(|f| f.width)
        .filter(|&w| w > 0)
        .min()
        .unwrap_or(0);
    Some(Read {
        stacks,
        total: root.width,
        root_title_count: root.title_count,
        differential,
        off,
        first_off,
        total_samples,
        renamed,
        root_self,
        smallest,
    })
}

/// The folded stacks of an inferno flamegraph SVG and what its notes need, or None when the
/// document is not (provably) inferno's; `max_depth` is the nesting the caller allows.
#[pyfunction]
#[pyo3(signature = (data, *, max_depth))]
pub fn read_inferno_svg<'py>(
    py: Python<'py>,
    data: &[u8],
    max_depth: usize,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(read) = py.detach(|| read(data, max_depth)) else {
        return Ok(None);
    };
    let stacks = PyDict::new(py);
    for (stack, count) in &read.stacks {
        stacks.set_item(stack, count)?;
    }
    let out = PyDict::new(py);
    out.set_item("stacks", stacks)?;
    out.set_item("total", read.total)?;
    out.set_item("root_title_count", read.root_title_count)?;
    out.set_item("differential", read.differential)?;
    out.set_item("off", read.off)?;
    out.set_item("first_off", read.first_off)?;
    out.set_item("total_samples", read.total_samples)?;
    out.set_item("renamed", read.renamed)?;
    out.set_item("root_self", read.root_self)?;
    out.set_item("smallest", read.smallest)?;
    Ok(Some(out))
}
