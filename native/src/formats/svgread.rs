//! Flamegraph SVGs read natively: the one production reader of `sidecar/svg.py`.
//!
//! The document is untrusted XML. It is tokenized by quick-xml and checked here, and any
//! problem is one line naming what is wrong and where (line and column):
//! - UTF-8 (with an optional BOM; a declared encoding must be UTF-8), no character XML forbids;
//! - an XML declaration only at the start; processing instructions and comments are skipped;
//! - a DOCTYPE only before the root and without an internal subset: no entity can be declared,
//!   so nothing is expanded, and an external subset is never read; references are XML's five
//!   (`&lt;` `&gt;` `&amp;` `&quot;` `&apos;`) and character references to characters XML allows;
//! - names, attributes quoted, separated and not repeated, tags matched, one root element and no
//!   text outside it, nesting no deeper than the caller's limit.
//!
//! Text and attribute values are read as XML says (line ends normalized, white space in
//! attribute values made spaces). A frame is a `<title>`'s text inside a `<g>` followed by a
//! `<rect>`, paired as the test oracle (expat, tests/svg_oracle.py) pairs them. When every frame
//! has inferno's exact `fg:x` / `fg:w` and the graph is consistent, the frames are folded into
//! stacks here (rows by `y`, the root row found, parents by sample range); otherwise the frames
//! go to `sidecar/svg.py`, which reads their geometry (flamegraph.pl's layout) or says what is
//! inconsistent.

use std::borrow::Cow;
use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// Integers above this are not exact as floats; the Python side takes them.
const EXACT: u64 = 1 << 53;
const PRUNED_FRAME: &str = "[pruned]";
const SEMICOLON_STANDIN: &str = "\u{ff1b}";
/// The attributes of a frame's `<rect>` that the readers use.
pub const RECT_ATTRIBUTES: [&[u8]; 5] = [b"x", b"y", b"width", b"fg:x", b"fg:w"];

/// What the Python side needs to make the profile and its notes.
pub struct Read {
    /// Folded stacks (frames root first, ';' in names replaced) with their self counts,
    /// in the order the Python side inserts them.
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

/// One drawn frame as the document has it: its title's text and its `<rect>`'s attributes
/// (those of `RECT_ATTRIBUTES` present, decoded).
pub struct RawFrame<'a> {
    pub title: String,
    /// The values of `RECT_ATTRIBUTES`, in that order.
    pub rect: [Option<Cow<'a, str>>; 5],
}

/// What the document holds: its root element's name, its frames, the `total_samples` of its
/// `<svg id="frames">`, the text of its scripts, and the frames folded when they are inferno's.
pub struct Scan<'a> {
    pub root: String,
    pub frames: Vec<RawFrame<'a>>,
    pub total_samples: Option<String>,
    pub script: String,
    pub folded: Option<Read>,
}

/// Reads a flamegraph SVG, folding inferno's frames when `fold`; the error is one line: what
/// is wrong and where.
pub fn read(data: &[u8], max_depth: usize, fold_frames: bool) -> Result<Scan<'_>, String> {
    let doc = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
    if let Some(at) = forbidden_character(doc) {
        return Err(format!(
            "not well-formed XML at {}: not UTF-8 text or a character XML forbids",
            place(doc, at)
        ));
    }
    let mut scan = Scanner::new(doc, max_depth).scan().map_err(one_line)?;
    if fold_frames && !scan.frames.is_empty() {
        if let Some(frames) = exact_frames(&scan.frames) {
            scan.folded = fold(frames.0, scan.total_samples.clone(), frames.1);
            if scan.folded.is_some() {
                scan.frames.clear();
            }
        }
    }
    Ok(scan)
}

/// An error as one line of bounded length: what the document put in it (names, the
/// tokenizer's quotes) may hold line ends or be long.
fn one_line(message: String) -> String {
    const LONG: usize = 300;
    let mut line: String = message
        .chars()
        .take(LONG)
        .flat_map(|c| {
            let escaped = c.is_control().then(|| c.escape_default());
            let plain = (!c.is_control()).then_some(c);
            escaped.into_iter().flatten().chain(plain)
        })
        .collect();
    if message.chars().nth(LONG).is_some() {
        line.push_str("...");
    }
    line
}

