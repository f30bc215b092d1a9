//! The per-stack work of `sidecar diff`, natively: the distinct frames of a profile, per
//! function self / total counts and caller -> callee edges over all its stacks, and for each
//! caller the callee whose edge changed most between two profiles. `sidecar/diff.py` keeps
//! the meaning (which key a frame counts under, what a share is); this only counts.

use std::collections::HashMap;

use pyo3::exceptions::{PyKeyError, PyOverflowError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use rustc_hash::FxBuildHasher;

const IDLE_LEAF: &str = "[idle]";
const BLOCKED_LEAF: &str = "[blocked]";
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
        let leaves = [IDLE_LEAF, BLOCKED_LEAF]
            .iter()
            .filter_map(|leaf| ids.get(*leaf).copied())
            .collect();
        Keys { names, of, leaves }
    }
}

/// Counts by function id, in the order functions were first counted.
struct ByKey {
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

    fn items(&self) -> impl Iterator<Item = (u32, i128)> + '_ {
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
struct Folded {
    self_: ByKey,
    total: ByKey,
    edges: ByEdge,
    /// (state, count), in the order states were first seen.
    states: Vec<(&'static str, i128)>,
}

/// Counts over all stacks, as `sidecar.diff.shares` defines them: the state of a stack is its
/// synthetic leaf (idle stacks count only there); busy stacks give their leaf function self
/// time, blocked ones lose the leaf; each function counts once per stack in the total, but
/// not the leaves; each distinct caller -> callee pair (of different functions) once.
/// Err(frame) for a frame without a key.
fn fold(stacks: &[(&str, i64)], keys: &Keys<'_>) -> Result<Folded, String> {
    let size = keys.names.len();
    let mut out = Folded {
        self_: ByKey::new(size),
        total: ByKey::new(size),
        edges: ByEdge::default(),
        states: Vec::with_capacity(3),
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
type Carrier = (f64, Option<u32>, f64, Option<u32>);

/// Per caller: the callee whose edge share grew most and the one whose share shrank most,
/// as `sidecar.diff._carriers` finds them (ties to the smaller name; a callee named "" loses
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
fn exact_total(folded: &Folded) -> PyResult<f64> {
    let total: i128 = folded.states.iter().map(|(_, count)| count).sum();
    if total <= 0 || total >= EXACT || folded.edges.items.iter().any(|(_, c)| c.abs() >= EXACT) {
        return Err(PyOverflowError::new_err(format!(
            "a total of {total} samples: shares would not be exact as floats"
        )));
    }
    Ok(total as f64)
}

/// The (str, value) items of a dict; the strings stay owned by Python (see `texts`).
fn items<'py, V>(dict: &Bound<'py, PyDict>) -> PyResult<Vec<(Bound<'py, PyString>, V)>>
where
    V: for<'a> FromPyObject<'a, 'py>,
{
    dict.iter()
        .map(|(key, value)| {
            let value = value.extract().map_err(Into::into)?;
            Ok((key.cast_into::<PyString>()?, value))
        })
        .collect()
}

/// The text of Python strings, borrowed: the strings are immutable and `items` holds them
/// for as long as the borrow, also while the GIL is released.
fn texts<'a, V: Copy>(items: &'a [(Bound<'_, PyString>, V)]) -> PyResult<Vec<(&'a str, V)>> {
    items
        .iter()
        .map(|(key, value)| Ok((key.to_str()?, *value)))
        .collect()
}

fn key_texts<'a>(
    items: &'a [(Bound<'_, PyString>, Bound<'_, PyString>)],
) -> PyResult<Vec<(&'a str, &'a str)>> {
    items
        .iter()
        .map(|(frame, key)| Ok((frame.to_str()?, key.to_str()?)))
        .collect()
}

/// Python strings of the function names, made once each.
fn strings<'py>(py: Python<'py>, keys: &Keys<'_>) -> Vec<Bound<'py, PyString>> {
    keys.names
        .iter()
        .map(|name| PyString::new(py, name))
        .collect()
}

fn counts_to_py<'py>(
    py: Python<'py>,
    strings: &[Bound<'py, PyString>],
    counts: &ByKey,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, count) in counts.items() {
        dict.set_item(&strings[key as usize], count)?;
    }
    Ok(dict)
}

fn states_to_py<'py>(py: Python<'py>, states: &[(&str, i128)]) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (state, count) in states {
        dict.set_item(state, count)?;
    }
    Ok(dict)
}

/// The distinct frames of folded stacks (an iterable of str), in the order they first appear.
#[pyfunction]
pub fn frame_names<'py>(stacks: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyString>>> {
    let py = stacks.py();
    let stacks: Vec<Bound<'py, PyString>> = stacks
        .try_iter()?
        .map(|item| Ok(item?.cast_into::<PyString>()?))
        .collect::<PyResult<_>>()?;
    let mut seen: HashMap<&str, (), FxBuildHasher> = HashMap::default();
    let mut out = Vec::new();
    for stack in &stacks {
        for frame in stack.to_str()?.split(';') {
            if seen.insert(frame, ()).is_none() {
                out.push(PyString::new(py, frame));
            }
        }
    }
    Ok(out)
}

/// Two profiles' self, total and state counts, and per caller the callees whose edge share
/// changed most (see `carriers_of`), without handing the edges to Python.
#[pyfunction]
pub fn diff_shares<'py>(
    py: Python<'py>,
    before: &Bound<'py, PyDict>,
    after: &Bound<'py, PyDict>,
    keys: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (before, after) = (items::<i64>(before)?, items::<i64>(after)?);
    let keys = items::<Bound<'py, PyString>>(keys)?;
    let (before, after, keys) = (texts(&before)?, texts(&after)?, key_texts(&keys)?);
    let keys = Keys::new(&keys);
    let (a, b, carriers) = py.detach(|| {
        let a = fold(&before, &keys).map_err(PyKeyError::new_err)?;
        let b = fold(&after, &keys).map_err(PyKeyError::new_err)?;
        let (ta, tb) = (exact_total(&a)?, exact_total(&b)?);
        let carriers = carriers_of(&a, ta, &b, tb, &keys.names);
        Ok::<_, PyErr>((a, b, carriers))
    })?;
    let strings = strings(py, &keys);
    let empty = PyString::new(py, "");
    let text = |id: Option<u32>| id.map_or(&empty, |id| &strings[id as usize]).clone();
    let out = PyDict::new(py);
    for (caller, (up, up_to, down, down_to)) in carriers {
        let row = PyTuple::new(
            py,
            [
                up.into_pyobject(py)?.into_any(),
                text(up_to).into_any(),
                down.into_pyobject(py)?.into_any(),
                text(down_to).into_any(),
            ],
        )?;
        out.set_item(&strings[caller as usize], row)?;
    }
    let side = |folded: &Folded| -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(
            py,
            [
                counts_to_py(py, &strings, &folded.self_)?,
                counts_to_py(py, &strings, &folded.total)?,
                states_to_py(py, &folded.states)?,
            ],
        )
    };
    PyTuple::new(
        py,
        [side(&a)?.into_any(), side(&b)?.into_any(), out.into_any()],
    )
}

/// Keeps the module's list of functions in one place for lib.rs.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(frame_names, m)?)?;
    m.add_function(wrap_pyfunction!(diff_shares, m)?)?;
    Ok(())
}
