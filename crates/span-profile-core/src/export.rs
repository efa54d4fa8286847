//! The exporter trait: where closed windows go.

use std::sync::Arc;
use std::time::Duration;

use crate::Profile;

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
/// # Concurrency and blocking
///
/// The profiler calls every method from its single export thread, never from the sampling
/// thread, one call at a time, so an exporter may block or do I/O; the sampling thread is
/// never slowed by it. The export thread awaits each future with the profiler's export
/// timeout: an exporter that hangs makes the call time out, is counted, and later windows
/// still go out. An exporter that needs retries and spooling does them inside `export`,
/// within that timeout, or hands the window to its own worker.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use span_profile_core::{ExportError, Exporter, Profile};
///
/// #[derive(Debug)]
/// struct CountWindows(std::sync::atomic::AtomicUsize);
///
/// #[async_trait::async_trait]
/// impl Exporter for CountWindows {
///     async fn export(&self, _profile: Arc<Profile>) -> Result<(), ExportError> {
///         self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///         Ok(())
///     }
///     async fn force_flush(&self) -> Result<(), ExportError> { Ok(()) }
///     async fn shutdown_with_timeout(&self, _t: Duration) -> Result<(), ExportError> { Ok(()) }
/// }
/// ```
#[async_trait::async_trait]
pub trait Exporter: Send + Sync + std::fmt::Debug + 'static {
    /// Sends one window.
    async fn export(&self, profile: Arc<Profile>) -> Result<(), ExportError>;
    /// Sends anything buffered.
    async fn force_flush(&self) -> Result<(), ExportError>;
    /// Flushes and releases resources, within `timeout`.
    async fn shutdown_with_timeout(&self, timeout: Duration) -> Result<(), ExportError>;
    /// [`Exporter::shutdown_with_timeout`] with 5 seconds.
    async fn shutdown(&self) -> Result<(), ExportError> {
        self.shutdown_with_timeout(Duration::from_secs(5)).await
    }
}
