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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
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

/// Counters over the profiler's life. Every drop and failure has one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProfilerStats {
    /// Ticks taken.
    pub ticks: u64,
    /// Samples recorded.
    pub samples: u64,
    /// Windows closed.
    pub windows: u64,
    /// Windows handed to every exporter successfully.
    pub exported_windows: u64,
    /// Windows dropped because the export queue was full (oldest first).
    pub dropped_windows: u64,
    /// Failed or timed-out exporter calls.
    pub export_errors: u64,
    /// Walker failures (invalid reads, vanished threads).
    pub walk_errors: u64,
    /// Samples dropped by the window's row cap.
    pub dropped_samples: u64,
    /// CPU time of the sampling thread, nanoseconds.
    pub sampler_cpu_ns: u64,
    /// CPU time of the export thread, nanoseconds.
    pub exporter_cpu_ns: u64,
    /// Ticks that came more than an interval late (sampler starved or process stopped).
    pub missed_ticks: u64,
    /// Stacks cut at the walker's depth cap.
    pub truncated_stacks: u64,
    /// Threads or tasks not walked because a per-tick cap was reached.
    pub skipped_threads: u64,
    /// Label values replaced by `_other` because a cardinality cap was reached.
    pub label_overflow: u64,
    /// Span records dropped because the span table's cap was reached.
    pub dropped_spans: u64,
    /// Span records left out of windows because nothing was sampled in the span (ADR 0010).
    pub unsampled_spans: u64,
    /// Samples dropped because the span or task changed while the stack was copied.
    pub torn_samples: u64,
    /// Sampling stopped because of a failure; [`Profiler::failure`] says which.
    pub failed: bool,
}

#[derive(Debug, Default)]
struct Counters {
    ticks: AtomicU64,
    samples: AtomicU64,
    windows: AtomicU64,
    exported_windows: AtomicU64,
    dropped_windows: AtomicU64,
    export_errors: AtomicU64,
    walk_errors: AtomicU64,
    dropped_samples: AtomicU64,
    missed_ticks: AtomicU64,
    truncated_stacks: AtomicU64,
    skipped_threads: AtomicU64,
    label_overflow: AtomicU64,
    dropped_spans: AtomicU64,
    unsampled_spans: AtomicU64,
    torn_samples: AtomicU64,
    sampler_cpu_ns: AtomicU64,
    exporter_cpu_ns: AtomicU64,
    /// Export-thread CPU not yet reported in a window.
    exporter_cpu_pending: AtomicU64,
}

/// A running profiler. Dropping it stops it (with a 5 s timeout).
#[derive(Debug)]
pub struct Profiler {
    span_scope: SpanScope,
    registry: Arc<ActiveSpanRegistry>,
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

    /// The registry that span hooks feed.
    pub fn registry(&self) -> &Arc<ActiveSpanRegistry> {
        &self.registry
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
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProfilerStats {
            ticks: l(&c.ticks),
            samples: l(&c.samples),
            windows: l(&c.windows),
            exported_windows: l(&c.exported_windows),
            dropped_windows: l(&c.dropped_windows),
            export_errors: l(&c.export_errors),
            walk_errors: l(&c.walk_errors),
            dropped_samples: l(&c.dropped_samples),
            missed_ticks: l(&c.missed_ticks),
            truncated_stacks: l(&c.truncated_stacks),
            skipped_threads: l(&c.skipped_threads),
            label_overflow: l(&c.label_overflow),
            dropped_spans: l(&c.dropped_spans),
            unsampled_spans: l(&c.unsampled_spans),
            torn_samples: l(&c.torn_samples),
            failed: self.failures.sampler_failure().is_some(),
            sampler_cpu_ns: l(&c.sampler_cpu_ns),
            exporter_cpu_ns: l(&c.exporter_cpu_ns),
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
