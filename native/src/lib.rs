//! `sidecar._native`: the sampler and the renderers, with plain Python types at the boundary.
//!
//! The modules, and which may use which (`tests/test_native_rules.py` checks there is no
//! cycle): `python` (the boundary: the only wrappers of Python types, registered here) uses
//! `formats`, `sampler` and `tasks`; `sampler` uses `tasks` and `walker`; `tasks` uses
//! `walker`; all of these use `process` (the target from outside) and the leaves `stack`,
//! `budget` (and `rules`), which use nothing of the crate.

mod budget;
mod formats;
mod process;
mod python;
mod sampler;
mod stack;
mod tasks;
mod walker;

use pyo3::prelude::*;

use python::SamplerError;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<python::sampler::Sampler>()?;
    m.add_class::<python::sampler::Row>()?;
    m.add("DEFAULT_RATE_HZ", python::sampler::DEFAULT_RATE_HZ)?;
    m.add("DEFAULT_WINDOW_S", python::sampler::DEFAULT_WINDOW_S)?;
    m.add("TASK_SCAN_BUDGET", crate::sampler::task_ticks::BUDGET)?;
    m.add("SamplerError", m.py().get_type::<SamplerError>())?;
    m.add_function(wrap_pyfunction!(python::formats::render_svg, m)?)?;
    m.add_function(wrap_pyfunction!(python::sampler::process_start_time, m)?)?;
    m.add_function(wrap_pyfunction!(
        python::sampler::return_large_allocations,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(python::sampler::record_reads, m)?)?;
    m.add_function(wrap_pyfunction!(python::sampler::scan_tasks, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::read_svg, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::frame_names, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::diff_shares, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::encode_pprof, m)?)?;
    m.add_function(wrap_pyfunction!(python::formats::encode_push_request, m)?)?;
    Ok(())
}
