//! What stopped the profiler, or part of it, reported once, clearly, and never to the host's
//! harm.
//!
//! The profiler's threads run code the host did not write (stack walkers reading interpreter
//! memory, exporters talking to servers). A panic in one of them must not take the host down
//! or pass silently:
//! - a panic in the sampler (a walker bug, say) stops sampling for good; the failure is
//!   logged once and kept for [`crate::Profiler::failure`], and the host goes on;
//! - a panic in an exporter counts as a failed export of that window and is logged once;
//!   the next windows are still offered to every exporter.
//!
//! Where the message goes is the embedder's choice ([`crate::ProfilerBuilder::with_failure_log`]);
//! by default it is one line on stderr.

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Receives each failure message, once per failure kind.
pub type FailureHandler = Arc<dyn Fn(&str) + Send + Sync>;

/// The default handler: one line on stderr.
pub fn log_to_stderr(message: &str) {
    eprintln!("span-profile: {message}");
}

/// The failures of one profiler.
pub(crate) struct FailureLog {
    sampler: OnceLock<String>,
    exporter_logged: AtomicBool,
    handler: FailureHandler,
}

impl fmt::Debug for FailureLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailureLog")
            .field("sampler", &self.sampler.get())
            .finish_non_exhaustive()
    }
}

impl FailureLog {
    pub(crate) fn new(handler: FailureHandler) -> Self {
        Self {
            sampler: OnceLock::new(),
            exporter_logged: AtomicBool::new(false),
            handler,
        }
    }

    /// The sampler stopped because of `panic`; logged the first time only.
    pub(crate) fn sampler_panicked(&self, panic: &(dyn Any + Send)) {
        let message = format!(
            "profiling stopped: the sampler panicked ({}). The application is unaffected; no \
             more samples will be taken in this process. Please report this message.",
            panic_text(panic)
        );
        if self.sampler.set(message).is_ok() {
            if let Some(m) = self.sampler.get() {
                (self.handler)(m);
            }
        }
    }

    /// An exporter panicked; the window counts as a failed export. Logged the first time only.
    pub(crate) fn exporter_panicked(&self, panic: &(dyn Any + Send)) {
        if !self.exporter_logged.swap(true, Ordering::Relaxed) {
            (self.handler)(&format!(
                "an exporter panicked ({}); the window counts as an export error and \
                 profiling goes on (later exporter panics are counted, not logged).",
                panic_text(panic)
            ));
        }
    }

    /// Why sampling stopped, if it stopped because of a failure.
    pub(crate) fn sampler_failure(&self) -> Option<&str> {
        self.sampler.get().map(String::as_str)
    }
}

fn panic_text(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&'static str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}
