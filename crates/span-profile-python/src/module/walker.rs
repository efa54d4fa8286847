//! Chooses the stack walker for this interpreter: the CPython walker when it can read this
//! process, otherwise a stand-in that reports no samples (the reason is in `stats()`).

use std::sync::Arc;

use crate::walker::{PythonVersion, PythonWalker, ThreadRegistry, WalkerConfig, WalkerCounters};

use super::standin::{Boxed, NoSamples};

/// The walker's side tables that the Python hooks feed and `stats()` reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct WalkerHandles {
    pub(crate) threads: ThreadRegistry,
    pub(crate) counters: Option<Arc<WalkerCounters>>,
}

/// The walker for `major.minor`, its handles, and a description for `stats()` (`"cpython 3.12"`
/// or `"none: <why>"`).
pub(crate) fn build(major: u8, minor: u8) -> (Boxed, WalkerHandles, String) {
    let version = PythonVersion::new(major, minor);
    match PythonWalker::for_current_process(version, WalkerConfig::default()) {
        Ok(w) => {
            let handles = WalkerHandles {
                threads: w.registry().clone(),
                counters: Some(w.counters().clone()),
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
