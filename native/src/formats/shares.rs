//! The per-stack work of `sidecar diff`, natively: the distinct frames of a profile, per
//! function self / total counts and caller -> callee edges over all its stacks, and for each
//! caller the callee whose edge changed most between two profiles. `sidecar/analyze/diff.py` keeps
//! the meaning (which key a frame counts under, what a share is); this only counts.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use crate::rules::{BLOCKED_LEAF, CPU_WAIT_LEAF, GIL_LEAF, IDLE_LEAF};

/// Counts from here on are not exact as floats.
const EXACT: i128 = 1 << 53;

/// Functions by id, and the function id of each frame.
struct Keys<'k> {
    names: Vec<&'k str>,
    of: HashMap<&'k str, u32, FxBuildHasher>,
    leaves: Vec<u32>,
}

impl<'k> Keys<'k> {
    fn new(frame_keys: &[(&'k str, &'k str)]) -> Self {
        let mut names = Vec::new();
        let mut ids: HashMap<&str, u32, FxBuildHasher> = HashMap::default();
        let mut of = HashMap::with_capacity_and_hasher(frame_keys.len(), FxBuildHasher);
        for &(frame, key) in frame_keys {
            let id = *ids.entry(key).or_insert_with(|| {
                names.push(key);
                names.len() as u32 - 1
            });
            of.insert(frame, id);
        }
        let leaves = [IDLE_LEAF, BLOCKED_LEAF, GIL_LEAF, CPU_WAIT_LEAF]
            .iter()
            .filter_map(|leaf| ids.get(*leaf).copied())
            .collect();
        Keys { names, of, leaves }
    }
}

/// Counts by function id, in the order functions were first counted.
pub struct ByKey {
    counts: Vec<i128>,
    seen: Vec<bool>,
    order: Vec<u32>,
}

impl ByKey {
    fn new(keys: usize) -> Self {
        ByKey {
            counts: vec![0; keys],
            seen: vec![false; keys],
            order: Vec::new(),
        }
    }

    fn add(&mut self, key: u32, count: i128) {
        let at = key as usize;
        if !self.seen[at] {
            self.seen[at] = true;
            self.order.push(key);
        }
        self.counts[at] += count;
    }

    pub fn items(&self) -> impl Iterator<Item = (u32, i128)> + '_ {
        self.order
            .iter()
            .map(|&key| (key, self.counts[key as usize]))
    }
}

/// Counts by caller -> callee pair, in the order pairs were first counted.
#[derive(Default)]
struct ByEdge {
    slots: HashMap<u64, usize, FxBuildHasher>,
    items: Vec<((u32, u32), i128)>,
}

impl ByEdge {
    fn add(&mut self, (caller, callee): (u32, u32), count: i128) {
        let key = (u64::from(caller) << 32) | u64::from(callee);
        match self.slots.get(&key) {
            Some(&slot) => self.items[slot].1 += count,
            None => {
                self.slots.insert(key, self.items.len());
                self.items.push(((caller, callee), count));
            }
        }
    }
}

