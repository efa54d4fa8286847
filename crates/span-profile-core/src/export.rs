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
