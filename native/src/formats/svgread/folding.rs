//! inferno's frames folded into stacks: each frame's title parsed (name, count, a
//! differential part), rows by `y`, the root row found, parents by sample range, self counts
//! and the width of callees too narrow to draw (a `[pruned]` leaf), as the Python side
//! (`sidecar/formats/svg.py`) computes them.

use std::borrow::Cow;
use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use super::RawFrame;
use crate::rules::{PRUNED_FRAME, SEMICOLON_STANDIN};

/// Integers above this are not exact as floats; the Python side takes them.
const EXACT: u64 = 1 << 53;

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

pub(super) struct Frame {
    name: String,
    /// The name holds a ';' (written as U+FF1B in stacks).
    semicolon: bool,
    title_count: u64,
    y: u64,
    start: u64,
    width: u64,
}

/// inferno's frames: every one with integer `y`, `fg:x` and `fg:w` and a title with a count.
pub(super) fn exact_frames(raw: &[RawFrame<'_>]) -> Option<(Vec<Frame>, bool)> {
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

/// Rows, orientation, parents and self counts, as the Python side computes them.
pub(super) fn fold(
    frames: Vec<Frame>,
    total_samples: Option<String>,
    differential: bool,
) -> Option<Read> {
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
    // Parents: both rows in start order, one merge pass per row; each frame's first child
    // (the one that starts first) is the first one given to it.
    let mut parent = vec![0usize; sorted.len()];
    let mut first_child: Vec<Option<u64>> = vec![None; sorted.len()];
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
            first_child[at].get_or_insert(frame.start);
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
        // inferno lays out sorted stacks: a frame's own samples come first (its stack sorts
        // before those of its callees), so width after the start of its first drawn callee
        // that no callee covers is frames too narrow to draw: a `[pruned]` leaf, no state.
        let uncovered = own - children[index];
        let leading = first_child[index].map_or(own, |at| at - sorted[index].start);
        let pruned = uncovered - leading.min(uncovered);
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
        if pruned > 0 {
            add(&mut stacks, format!("{path};{PRUNED_FRAME}"), pruned);
        }
        if uncovered > pruned {
            add(&mut stacks, path, uncovered - pruned);
        }
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