/// `line L, column C` (both from 1, the column in characters) of a byte offset.
fn place(doc: &[u8], at: usize) -> String {
    let before = &doc[..at.min(doc.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    format!("line {line}, column {column}")
}

/// inferno's frames: every one with integer `y`, `fg:x` and `fg:w` and a title with a count.
fn exact_frames(raw: &[RawFrame<'_>]) -> Option<(Vec<Frame>, bool)> {
    let mut differential = false;
    let mut frames = Vec::with_capacity(raw.len());
    for frame in raw {
        let [_, y, _, start, width] = &frame.rect;
        let get = |value: &Option<Cow<'_, str>>| integer(value.as_deref()?.as_bytes());
        let (name, title_count, delta) = parse_title(&frame.title)?;
        differential |= delta;
        frames.push(Frame {
            name: name.to_owned(),
            semicolon: name.contains(';'),
            title_count,
            y: get(y)?,
            start: get(start)?,
            width: get(width)?,
        });
    }
    Some((frames, differential))
}

/// The offset of the first byte that is not UTF-8 or is a character XML forbids (C0 controls
/// but tab, LF, CR; U+FFFE / U+FFFF; surrogates cannot be UTF-8).
fn forbidden_character(doc: &[u8]) -> Option<usize> {
    if let Err(err) = std::str::from_utf8(doc) {
        return Some(err.valid_up_to());
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
            let at = number * BLOCK + i;
            if b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r') {
                return Some(at);
            }
            if b == 0xEF
                && doc.get(at + 1) == Some(&0xBF)
                && matches!(doc.get(at + 2), Some(0xBE | 0xBF))
            {
                return Some(at);
            }
        }
    }
    None
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// An XML name (XML 1.0, fifth edition).
fn is_name(name: &[u8]) -> bool {
    if name.is_ascii() {
        return name
            .first()
            .is_some_and(|b| b.is_ascii_alphabetic() || matches!(b, b'_' | b':'))
            && name
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.' | b'-'));
    }
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    let mut chars = name.chars();
    chars.next().is_some_and(is_name_start) && chars.all(|c| is_name_start(c) || is_name_rest(c))
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic()
        || matches!(c, ':' | '_' | '\u{C0}'..='\u{D6}' | '\u{D8}'..='\u{F6}' | '\u{F8}'..='\u{2FF}')
        || matches!(c, '\u{370}'..='\u{37D}' | '\u{37F}'..='\u{1FFF}' | '\u{200C}'..='\u{200D}')
        || matches!(c, '\u{2070}'..='\u{218F}' | '\u{2C00}'..='\u{2FEF}' | '\u{3001}'..='\u{D7FF}')
        || matches!(c, '\u{F900}'..='\u{FDCF}' | '\u{FDF0}'..='\u{FFFD}' | '\u{10000}'..='\u{EFFFF}')
}

fn is_name_rest(c: char) -> bool {
    c.is_ascii_digit()
        || matches!(c, '-' | '.' | '\u{B7}' | '\u{300}'..='\u{36F}' | '\u{203F}'..='\u{2040}')
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

/// Why a reference is refused.
fn unknown_reference(reference: &[u8]) -> String {
    format!(
        "the reference &{}; is neither one of XML's five nor a character XML allows \
         (entity declarations are not accepted)",
        String::from_utf8_lossy(reference)
    )
}

/// Appends an attribute value decoded: references resolved, white space made spaces (CR LF as
/// one); `out` is left alone when the value is not allowed.
fn decode_value(value: &[u8], out: &mut String) -> Result<(), String> {
    let special = |b: &u8| matches!(b, b'<' | b'&' | b'\r' | b'\n' | b'\t');
    if !value.iter().any(special) {
        out.push_str(std::str::from_utf8(value).map_err(|_| "an attribute value not UTF-8")?);
        return Ok(());
    }
    let mut bytes = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        match value[i] {
            b'<' => return Err("'<' in an attribute value".to_owned()),
            b'&' => {
                let tail = &value[i + 1..];
                let end = tail
                    .iter()
                    .position(|&b| b == b';')
                    .ok_or("an '&' that starts no reference in an attribute value")?;
                let ch = resolve(&tail[..end]).ok_or_else(|| unknown_reference(&tail[..end]))?;
                bytes.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                i += end + 2;
                continue;
            }
            b'\r' => {
                bytes.push(b' ');
                if value.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
            }
            b'\n' | b'\t' => bytes.push(b' '),
            b => bytes.push(b),
        }
        i += 1;
    }
    out.push_str(std::str::from_utf8(&bytes).map_err(|_| "an attribute value not UTF-8")?);
    Ok(())
}

/// Appends text with its line ends normalized (CR LF and CR as LF).
fn push_text(text: &[u8], out: &mut String) -> Result<(), String> {
    let text = std::str::from_utf8(text).map_err(|_| "text not UTF-8")?;
    if !text.contains('\r') {
        out.push_str(text);
        return Ok(());
    }
    out.push_str(&text.replace("\r\n", "\n").replace('\r', "\n"));
    Ok(())
}

/// The attributes of a start tag, checked: `(S name S? = S? "value")* S?`, no name twice,
/// values allowed (`scratch` holds the last one decoded).
fn attributes<'a>(
    raw: &'a [u8],
    out: &mut Vec<(&'a [u8], &'a [u8])>,
    scratch: &mut String,
) -> Result<(), String> {
    out.clear();
    let mut i = 0;
    loop {
        let before = i;
        while i < raw.len() && is_space(raw[i]) {
            i += 1;
        }
        if i == raw.len() {
            return Ok(());
        }
        if i == before {
            return Err("attributes not separated by white space".to_owned());
        }
        let name_start = i;
        while i < raw.len() && !is_space(raw[i]) && raw[i] != b'=' {
            i += 1;
        }
        let name = &raw[name_start..i];
        if !is_name(name) {
            return Err(format!(
                "{:?} is not an attribute name",
                String::from_utf8_lossy(name)
            ));
        }
        while i < raw.len() && is_space(raw[i]) {
            i += 1;
        }
        let quote = if raw.get(i) == Some(&b'=') {
            i += 1;
            while i < raw.len() && is_space(raw[i]) {
                i += 1;
            }
            raw.get(i).copied().filter(|&q| q == b'"' || q == b'\'')
        } else {
            None
        };
        let unquoted = || {
            format!(
                "the attribute {} has no '=' and quoted value",
                String::from_utf8_lossy(name)
            )
        };
        let quote = quote.ok_or_else(unquoted)?;
        let len = raw[i + 1..]
            .iter()
            .position(|&b| b == quote)
            .ok_or_else(unquoted)?;
        let value = &raw[i + 1..i + 1 + len];
        i += len + 2;
        if out.iter().any(|(n, _)| same(n, name)) {
            return Err(format!(
                "the attribute {} given twice",
                String::from_utf8_lossy(name)
            ));
        }
        if value.iter().any(|&b| matches!(b, b'<' | b'&')) {
            scratch.clear();
            decode_value(value, scratch)?;
        }
        out.push((name, value));
    }
}

fn attribute<'a>(attrs: &[(&'a [u8], &'a [u8])], name: &[u8]) -> Option<&'a [u8]> {
    attrs.iter().find(|(n, _)| same(n, name)).map(|(_, v)| *v)
}

/// An attribute's value decoded, if it is there.
fn decoded<'a>(attrs: &[(&'a [u8], &'a [u8])], name: &[u8]) -> Option<Cow<'a, str>> {
    let value = attribute(attrs, name)?;
    let special = |b: &u8| matches!(b, b'&' | b'\r' | b'\n' | b'\t');
    if !value.iter().any(special) {
        return std::str::from_utf8(value).ok().map(Cow::Borrowed);
    }
    let mut out = String::new();
    decode_value(value, &mut out).ok()?;
    Some(Cow::Owned(out))
}

/// Short names compared in line (a call to memcmp costs more than they do).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
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

/// `svg`, optionally `PUBLIC "pubid" "system"` or `SYSTEM "system"`, and no internal subset.
fn literal(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&quote, rest) = bytes.split_first()?;
    if quote != b'"' && quote != b'\'' {
        return None;
    }
    let len = rest.iter().position(|&b| b == quote)?;
    Some((&rest[..len], &rest[len + 1..]))
}