/// One profile's counts.
pub struct Folded {
    pub self_: ByKey,
    pub total: ByKey,
    edges: ByEdge,
    /// (state, count), in the order states were first seen.
    pub states: Vec<(&'static str, i128)>,
}

/// Counts over all stacks, the shares `sidecar.analyze.diff.compare_shares` returns: the state of a stack is its
/// synthetic leaf (idle stacks count only there); busy stacks give their leaf function self
/// time, blocked and gil ones lose the leaf; each function counts once per stack in the total,
/// but not the leaves; each distinct caller -> callee pair (of different functions) once.
/// Err(frame) for a frame without a key.
fn fold(stacks: &[(&str, i64)], keys: &Keys<'_>) -> Result<Folded, String> {
    let size = keys.names.len();
    let mut out = Folded {
        self_: ByKey::new(size),
        total: ByKey::new(size),
        edges: ByEdge::default(),
        states: Vec::with_capacity(5),
    };
    let mut stamp = vec![usize::MAX; size];
    let mut names: Vec<u32> = Vec::with_capacity(64);
    let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(64);
    for (number, &(stack, count)) in stacks.iter().enumerate() {
        let count = i128::from(count);
        let state = if stack.ends_with(IDLE_LEAF) {
            "idle"
        } else if stack.ends_with(BLOCKED_LEAF) {
            "blocked"
        } else if stack.ends_with(GIL_LEAF) {
            "gil"
        } else if stack.ends_with(CPU_WAIT_LEAF) {
            "cpu_wait"
        } else {
            "busy"
        };
        match out.states.iter_mut().find(|(s, _)| *s == state) {
            Some((_, total)) => *total += count,
            None => out.states.push((state, count)),
        }
        if state == "idle" {
            continue;
        }
        names.clear();
        for frame in stack.split(';') {
            match keys.of.get(frame) {
                Some(&id) => names.push(id),
                None => return Err(frame.to_owned()),
            }
        }
        if state == "busy" {
            out.self_.add(names[names.len() - 1], count);
        } else {
            names.pop();
        }
        for &name in &names {
            if stamp[name as usize] != number && !keys.leaves.contains(&name) {
                stamp[name as usize] = number;
                out.total.add(name, count);
            }
        }
        pairs.clear();
        pairs.extend(
            names
                .windows(2)
                .map(|w| (w[0], w[1]))
                .filter(|(a, b)| a != b),
        );
        pairs.sort_unstable();
        pairs.dedup();
        for &pair in &pairs {
            out.edges.add(pair, count);
        }
    }
    Ok(out)
}

/// (largest growth, its callee, largest shrink, its callee) of one caller's edges.
pub type Carrier = (f64, Option<u32>, f64, Option<u32>);

/// Per caller: the callee whose edge share grew most and the one whose share shrank most,
/// the carriers `sidecar.analyze.diff.compare_shares` returns (ties to the smaller name; a callee named "" loses
/// its ties as Python's falsy string does). Shares are count / total in f64: Python's exact
/// int / int for counts and totals below 2^53, which the caller guarantees.
fn carriers_of(
    before: &Folded,
    before_total: f64,
    after: &Folded,
    after_total: f64,
    names: &[&str],
) -> Vec<(u32, Carrier)> {
    let mut moved: HashMap<(u32, u32), (f64, f64), FxBuildHasher> = HashMap::default();
    for (pair, count) in &before.edges.items {
        moved.entry(*pair).or_insert((0.0, 0.0)).0 = *count as f64 / before_total;
    }
    for (pair, count) in &after.edges.items {
        moved.entry(*pair).or_insert((0.0, 0.0)).1 = *count as f64 / after_total;
    }
    let mut pairs: Vec<((u32, u32), (f64, f64))> = moved.into_iter().collect();
    pairs.sort_unstable_by_key(|(pair, _)| *pair);
    let mut out: Vec<(u32, Carrier)> = Vec::new();
    let named = |id: Option<u32>| id.map_or("", |id| names[id as usize]);
    for ((caller, callee), (old, new)) in pairs {
        let change = new - old;
        if out.last().is_none_or(|(last, _)| *last != caller) {
            out.push((caller, (0.0, None, 0.0, None)));
        }
        let Some((_, entry)) = out.last_mut() else {
            continue;
        };
        let name = names[callee as usize];
        let up_to = named(entry.1);
        if change > entry.0 || (change == entry.0 && !up_to.is_empty() && name < up_to) {
            entry.0 = change;
            entry.1 = Some(callee);
        }
        let down_to = named(entry.3);
        if change < entry.2 || (change == entry.2 && !down_to.is_empty() && name < down_to) {
            entry.2 = change;
            entry.3 = Some(callee);
        }
    }
    out
}

/// A profile's total as a float, if it and its edge counts are exact as floats (and it is
/// positive): then count / total in f64 is what Python's int / int gives.
fn exact_total(folded: &Folded) -> Result<f64, DiffError> {
    let total: i128 = folded.states.iter().map(|(_, count)| count).sum();
    if total <= 0 || total >= EXACT || folded.edges.items.iter().any(|(_, c)| c.abs() >= EXACT) {
        return Err(DiffError::Inexact(format!(
            "a total of {total} samples: shares would not be exact as floats"
        )));
    }
    Ok(total as f64)
}

/// Why two profiles cannot be compared.
#[derive(Debug)]
pub enum DiffError {
    /// A frame without a key (the frame).
    Unkeyed(String),
    /// A total or an edge count not exact as a float.
    Inexact(String),
}

/// Two profiles compared: the function names (the ids of the counts index them), each
/// profile's counts, and per caller the callees whose edge share changed most.
pub struct Compared<'k> {
    pub names: Vec<&'k str>,
    pub before: Folded,
    pub after: Folded,
    pub carriers: Vec<(u32, Carrier)>,
}

/// Both profiles' self, total and state counts, and per caller the callees whose edge share
/// changed most (see `carriers_of`); `frame_keys` gives each frame's function.
pub fn compare<'k>(
    before: &[(&str, i64)],
    after: &[(&str, i64)],
    frame_keys: &[(&'k str, &'k str)],
) -> Result<Compared<'k>, DiffError> {
    let keys = Keys::new(frame_keys);
    let a = fold(before, &keys).map_err(DiffError::Unkeyed)?;
    let b = fold(after, &keys).map_err(DiffError::Unkeyed)?;
    let (ta, tb) = (exact_total(&a)?, exact_total(&b)?);
    let carriers = carriers_of(&a, ta, &b, tb, &keys.names);
    Ok(Compared {
        names: keys.names,
        before: a,
        after: b,
        carriers,
    })
}

/// The distinct frames of folded stacks, in the order they first appear.
pub fn distinct_frames<'s>(stacks: impl IntoIterator<Item = &'s str>) -> Vec<&'s str> {
    let mut seen: HashMap<&str, (), FxBuildHasher> = HashMap::default();
    let mut out = Vec::new();
    for stack in stacks {
        for frame in stack.split(';') {
            if seen.insert(frame, ()).is_none() {
                out.push(frame);
            }
        }
    }
    out
}
