//! The profiler runtime: a sampling thread, windows aligned to the wall clock, and an export
//! thread fed through a bounded queue.
//!
//! - [`builder`]: [`ProfilerBuilder`], which validates the settings and starts the threads;
//! - [`sampler`]: the sampling thread, its ticks and window closes, and [`SamplerHarness`];
//! - [`export_thread`]: the export thread, which hands each closed window to the exporters.
//!
//! This module holds what they share: the [`Profiler`] handle and the counters.

mod builder;
mod export_thread;
mod sampler;

pub use builder::ProfilerBuilder;
pub use sampler::SamplerHarness;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::failure::FailureLog;
use crate::registry::ActiveSpanRegistry;
use crate::spans::{SpanScope, SpanTable};
use crate::ExportError;

/// Why the profiler could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No walker was configured.
    #[error("no stack walker configured: call ProfilerBuilder::with_walker")]
    NoWalker,
    /// A setting is out of range.
    #[error("invalid setting {name}: {reason}")]
    InvalidSetting {
        /// The setting.
        name: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// The OS refused to start a thread.
    #[error("could not start the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
}

crate::counters! {
    /// The profiler's running totals, shared by its threads (`Relaxed`: independent
    /// statistics).
    struct Counters(pub(super)) {
        /// Ticks taken.
        ticks,
        /// Samples recorded.
        samples,
        /// Windows closed.
        windows,
        /// Windows handed to every exporter successfully.
        exported_windows,
        /// Windows dropped because the export queue was full (oldest first).
        dropped_windows,
        /// Failed or timed-out exporter calls.
        export_errors,
        /// Walker failures (invalid reads, vanished threads).
        walk_errors,
        /// Samples dropped by the window's row cap.
        dropped_samples,
        /// CPU time of the sampling thread, nanoseconds.
        sampler_cpu_ns,
        /// CPU time of the export thread, nanoseconds.
        exporter_cpu_ns,
        /// Ticks that came more than an interval late (sampler starved or process stopped).
        missed_ticks,
        /// Stacks cut at the walker's depth cap.
        truncated_stacks,
        /// Threads or tasks not walked because a per-tick cap was reached.
        skipped_threads,
        /// Label values replaced by `_other` because a cardinality cap was reached.
        label_overflow,
        /// Span records dropped because the span table's cap was reached.
        dropped_spans,
        /// Span records left out of windows because nothing was sampled in the span (ADR 0010).
        unsampled_spans,
        /// Samples dropped because the span or task changed while the stack was copied.
        torn_samples,
    } + {
        /// Export-thread CPU not yet reported in a window.
        exporter_cpu_pending,
    }
    /// Counters over the profiler's life. Every drop and failure has one.
    #[non_exhaustive]
    pub struct ProfilerStats + {
        /// Sampling stopped because of a failure; [`Profiler::failure`] says which.
        failed: bool,
    }
}

/// The profiler's registry, made on first ask and shared by the builder, the profiler and the
/// sampler (which reads only its loss counters, once per window).
#[derive(Debug, Clone, Default)]
pub(crate) struct LazyRegistry(Arc<OnceLock<Arc<ActiveSpanRegistry>>>);

impl LazyRegistry {
    /// One that holds `registry` already.
    pub(crate) fn with(registry: Arc<ActiveSpanRegistry>) -> Self {
        Self(Arc::new(OnceLock::from(registry)))
    }

    /// The registry, made with the default capacity if it does not exist yet.
    pub(crate) fn get(&self) -> &Arc<ActiveSpanRegistry> {
        self.0
            .get_or_init(|| Arc::new(ActiveSpanRegistry::default()))
    }

    /// The registry if anyone made it.
    pub(crate) fn made(&self) -> Option<&Arc<ActiveSpanRegistry>> {
        self.0.get()
    }
}

/// A running profiler. Dropping it stops it (with a 5 s timeout).
#[derive(Debug)]
pub struct Profiler {
    span_scope: SpanScope,
    registry: LazyRegistry,
    spans: Arc<SpanTable>,
    counters: Arc<Counters>,
    failures: Arc<FailureLog>,
    done_rx: Receiver<()>,
    stopping: Arc<AtomicBool>,
    threads: Mutex<Option<(JoinHandle<()>, JoinHandle<()>)>>,
}

impl Profiler {
    /// A builder with defaults: 100 Hz, 60 s windows, resource labels from the environment.
    pub fn builder() -> ProfilerBuilder {
        ProfilerBuilder::default()
    }

    /// The registry for span hooks to feed and walkers to read: the builder's, or one made
    /// now (with the default capacity) if nobody asked for one before. Its loss counters are
    /// reported in every window from the one it is made in.
    pub fn registry(&self) -> &Arc<ActiveSpanRegistry> {
        self.registry.get()
    }

    /// Why sampling stopped, if a failure stopped it (the message that was logged).
    pub fn failure(&self) -> Option<&str> {
        self.failures.sampler_failure()
    }

    /// The span table that span hooks feed.
    pub fn span_table(&self) -> &Arc<SpanTable> {
        &self.spans
    }

    /// The spans whose own id the exporters store samples under, for span processors that
    /// set `pyroscope.profile.id` ([`SpanScope::links`]): [`SpanScope::All`] if any exporter
    /// keeps the innermost span ([`Exporter::span_scope`](crate::Exporter::span_scope)),
    /// [`SpanScope::LocalRoot`] otherwise.
    pub fn span_scope(&self) -> SpanScope {
        self.span_scope
    }

    /// Counters so far.
    pub fn stats(&self) -> ProfilerStats {
        ProfilerStats {
            failed: self.failures.sampler_failure().is_some(),
            ..self.counters.snapshot()
        }
    }

    /// Stops sampling, closes the last partial window, exports what is queued and shuts the
    /// exporters down. Returns within `timeout`: if exporters are still busy then, their
    /// thread is left to finish on its own and `Timeout` is returned.
    pub fn shutdown_with_timeout(&self, timeout: Duration) -> Result<ProfilerStats, ExportError> {
        if self.stopping.swap(true, Ordering::AcqRel) {
            return Err(ExportError::AlreadyShutdown);
        }
        let deadline = Instant::now() + timeout;
        // Release: the sampler's Acquire load of `stopping` then sees a completed request.
        // Unpark wakes it from its sleep until the next tick.
        if let Some((sampler, _)) = self
            .threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            sampler.thread().unpark();
        }
        let result = match self.done_rx.recv_deadline(deadline) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => Ok(self.stats()),
            Err(RecvTimeoutError::Timeout) => Err(ExportError::Timeout(timeout)),
        };
        if result.is_ok() {
            let threads = self
                .threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some((s, e)) = threads {
                let _ = s.join();
                let _ = e.join();
            }
        }
        result
    }

    /// [`Profiler::shutdown_with_timeout`] with 5 seconds.
    pub fn shutdown(&self) -> Result<ProfilerStats, ExportError> {
        self.shutdown_with_timeout(Duration::from_secs(5))
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        if !self.stopping.load(Ordering::Acquire) {
            let _ = self.shutdown();
        }
    }
}
