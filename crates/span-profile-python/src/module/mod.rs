//! The `span_profile._native` extension module. The Python package `span_profile` wraps it;
//! nothing here is public API on its own.

mod context;
mod instance_attrs;
mod lifecycle;
mod log_bridge;
mod processor;
mod processor_methods;
mod settings;
mod span_hooks;
mod span_objects;
mod standin;
mod walker;

use pyo3::prelude::*;

/// `span_profile._native`.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    instance_attrs::init(m.py());
    log_bridge::install();
    m.add_class::<lifecycle::NativeAgent>()?;
    m.add_class::<processor::SpanProcessor>()?;
    processor_methods::install(&m.py().get_type::<processor::SpanProcessor>())?;
    m.add_class::<context::PyActiveSpan>()?;
    m.add_class::<context::TaskTag>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The ranges the core accepts, which `_settings.py` checks against (one definition).
    let (rate, window) = (
        span_profile_core::ProfilerBuilder::SAMPLE_RATE_HZ,
        span_profile_core::ProfilerBuilder::WINDOW,
    );
    m.add("SAMPLE_RATE_HZ", (*rate.start(), *rate.end()))?;
    m.add(
        "WINDOW_S",
        (window.start().as_secs_f64(), window.end().as_secs_f64()),
    )?;
    m.add_function(wrap_pyfunction!(parse_output, m)?)?;
    m.add_function(wrap_pyfunction!(lifecycle::set_span_hooks, m)?)?;
    m.add_function(wrap_pyfunction!(processor::set_ends_at_ending, m)?)?;
    m.add_function(wrap_pyfunction!(span_hooks::span_field_indices, m)?)?;
    m.add_function(wrap_pyfunction!(log_bridge::log_ready, m)?)?;
    m.add_function(wrap_pyfunction!(log_bridge::log_drain, m)?)?;
    m.add_function(wrap_pyfunction!(log_bridge::log_wake, m)?)?;
    m.add_function(wrap_pyfunction!(log_bridge::emit_log, m)?)?;
    m.add_function(wrap_pyfunction!(mark_own_thread, m)?)?;
    m.add_function(wrap_pyfunction!(unmark_own_thread, m)?)?;
    m.add_function(wrap_pyfunction!(clear_own_threads, m)?)?;
    #[cfg(feature = "cli")]
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    Ok(())
}

/// Runs the `span-profile` command on `argv` (program name first) with the GIL released and
/// returns its exit code: the wheel's `span-profile` script and `python -m span_profile`
/// (ADR 0029).
#[cfg(feature = "cli")]
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> i32 {
    py.detach(move || span_profile_cli::main_with_args(argv))
}

/// Marks the calling thread as the profiler's own (the log pump): the walker leaves it out.
/// Returns false when too many are marked, and the thread is then sampled as any other.
#[pyfunction]
fn mark_own_thread() -> bool {
    crate::walker::mark_own_thread()
}

/// Unmarks the calling thread, as it ends.
#[pyfunction]
fn unmark_own_thread() {
    crate::walker::unmark_own_thread()
}

/// Forgets every mark, in a forked child (the marked threads did not come with it).
#[pyfunction]
fn clear_own_threads() {
    crate::walker::clear_own_threads()
}

/// Checks an `output` setting; raises ValueError saying what is accepted.
#[pyfunction]
fn parse_output(output: &str) -> PyResult<String> {
    use span_profile_export::Output;
    match span_profile_export::parse_output(output) {
        Ok(Output::Dir(d)) => Ok(d.display().to_string()),
        Ok(_) => Ok(output.trim().to_string()),
        Err(e) => Err(pyo3::exceptions::PyValueError::new_err(e.to_string())),
    }
}
