//! The formats' side of the boundary: flamegraph SVGs rendered and read, pprof and the push
//! request encoded, and the counts of `sidecar diff`, as plain Python types.

use pyo3::exceptions::{PyKeyError, PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::formats::pprof::{self, FrameIn, Header, SampleIn, SeriesIn};
use crate::formats::render::{self, RenderOptions};
use crate::formats::shares::{self, DiffError};
use crate::formats::svgread::{self, RECT_ATTRIBUTES};

#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (lines, *, title="Flame Graph", subtitle=None, inverted=false, palette="python",
                    min_width=0.1, count_name="samples", width=None, negate=false, factor=1.0))]
/// Renders folded lines into a flamegraph SVG (two-count lines make a differential one).
pub fn render_svg(
    py: Python<'_>,
    lines: Vec<String>,
    title: &str,
    subtitle: Option<String>,
    inverted: bool,
    palette: &str,
    min_width: f64,
    count_name: &str,
    width: Option<usize>,
    negate: bool,
    factor: f64,
) -> PyResult<String> {
    let options = RenderOptions {
        title: title.to_string(),
        subtitle,
        inverted,
        palette: palette.to_string(),
        min_width,
        count_name: count_name.to_string(),
        width,
        negate,
        factor,
    };
    py.detach(|| render::render(&lines, &options))
        .map_err(PyValueError::new_err)
}

/// A flamegraph SVG read: the frames folded into stacks when they are inferno's, else the
/// frames for the Python side; ValueError (one line: what and where) for anything else.
/// `max_depth` is the nesting the caller allows; `fold=False` always gives the frames.
#[pyfunction]
#[pyo3(signature = (data, *, max_depth, fold = true))]
pub fn read_svg<'py>(
    py: Python<'py>,
    data: &[u8],
    max_depth: usize,
    fold: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let scan = py
        .detach(|| svgread::read(data, max_depth, fold))
        .map_err(PyValueError::new_err)?;
    let out = PyDict::new(py);
    out.set_item("root", scan.root)?;
    out.set_item("total_samples", scan.total_samples)?;
    out.set_item("script", scan.script)?;
    out.set_item("embedded", scan.embedded)?;
    let frames = PyList::empty(py);
    for frame in &scan.frames {
        let rect = PyDict::new(py);
        for (name, value) in RECT_ATTRIBUTES.iter().zip(&frame.rect) {
            if let Some(value) = value {
                rect.set_item(
                    std::str::from_utf8(name).unwrap_or_default(),
                    value.as_ref(),
                )?;
            }
        }
        frames.append((&frame.title, rect))?;
    }
    out.set_item("frames", frames)?;
    match scan.folded {
        None => out.set_item("folded", py.None())?,
        Some(read) => {
            let stacks = PyDict::new(py);
            for (stack, count) in &read.stacks {
                stacks.set_item(stack, count)?;
            }
            let folded = PyDict::new(py);
            folded.set_item("stacks", stacks)?;
            folded.set_item("total", read.total)?;
            folded.set_item("root_title_count", read.root_title_count)?;
            folded.set_item("differential", read.differential)?;
            folded.set_item("off", read.off)?;
            folded.set_item("first_off", read.first_off)?;
            folded.set_item("total_samples", read.total_samples)?;
            folded.set_item("renamed", read.renamed)?;
            folded.set_item("root_self", read.root_self)?;
            folded.set_item("smallest", read.smallest)?;
            out.set_item("folded", folded)?;
        }
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)] // the Python signature: keywords
#[pyfunction]
#[pyo3(signature = (frames, samples, *, sample_types, period_type, period, time_nanos=0,
                    duration_nanos=0, comments=Vec::new()))]