/// A name, optionally `PUBLIC "pubid" "system"` or `SYSTEM "system"`, and no internal subset.
fn doctype_ok(content: &[u8]) -> bool {
    let content = trim_start(content);
    let end = content
        .iter()
        .position(|&b| is_space(b))
        .unwrap_or(content.len());
    let (name, rest) = content.split_at(end);
    if !is_name(name) {
        return false;
    }
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
    // The Python side splits at the last " (" (a later one would put '(' in the counts).
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

struct Scanner<'a> {
    doc: &'a [u8],
    reader: Reader<&'a [u8]>,
    max_depth: usize,
    open: Vec<&'a [u8]>,
    root: Option<&'a [u8]>,
}

/// Where a frame is being read, as the oracle pairs a `<g>`, its `<title>` and its `<rect>`.
#[derive(Default)]
struct Pairing {
    in_group: bool,
    title: Option<String>,
    in_script: bool,
}

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
            root: None,
        }
    }

    fn scan(mut self) -> Result<Scan<'a>, String> {
        let mut scan = Scan {
            root: String::new(),
            frames: Vec::new(),
            total_samples: None,
            script: String::new(),
            folded: None,
        };
        let mut pairing = Pairing::default();
        let mut frames_container = false;
        let mut doctype_allowed = true;
        let mut attrs: Vec<(&[u8], &[u8])> = Vec::with_capacity(8);
        let mut scratch = String::new();
        let mut first = true;
        loop {
            let position = self.reader.buffer_position() as usize;
            let event = match self.reader.read_event() {
                Ok(event) => event,
                Err(err) => {
                    let at = self.reader.error_position() as usize;
                    return Err(format!(
                        "not well-formed XML at {}: {err}",
                        place(self.doc, at)
                    ));
                }
            };
            let wrong = |what: &str| {
                format!(
                    "not well-formed XML at {}: {what}",
                    place(self.doc, position)
                )
            };
            let is_first = std::mem::replace(&mut first, false);
            let empty = matches!(event, Event::Empty(_));
            let inside = !self.open.is_empty();
            match event {
                Event::Decl(decl) => {
                    if !is_first || position != 0 {
                        return Err(wrong("an XML declaration after the start"));
                    }
                    if !declaration_ok(&decl) {
                        return Err(wrong(
                            "the XML declaration is not version 1.x in UTF-8 (only UTF-8 is read)",
                        ));
                    }
                }
                Event::PI(pi) => {
                    let end = pi.iter().position(|&b| is_space(b)).unwrap_or(pi.len());
                    let target = &pi[..end];
                    if target.eq_ignore_ascii_case(b"xml") {
                        return Err(wrong("an XML declaration after the start"));
                    }
                    if !is_name(target) {
                        return Err(wrong("a processing instruction without a target name"));
                    }
                }
                Event::DocType(doctype) => {
                    if !doctype_allowed || self.root.is_some() {
                        return Err(wrong("a DOCTYPE not before the root element, or twice"));
                    }
                    if doctype.contains(&b'[') {
                        return Err(format!(
                            "refused: the DOCTYPE at {} has declarations; entity declarations \
                             are not accepted",
                            place(self.doc, position)
                        ));
                    }
                    if !doctype_ok(&doctype) {
                        return Err(wrong("a DOCTYPE that is not a name and an external ID"));
                    }
                    doctype_allowed = false;
                }
                Event::Comment(_) => {}
                Event::CData(text) => {
                    if !inside {
                        return Err(wrong("CDATA outside the root element"));
                    }
                    if let Some(out) = pairing.text_out(&mut scan.script) {
                        push_text(&text, out).map_err(|e| wrong(&e))?;
                    }
                }
                Event::Text(text) => {
                    if !inside {
                        if !text.iter().all(|&b| is_space(b)) {
                            return Err(wrong("text outside the root element"));
                        }
                        continue;
                    }
                    if text.windows(3).any(|w| w == b"]]>") {
                        return Err(wrong("']]>' in text"));
                    }
                    if let Some(out) = pairing.text_out(&mut scan.script) {
                        push_text(&text, out).map_err(|e| wrong(&e))?;
                    }
                }
                Event::GeneralRef(reference) => {
                    if !inside {
                        return Err(wrong("a reference outside the root element"));
                    }
                    let ch = resolve(&reference).ok_or_else(|| {
                        format!(
                            "refused at {}: {}",
                            place(self.doc, position),
                            unknown_reference(&reference)
                        )
                    })?;
                    if let Some(out) = pairing.text_out(&mut scan.script) {
                        out.push(ch);
                    }
                }
                Event::Start(element) | Event::Empty(element) => {
                    let name = self
                        .open_element(position, &element, &mut attrs, &mut scratch)
                        .map_err(|e| wrong(&e))?;
                    if self.open.len() + 1 > self.max_depth {
                        return Err(format!(
                            "refused: elements nest deeper than {} (at {}); flamegraph SVGs \
                             are shallow",
                            self.max_depth,
                            place(self.doc, position)
                        ));
                    }
                    match name {
                        b"rect" => {
                            if let Some(title) = pairing.title.take() {
                                let rect = RECT_ATTRIBUTES.map(|n| decoded(&attrs, n));
                                scan.frames.push(RawFrame { title, rect });
                                pairing.in_group = false;
                            }
                        }
                        b"g" => {
                            pairing = Pairing {
                                in_group: true,
                                ..Pairing::default()
                            }
                        }
                        b"title" => {
                            pairing.title = pairing.in_group.then(String::new);
                            pairing.in_script = false;
                        }
                        b"script" => {
                            pairing.title = None;
                            pairing.in_script = true;
                        }
                        b"svg"
                            if !frames_container && attribute(&attrs, b"id") == Some(b"frames") =>
                        {
                            frames_container = true;
                            scan.total_samples =
                                decoded(&attrs, b"total_samples").map(Cow::into_owned);
                        }
                        _ => {}
                    }
                    if self.root.is_none() {
                        self.root = Some(name);
                        scan.root = String::from_utf8_lossy(name).into_owned();
                    }
                    if !empty {
                        self.open.push(name);
                    }
                }
                Event::End(element) => {
                    let Some(name) = self.open.pop() else {
                        return Err(wrong("an end tag that closes nothing"));
                    };
                    if element.name().as_ref() != name {
                        return Err(wrong(&format!(
                            "</{}> closes <{}>",
                            String::from_utf8_lossy(element.name().as_ref()),
                            String::from_utf8_lossy(name)
                        )));
                    }
                }
                Event::Eof => break,
            }
        }
        if let Some(name) = self.open.last() {
            return Err(format!(
                "not well-formed XML at {}: the document ends inside <{}>",
                place(self.doc, self.doc.len()),
                String::from_utf8_lossy(name)
            ));
        }
        if self.root.is_none() {
            return Err(format!(
                "not well-formed XML at {}: no element",
                place(self.doc, self.doc.len())
            ));
        }
        Ok(scan)
    }

    /// The name and attributes of an element that opens (or is empty), checked: one root,
    /// nothing after it.
    fn open_element(
        &mut self,
        position: usize,
        element: &BytesStart<'_>,
        attrs: &mut Vec<(&'a [u8], &'a [u8])>,
        scratch: &mut String,
    ) -> Result<&'a [u8], String> {
        // The tag as a slice of the document (what follows its '<'), to keep its parts.
        let tag: &'a [u8] = self
            .doc
            .get(position + 1..position + 1 + element.len())
            .filter(|tag| std::ptr::eq(tag.as_ptr(), element.as_ptr()))
            .ok_or("a tag the tokenizer did not place")?;
        let (name, rest) = tag.split_at(element.name().as_ref().len());
        if !is_name(name) {
            return Err(format!(
                "{:?} is not an element name",
                String::from_utf8_lossy(name)
            ));
        }
        attributes(rest, attrs, scratch)?;
        if self.open.is_empty() && self.root.is_some() {
            return Err("an element after the root element".to_owned());
        }
        Ok(name)
    }
}

impl Pairing {
    /// Where character data goes: a frame's title, the scripts, or nowhere.
    fn text_out<'s>(&'s mut self, script: &'s mut String) -> Option<&'s mut String> {
        match self.title.as_mut() {
            Some(title) => Some(title),
            None => self.in_script.then_some(script),
        }
    }
}

/// Rows, orientation, parents and self counts, as the Python side computes them.
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
    // the Python side asks the SVG's script.
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
    // One root frame named "all" (else the Python side adds a synthetic one).
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
            return None; // wider children: the Python side refuses the graph
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
        // As the Python side joins them: a parent's empty path adds no separator.
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
