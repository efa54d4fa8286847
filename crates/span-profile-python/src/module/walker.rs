//! Chooses the stack walker for this interpreter: the CPython walker when it can read this
//! process, otherwise a stand-in that reports no samples (the reason is in `stats()`).

use std::sync::{Arc, OnceLock};

use pyo3::prelude::*;

use crate::walker::{
    ContextCounters, ContextTarget, PythonVersion, PythonWalker, ReadMode, SpanObjectTable,
    TaskNames, ThreadRegistry, WalkerConfig, WalkerCounters,
};

use super::standin::{Boxed, NoSamples};

/// The walker's side tables that the Python hooks feed and `stats()` reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct WalkerHandles {
    pub(crate) threads: ThreadRegistry,
    pub(crate) counters: Option<Arc<WalkerCounters>>,
    /// Context reads (spans and task names of the running context), when enabled.
    pub(crate) context: Option<Arc<ContextCounters>>,
    /// Task names by id, filled by `Agent.task_tag`.
    pub(crate) task_names: TaskNames,
}

/// The walker for `major.minor`, its handles, and a description for `stats()` (`"cpython 3.12"`
/// or `"none: <why>"`). With `context`, samples take their span and task name from the
/// context running on each thread, resolving span objects in the span-object table that comes
/// with it. `reads` says how interpreter memory is copied. Frames of code under `hidden` (our
/// own package, [`own_package_dir`]) are left out of stacks.
pub(crate) fn build(
    major: u8,
    minor: u8,
    context: Option<(ContextTarget, Arc<SpanObjectTable>)>,
    reads: ReadMode,
    hidden: Option<&'static str>,
) -> (Boxed, WalkerHandles, String) {
    let version = PythonVersion::new(major, minor);
    let config = WalkerConfig {
        hidden_file_prefix: hidden,
        ..WalkerConfig::default()
    };
    match PythonWalker::for_current_process_with(version, config, reads) {
        Ok(mut w) => {
            let with_context = context.is_some();
            if let Some((target, span_objects)) = context {
                w = w.with_context(target).with_span_objects(span_objects);
            }
            let handles = WalkerHandles {
                threads: w.registry().clone(),
                counters: Some(w.counters().clone()),
                context: with_context.then(|| w.context_counters().clone()),
                task_names: w.task_names().clone(),
            };
            (Boxed(Box::new(w)), handles, format!("cpython {version}"))
        }
        Err(e) => (
            Boxed(Box::new(NoSamples)),
            WalkerHandles::default(),
            format!("none: {e}"),
        ),
    }
}

/// The directory of the `span_profile` package with a trailing separator, as its code
/// objects' file names start (ADR 0020), found once per process; `None` if the package has no
/// `__file__`.
pub(crate) fn own_package_dir(py: Python<'_>) -> Option<&'static str> {
    static DIR: OnceLock<Option<String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let os_path = py.import("os.path").ok()?;
        let file = py.import("span_profile").ok()?.getattr("__file__").ok()?;
        let dir = os_path.call_method1("dirname", (file,)).ok()?;
        let dir: String = dir.extract().ok()?;
        (!dir.is_empty()).then(|| format!("{dir}{}", std::path::MAIN_SEPARATOR))
    })
    .as_deref()
}
