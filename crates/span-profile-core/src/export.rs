//! The exporter trait: where closed windows go.

use std::sync::Arc;
use std::time::Duration;

use crate::{Profile, SpanScope};

/// The errors an exporter can report (shared by all exporters, as in OpenTelemetry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The exporter was shut down; the window was not exported.
    #[error("the exporter is already shut down")]
    AlreadyShutdown,
    /// The operation did not finish in time.
    #[error("the export did not finish within {0:?}")]
    Timeout(Duration),
    /// Anything else; the message says what failed and what to check.
    #[error("export failed: {0}")]
    InternalFailure(String),
}

/// What became of the windows an exporter was handed, by [`Exporter::window_counts`]. Every
/// window passed to [`Exporter::export`] is in exactly one field: their sum is the number of
/// `export` calls (ADR 0027).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowCounts {
    /// Delivered: accepted by the receiver (2xx) or written to the store.
    pub delivered: u64,
    /// Not delivered yet: waiting in memory or in a disk spool.
    pub waiting: u64,
    /// Lost because the spool was over its bound, or its file could not be written or read.
    pub dropped_spool_full: u64,
    /// Lost because the window grew older than the receiver accepts.
    pub dropped_expired: u64,
    /// Lost because the receiver refused it (a 4xx), or the exporter failed to write it.
    pub dropped_rejected: u64,
    /// Lost at shutdown (left in a memory spool, or handed over after shutdown).
    pub dropped_at_shutdown: u64,
}

impl WindowCounts {
    /// Windows accounted for: the sum of every field.
    pub fn total(&self) -> u64 {
        self.delivered
            + self.waiting
            + self.dropped_spool_full
            + self.dropped_expired
            + self.dropped_rejected
            + self.dropped_at_shutdown
    }
}

/// A destination for closed windows (a file store, Pyroscope, an OTLP collector).
///
/// The methods are plain blocking calls, as OpenTelemetry's `export`, `force_flush` and
/// `shutdown_with_timeout` are.
///
/// # Who calls, and who enforces timeouts
///
/// The profiler calls every method from its single export thread, never from the sampling
/// thread, one call at a time, so an exporter may block or do I/O without slowing sampling.
///
/// **The exporter bounds its own calls.** The profiler cannot interrupt a call, so:
/// - `export` returns in bounded time. An exporter that talks to a network hands the window
///   to its own worker, which owns the request timeout, the retries and the spool (the
///   Pyroscope and OTLP exporters do, through `span_profile_export::delivery`); one that
///   writes locally may block for as long as the write takes.
/// - `shutdown_with_timeout(timeout)` returns within `timeout`.
///
/// What a call that blocks anyway costs: later windows wait in the profiler's bounded export
/// queue, and when it is full the oldest is dropped and counted (`dropped_windows`); sampling
/// is never slowed. [`Profiler::shutdown_with_timeout`](crate::Profiler::shutdown_with_timeout)
/// waits for the export thread until its own deadline, then returns
/// [`ExportError::Timeout`] and leaves the thread to finish.
///
/// A call that returns an error or panics costs that window for that exporter only; it is
/// counted (`export_errors`), the next window carries the count, and a panic is logged once.
///
/// ```
/// use std::sync::Arc;
/// use span_profile_core::{ExportError, Exporter, Profile, SpanScope};
///
/// #[derive(Debug)]
/// struct CountWindows(std::sync::atomic::AtomicUsize);
///
/// impl Exporter for CountWindows {
///     fn export(&self, _profile: Arc<Profile>) -> Result<(), ExportError> {
///         self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///         Ok(())
///     }
///     // This exporter keeps every sample under the span that was innermost.
///     fn span_scope(&self) -> SpanScope {
///         SpanScope::All
///     }
/// }
/// ```
pub trait Exporter: Send + Sync + std::fmt::Debug + 'static {
    /// Sends one window. Returns in bounded time (see the trait's documentation).
    fn export(&self, profile: Arc<Profile>) -> Result<(), ExportError>;

    /// Sends anything buffered. The default has nothing to send.
    fn force_flush(&self) -> Result<(), ExportError> {
        Ok(())
    }

    /// Flushes and releases resources, returning within `timeout`. The default has nothing
    /// to release.
    fn shutdown_with_timeout(&self, timeout: Duration) -> Result<(), ExportError> {
        let _ = timeout;
        Ok(())
    }

    /// [`Exporter::shutdown_with_timeout`] with 5 seconds.
    fn shutdown(&self) -> Result<(), ExportError> {
        self.shutdown_with_timeout(Duration::from_secs(5))
    }

    /// What became of the windows this exporter was handed, for an exporter that delivers
    /// after `export` returns (a network exporter with a spool). `None`, the default, means
    /// `export` is the delivery: the profiler counts a window as delivered when `export`
    /// returns `Ok` and as rejected when it fails. An exporter that returns `Some` accounts
    /// for every window it was passed, whatever `export` returned. Called from any thread
    /// (the sampler stamps the counts into each window's stats): reads atomics only.
    fn window_counts(&self) -> Option<WindowCounts> {
        None
    }

    /// The span each sample is stored under by this exporter's backend: the innermost span
    /// ([`SpanScope::All`]) or the local root ([`SpanScope::LocalRoot`]). Span processors ask
    /// it, through [`Profiler::span_scope`](crate::Profiler::span_scope), to set
    /// `pyroscope.profile.id` only on spans whose profile can be found
    /// ([`SpanScope::links`]). The default, `All`, is right for an exporter that keeps each
    /// sample's span id as it comes (the `span_id` of a [`crate::ProfileSample`]).
    fn span_scope(&self) -> SpanScope {
        SpanScope::All
    }
}