/// A gzipped profile.proto from frames (folded text, name, file, line) and samples (folded
/// stack root first, values, labels).
pub fn encode_pprof<'py>(
    py: Python<'py>,
    frames: Vec<FrameIn>,
    samples: Vec<SampleIn>,
    sample_types: Vec<(String, String)>,
    period_type: (String, String),
    period: i64,
    time_nanos: i64,
    duration_nanos: i64,
    comments: Vec<String>,
) -> PyResult<Bound<'py, PyBytes>> {
    let header = Header {
        sample_types,
        period_type,
        period,
        time_nanos,
        duration_nanos,
        comments,
    };
    let data = py
        .detach(|| pprof::encode(&header, &frames, &samples))
        .map_err(PyValueError::new_err)?;
    Ok(PyBytes::new(py, &data))
}

/// A pprof file read back (`pprof::decode`): a dict of its sample types, the index of the
/// default one, period type and period, comments, frames (function, file, line) and samples
/// (frame indexes root first, values); ValueError (one line) for a corrupt or inconsistent file.
#[pyfunction]
#[pyo3(signature = (data, *, max_bytes))]
pub fn decode_pprof<'py>(
    py: Python<'py>,
    data: &[u8],
    max_bytes: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let read = py
        .detach(|| pprof::decode(data, max_bytes))
        .map_err(|err| PyValueError::new_err(one_line(&err)))?;
    let out = PyDict::new(py);
    out.set_item("sample_types", read.sample_types)?;
    out.set_item("default_type", read.default_type)?;
    out.set_item("period_type", read.period_type)?;
    out.set_item("period", read.period)?;
    out.set_item("comments", read.comments)?;
    out.set_item("frames", read.frames)?;
    out.set_item("samples", read.samples)?;
    Ok(out)
}

/// An error of a decoder as one line of bounded length.
fn one_line(message: &str) -> String {
    let line: String = message
        .chars()
        .take(300)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    line
}

#[pyfunction]
/// The protobuf body of Pyroscope's push API: series of (labels, gzipped pprof profiles).
pub fn encode_push_request<'py>(
    py: Python<'py>,
    series: Vec<SeriesIn>,
) -> PyResult<Bound<'py, PyBytes>> {
    let data = py.detach(|| pprof::push_request(series));
    Ok(PyBytes::new(py, &data))
}

/// The distinct frames of folded stacks (an iterable of str), in the order they first appear.
#[pyfunction]
pub fn frame_names<'py>(stacks: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyString>>> {
    let py = stacks.py();
    let stacks: Vec<Bound<'py, PyString>> = stacks
        .try_iter()?
        .map(|item| Ok(item?.cast_into::<PyString>()?))
        .collect::<PyResult<_>>()?;
    let texts = stacks
        .iter()
        .map(|stack| stack.to_str())
        .collect::<PyResult<Vec<&str>>>()?;
    Ok(shares::distinct_frames(texts)
        .into_iter()
        .map(|frame| PyString::new(py, frame))
        .collect())
}

/// Two profiles' self, total and state counts, and per caller the callees whose edge share
/// changed most (`shares::compare`), without handing the edges to Python.
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
    let compared = py
        .detach(|| shares::compare(&before, &after, &keys))
        .map_err(|err| match err {
            DiffError::Unkeyed(frame) => PyKeyError::new_err(frame),
            DiffError::Inexact(message) => PyOverflowError::new_err(message),
        })?;
    let strings = strings(py, &compared.names);
    let empty = PyString::new(py, "");
    let text = |id: Option<u32>| id.map_or(&empty, |id| &strings[id as usize]).clone();
    let out = PyDict::new(py);
    for (caller, (up, up_to, down, down_to)) in compared.carriers {
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
    let side = |folded: &shares::Folded| -> PyResult<Bound<'py, PyTuple>> {
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
        [
            side(&compared.before)?.into_any(),
            side(&compared.after)?.into_any(),
            out.into_any(),
        ],
    )
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
fn strings<'py>(py: Python<'py>, names: &[&str]) -> Vec<Bound<'py, PyString>> {
    names.iter().map(|name| PyString::new(py, name)).collect()
}

fn counts_to_py<'py>(
    py: Python<'py>,
    strings: &[Bound<'py, PyString>],
    counts: &shares::ByKey,
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
