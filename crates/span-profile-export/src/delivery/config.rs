//! The delivery's settings: [`DeliveryConfig`], its defaults and the `with_*` setters that
//! keep it valid (bounds of at least one, a connect timeout within the request timeout), and
//! [`DeliveryError`], why a delivery cannot start from it.

use std::path::PathBuf;
use std::time::Duration;

/// How a delivery sends, retries and spools. Build it with the `with_*` setters.
///
/// ```
/// use std::time::Duration;
/// use span_profile_export::delivery::DeliveryConfig;
///
/// let config = DeliveryConfig::default()
///     .with_timeout(Duration::from_secs(5))
///     .with_backoff(Duration::from_millis(200), Duration::from_secs(10))
///     .with_spool_dir("/var/lib/span-profile/spool/pyroscope")
///     .with_spool_max_bytes(32 << 20);
/// assert_eq!(config.timeout, Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeliveryConfig {
    /// Longest time one request may take, connection included (default 10 s).
    pub timeout: Duration,
    /// Longest time to connect (default 5 s, and never more than `timeout`).
    pub connect_timeout: Duration,
    /// First retry delay (default 500 ms); each failure doubles it, up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest retry delay (default 30 s).
    pub max_backoff: Duration,
    /// Entries whose window ended longer ago than this are dropped, not sent (default 1 h,
    /// Pyroscope's default ingestion window).
    pub max_age: Duration,
    /// Directory of the on-disk spool; `None` keeps the spool in memory (lost on restart).
    pub spool_dir: Option<PathBuf>,
    /// Bytes the spool may hold (default 64 MiB).
    pub spool_max_bytes: u64,
    /// Entries the spool may hold (default 1,000).
    pub spool_max_entries: usize,
    /// A PEM file of the CA certificates that verify an `https://` server, in place of the
    /// bundled Mozilla roots (for a server behind a private CA). `None`: the bundled roots.
    pub ca_file: Option<PathBuf>,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_age: Duration::from_secs(3600),
            spool_dir: None,
            spool_max_bytes: 64 << 20,
            spool_max_entries: 1000,
            ca_file: None,
        }
    }
}

impl DeliveryConfig {
    /// Verifies `https://` servers with the CA certificates in the PEM file `path` instead of
    /// the bundled Mozilla roots.
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Sets the per-request timeout (and caps the connect timeout at it).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.connect_timeout = self.connect_timeout.min(timeout);
        self
    }
    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
    /// Sets the first and the longest retry delay.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }
    /// Sets the age past which entries are dropped.
    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }
    /// Spools on disk in `dir` (created if missing).
    pub fn with_spool_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spool_dir = Some(dir.into());
        self
    }
    /// Sets the spool's byte bound.
    pub fn with_spool_max_bytes(mut self, bytes: u64) -> Self {
        self.spool_max_bytes = bytes;
        self
    }
    /// Sets the spool's entry bound (at least 1).
    pub fn with_spool_max_entries(mut self, entries: usize) -> Self {
        self.spool_max_entries = entries.max(1);
        self
    }
}

/// Why a [`Delivery`](super::Delivery) could not be created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The spool directory cannot be created or read.
    #[error("cannot use spool directory {dir}: {source}; create it with write access for this process or set another spool directory")]
    Spool {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The worker thread could not be started.
    #[error("cannot start the delivery thread: {0}")]
    Thread(std::io::Error),
    /// The CA file cannot be read, or holds no PEM certificate.
    #[error("cannot use CA file {path}: {reason}; point it at a PEM file of CA certificates (-----BEGIN CERTIFICATE-----)")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}
