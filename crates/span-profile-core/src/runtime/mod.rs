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
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::failure::FailureLog;
use crate::registry::ActiveSpanRegistry;
use crate::spans::{SpanScope, SpanTable};
use crate::{ExportError, Exporter, WindowCounts};

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
        /// Windows made (closed).
        windows,
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
        /// Resource attributes dropped (past 128) or cut (past 4 KiB) at start.
        capped_resource_attributes,
    } + {
        /// Export-thread CPU not yet reported in a window.
        exporter_cpu_pending,
    }
    /// Counters over the profiler's life. Every drop and failure has one.
    ///
    /// Every window made is in exactly one of `exported_windows`, `waiting_windows`,
    /// `dropped_windows` and the `dropped_*_windows` (ADR 0027), counted per exporter: with
    /// one exporter, `windows` is their sum; with `n`, `n * windows` is.
    #[non_exhaustive]
    pub struct ProfilerStats + {
        /// Sampling stopped because of a failure; [`Profiler::failure`] says which.
        failed: bool,
        /// Windows delivered: accepted by the receiver (2xx) or written to the store.
        exported_windows: u64,
        /// Windows not delivered yet: in the export queue, in an exporter's memory or disk
        /// spool.
        waiting_windows: u64,
        /// Windows lost because an exporter's spool was full (or could not be written).
        dropped_spool_full_windows: u64,
        /// Windows lost because they grew older than the receiver accepts.
        dropped_expired_windows: u64,
        /// Windows the receiver refused (a 4xx), or a store failed to write.
        dropped_rejected_windows: u64,
        /// Windows lost at shutdown (left in a memory spool, or made after it).
        dropped_at_shutdown_windows: u64,
    }
}

/// What the profiler's threads share to account for every window (ADR 0027): the exporters,
/// the outcomes of the exporters whose `export` is the delivery, and the stop deadline.
#[derive(Debug)]
pub(in crate::runtime) struct Ledger {
    exporters: Vec<Arc<dyn Exporter>>,
    /// Per exporter without [`Exporter::window_counts`]: windows `export` took, and those it
    /// failed.
    direct: Vec<(AtomicU64, AtomicU64)>,
    /// When [`Profiler::shutdown_with_timeout`] must return, once it was called.
    deadline: Mutex<Option<Instant>>,
}

impl Ledger {
    pub(in crate::runtime) fn new(exporters: Vec<Arc<dyn Exporter>>) -> Self {
        let direct = exporters
            .iter()
            .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
            .collect();
        Self {
            exporters,
            direct,
            deadline: Mutex::new(None),
        }
    }

    pub(in crate::runtime) fn exporters(&self) -> &[Arc<dyn Exporter>] {
        &self.exporters
    }

    /// Books the outcome of exporter `i`'s `export`, if `export` is its delivery.
    pub(in crate::runtime) fn exported(&self, i: usize, ok: bool) {
        if self.exporters[i].window_counts().is_some() {
            return;
        }
        let (done, failed) = &self.direct[i];
        if ok { done } else { failed }.fetch_add(1, Ordering::Relaxed);
    }

    /// The time left until the stop deadline, if a stop was asked for.
    pub(in crate::runtime) fn time_left(&self) -> Option<Duration> {
        let d = *self.deadline.lock().unwrap_or_else(PoisonError::into_inner);
        d.map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// What became of every window so far. The exporters are read before the profiler's
    /// counters: a window an exporter counts has been counted as made already.
    pub(in crate::runtime) fn account(&self, counters: &Counters) -> WindowCounts {
        let per: Vec<WindowCounts> = self
            .exporters
            .iter()
            .zip(&self.direct)
            .map(|(e, (done, failed))| {
                e.window_counts().unwrap_or(WindowCounts {
                    delivered: done.load(Ordering::Relaxed),
                    dropped_rejected: failed.load(Ordering::Relaxed),
                    ..WindowCounts::default()
                })
            })
            .collect();
        let made = counters.windows.load(Ordering::Relaxed);
        let queue_full = counters.dropped_windows.load(Ordering::Relaxed);
        let offered = made.saturating_sub(queue_full);
        if per.is_empty() {
            // No exporter: a window that leaves the queue has nowhere to go, and nothing to lose.
            return WindowCounts {
                delivered: offered,
                ..WindowCounts::default()
            };
        }
        let mut sum = WindowCounts::default();
        for c in per {
            // Windows made but not yet handed to this exporter wait in the export queue.
            sum.waiting += c.waiting + offered.saturating_sub(c.total());
            sum.delivered += c.delivered;
            sum.dropped_spool_full += c.dropped_spool_full;
            sum.dropped_expired += c.dropped_expired;
            sum.dropped_rejected += c.dropped_rejected;
            sum.dropped_at_shutdown += c.dropped_at_shutdown;
        }
        sum
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
    ledger: Arc<Ledger>,
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
        let a = self.ledger.account(&self.counters);
        ProfilerStats {
            failed: self.failures.sampler_failure().is_some(),
            exported_windows: a.delivered,
            waiting_windows: a.waiting,
            dropped_spool_full_windows: a.dropped_spool_full,
            dropped_expired_windows: a.dropped_expired,
            dropped_rejected_windows: a.dropped_rejected,
            dropped_at_shutdown_windows: a.dropped_at_shutdown,
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
        // The export thread gives the exporters' shutdown what is left of it.
        *self
            .ledger
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(deadline);
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
