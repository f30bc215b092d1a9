//! Flamegraph SVGs read natively: the one production reader of `sidecar/formats/svg.py`.
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
//! go to `sidecar/formats/svg.py`, which reads their geometry (flamegraph.pl's layout) or says what is
//! inconsistent.
//!
//! The pieces: `xml` (XML's lexical rules: characters, names, references, attribute lists,
//! the declaration and the DOCTYPE), `tokenizer` (quick-xml's events checked against them,
//! nesting bounded, and each frame's title paired with its rect) and `folding` (inferno's
//! frames into folded stacks).

mod folding;
mod tokenizer;
mod xml;

use std::borrow::Cow;

pub use folding::Read;
use folding::{exact_frames, fold};
use tokenizer::Scanner;
use xml::forbidden_character;

/// The attributes of a frame's `<rect>` that the readers use.
pub const RECT_ATTRIBUTES: [&[u8]; 5] = [b"x", b"y", b"width", b"fg:x", b"fg:w"];

/// One drawn frame as the document has it: its title's text and its `<rect>`'s attributes
/// (those of `RECT_ATTRIBUTES` present, decoded).
pub struct RawFrame<'a> {
    pub title: String,
    /// The values of `RECT_ATTRIBUTES`, in that order.
    pub rect: [Option<Cow<'a, str>>; 5],
}

/// What the document holds: its root element's name, its frames, the `total_samples` of its
/// `<svg id="frames">`, the text of its scripts and of its embedded stacks, and the frames folded
/// when they are inferno's.
pub struct Scan<'a> {
    pub root: String,
    pub frames: Vec<RawFrame<'a>>,
    pub total_samples: Option<String>,
    pub script: String,
    /// The text of the first `<metadata id="sidecar-folded">`: the folded stacks sidecar
    /// embeds in the SVGs it writes (checked against the frames on the Python side).
    pub embedded: Option<String>,
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
