//! `sidecar._native`: the sampler and the renderers, with plain Python types at the boundary.
//!
//! The modules, and which may use which (`tests/unit/test_native_rules.py` checks there is no
//! cycle): `python` (the boundary: the only wrappers of Python types, registered here) uses
//! `formats`, `sampler` and `tasks`; `sampler` uses `tasks` and `walker`; `tasks` uses
//! `walker`; all of these use `process` (the target from outside) and `stack`, which uses only
//! the leaves `rules` and `budget`, which use nothing of the crate. The rules are exported as module
//! attributes (`IDLE_LEAF`, ...) so the Python side can check its own against them.

mod budget;
mod formats;
mod process;
mod python;
mod rules;
mod sampler;
mod stack;
mod tasks;
mod walker;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use python::SamplerError;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<python::sampler::Sampler>()?;
    m.add_class::<python::sampler::Row>()?;
    m.add("DEFAULT_RATE_HZ", python::sampler::DEFAULT_RATE_HZ)?;
    m.add("DEFAULT_WINDOW_S", python::sampler::DEFAULT_WINDOW_S)?;
    m.add("DEFAULT_STALL_MS", python::sampler::DEFAULT_STALL_MS)?;
    m.add("DEFAULT_SLOW_MS", python::sampler::DEFAULT_SLOW_MS)?;
    m.add("TASK_SCAN_BUDGET", crate::sampler::task_ticks::BUDGET)?;
    m.add("IDLE_LEAF", rules::IDLE_LEAF)?;
    m.add("BLOCKED_LEAF", rules::BLOCKED_LEAF)?;
    m.add("GIL_LEAF", rules::GIL_LEAF)?;
    m.add("CPU_WAIT_LEAF", rules::CPU_WAIT_LEAF)?;
    m.add("TASK_LEAVES", PyTuple::new(m.py(), rules::TASK_LEAVES)?)?;
    m.add("PRUNED_FRAME", rules::PRUNED_FRAME)?;
    m.add("SEMICOLON_STANDIN", rules::SEMICOLON_STANDIN)?;
    m.add("KNOWN_WAITS", python::known_waits(m.py())?)?;
    m.add("LOOP_ENTRIES", PyTuple::new(m.py(), rules::LOOP_ENTRIES)?)?;
    m.add(
        "CALLBACK_RUNNERS",
        PyTuple::new(m.py(), rules::CALLBACK_RUNNERS)?,
    )?;
    m.add("LOOP_PASSES", PyTuple::new(m.py(), rules::LOOP_PASSES)?)?;
    m.add("REQUEST_ROOTS", PyTuple::new(m.py(), rules::REQUEST_ROOTS)?)?;
    m.add("NO_ROUTE", rules::NO_ROUTE)?;
    m.add("SamplerError", m.py().get_type::<SamplerError>())?;
    m.add_function(wrap_pyfunction!(python::formats::render_svg, m)?)?;
    m.add_function(wrap_pyfunction!(python::sampler::process_start_time, m)?)?;
    m.add_function(wrap_pyfunction!(
        python::sampler::return_large_allocations,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(python::sampler::record_reads, m)?)?;
    m.add_function(wrap_pyfunction!(python::sampler::scan_tasks, m)?)?;
    m.add_function(wrap_pyfunction!(python::dump::dump_threads, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::read_svg, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::frame_names, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::diff_shares, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::encode_pprof, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::decode_pprof, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::encode_push_request, m)?)?;
    Ok(())
}
