//! Delivery shared by the network exporters: a worker thread, a bounded spool (on disk or in
//! memory), retries with exponential backoff and jitter, and a counter for every drop.
//!
//! An exporter encodes a window into one or more [`Request`]s and hands them to
//! [`Delivery::submit`], which never blocks: the requests go through a bounded queue to the
//! delivery's own worker thread. The worker appends them to the spool and sends the spool
//! oldest-first, one request at a time, so requests arrive in the order they were submitted.
//!
//! - **2xx**: sent; the entry leaves the spool.
//! - **429, 5xx, connection errors, timeouts**: retried after an exponential backoff with
//!   jitter (a `Retry-After` in seconds is honoured, up to the maximum backoff). The entry
//!   stays at the head of the spool, so later windows wait behind it.
//! - **Any other status**: not retried. The entry is dropped, counted in
//!   [`DeliveryStats::rejected`], and the server's message is kept for
//!   [`Delivery::last_error`] and the next [`Delivery::take_failures`].
//! - **Older than [`DeliveryConfig::max_age`]** (Pyroscope's ingestion window): dropped and
//!   counted in [`DeliveryStats::dropped_expired`], never retried forever.
//! - **Spool over its bound** ([`DeliveryConfig::spool_max_bytes`] /
//!   [`DeliveryConfig::spool_max_entries`]): the oldest entries are dropped and counted in
//!   [`DeliveryStats::dropped_spool_full`].
//!
//! With [`DeliveryConfig::spool_dir`] set, every entry is a file (`<seq>.req`, written to a
//! temporary name and renamed), so what waits survives a restart: a new [`Delivery`] over the
//! same directory sends it first. Request headers (credentials) are never written to disk;
//! they are added when the entry is sent. One process should own a spool directory.

use std::collections::VecDeque;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use span_profile_core::internal::{now_unix_ns, XorShift};
use span_profile_core::ExportError;

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
    /// Requests that may wait between [`Delivery::submit`] and the worker (default 16).
    /// When full, the oldest waiting request is dropped and counted.
    pub queue: usize,
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
            queue: 16,
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
    /// Sets the hand-off queue length (at least 1).
    pub fn with_queue(mut self, requests: usize) -> Self {
        self.queue = requests.max(1);
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

/// One HTTP POST, as spooled. Headers common to every request (credentials) are not part
/// of it: the [`Delivery`] adds them when sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Path and query, appended to the delivery's base URL (e.g. `/push.v1.PusherService/Push`).
    pub path: String,
    /// `Content-Type`.
    pub content_type: String,
    /// `Content-Encoding` (`gzip`), if the body is compressed.
    pub content_encoding: Option<String>,
    /// End of the window the request carries, Unix nanoseconds (for the age check).
    pub window_end_unix_ns: u64,
    /// The body.
    pub body: Vec<u8>,
}

/// What a backend makes of a 2xx response body (OTLP's partial success).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseOutcome {
    /// Items the server accepted the request for but rejected (OTLP `rejected_profiles`).
    pub rejected_items: u64,
    /// The server's explanation, if any.
    pub message: Option<String>,
}

/// Reads a 2xx response body.
pub type ResponseCheck = fn(&[u8]) -> ResponseOutcome;

/// Counters over a delivery's life. Every drop and failure has one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeliveryStats {
    /// Requests handed to [`Delivery::submit`].
    pub submitted: u64,
    /// Requests the server accepted (2xx).
    pub sent: u64,
    /// Attempts that failed in a retryable way (429, 5xx, connection errors, timeouts).
    pub retries: u64,
    /// Of those, attempts that timed out.
    pub timeouts: u64,
    /// Requests the server refused with a non-retryable status (dropped).
    pub rejected: u64,
    /// Items rejected inside accepted requests (OTLP partial success).
    pub rejected_items: u64,
    /// Requests accepted whole but with a message from the server (OTLP's partial success
    /// with nothing rejected: a warning); the last one is [`Delivery::last_warning`].
    pub warnings: u64,
    /// Requests dropped because the hand-off queue was full (oldest first).
    pub dropped_queue_full: u64,
    /// Requests dropped because the spool was over its bound (oldest first).
    pub dropped_spool_full: u64,
    /// Requests dropped because their window was older than `max_age`.
    pub dropped_expired: u64,
    /// Requests still in an in-memory spool at shutdown (lost).
    pub dropped_at_shutdown: u64,
    /// Spool files that could not be read or written (dropped).
    pub spool_errors: u64,
    /// Requests waiting in the spool now.
    pub spooled: u64,
    /// Bytes waiting in the spool now.
    pub spooled_bytes: u64,
}

impl DeliveryStats {
    /// Requests lost for any reason.
    pub fn dropped(&self) -> u64 {
        self.rejected
            + self.dropped_queue_full
            + self.dropped_spool_full
            + self.dropped_expired
            + self.dropped_at_shutdown
            + self.spool_errors
    }
}

/// Why a [`Delivery`] could not be created.
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

/// The TLS settings of `config`: its CA file's certificates as the only roots, or the bundled
/// Mozilla roots.
fn tls_config(config: &DeliveryConfig) -> Result<ureq::tls::TlsConfig, DeliveryError> {
    use ureq::tls::{parse_pem, PemItem, RootCerts, TlsConfig};
    let builder = TlsConfig::builder();
    let Some(path) = &config.ca_file else {
        return Ok(builder.build());
    };
    let fail = |reason: String| DeliveryError::CaFile {
        path: path.clone(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let mut certs = Vec::new();
    for item in parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(fail(format!("not valid PEM ({e})"))),
        }
    }
    if certs.is_empty() {
        return Err(fail("it holds no certificate".into()));
    }
    Ok(builder
        .root_certs(RootCerts::new_with_certs(&certs))
        .build())
}

#[derive(Debug, Default)]
struct Counters {
    submitted: AtomicU64,
    sent: AtomicU64,
    retries: AtomicU64,
    timeouts: AtomicU64,
    rejected: AtomicU64,
    rejected_items: AtomicU64,
    warnings: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_spool_full: AtomicU64,
    dropped_expired: AtomicU64,
    dropped_at_shutdown: AtomicU64,
    spool_errors: AtomicU64,
    spooled: AtomicU64,
    spooled_bytes: AtomicU64,
}

/// Worker state that `force_flush` waits on.
#[derive(Debug, Default)]
struct Progress {
    /// Requests submitted but not yet sent or dropped.
    pending: u64,
    /// The last attempt failed and the worker is waiting to retry.
    backing_off: bool,
    last_error: Option<String>,
    last_warning: Option<String>,
    /// Failures not yet reported through `take_failures`.
    unreported: Vec<String>,
    worker_done: bool,
}

#[derive(Debug)]
struct Shared {
    counters: Counters,
    progress: Mutex<Progress>,
    changed: Condvar,
    shutdown: AtomicBool,
    /// The shutdown deadline, as nanoseconds since `epoch`.
    deadline_ns: AtomicU64,
    epoch: Instant,
    /// Where to report a failure: `"Pyroscope"`, `"the OTLP endpoint"`.
    target: &'static str,
}

impl Shared {
    fn progress(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn settle(&self, n: u64) {
        let mut p = self.progress();
        p.pending = p.pending.saturating_sub(n);
        drop(p);
        self.changed.notify_all();
    }

    fn fail(&self, message: String) {
        let mut p = self.progress();
        if p.unreported.len() < 8 {
            p.unreported.push(message.clone());
        }
        p.last_error = Some(message);
    }
}

/// The sending side of an exporter: a worker thread with a bounded spool.
///
/// ```no_run
/// use span_profile_export::delivery::{Delivery, DeliveryConfig, Request};
///
/// let delivery = Delivery::start(
///     "http://127.0.0.1:4040",
///     vec![("X-Scope-OrgID".into(), "tenant-1".into())],
///     DeliveryConfig::default(),
///     "Pyroscope",
///     None,
/// )
/// .unwrap();
/// delivery.submit(Request {
///     path: "/push.v1.PusherService/Push".into(),
///     content_type: "application/proto".into(),
///     content_encoding: None,
///     window_end_unix_ns: 0,
///     body: Vec::new(),
/// });
/// println!("{:?}", delivery.stats());
/// ```
pub struct Delivery {
    shared: Arc<Shared>,
    tx: Sender<Request>,
    /// Lets `submit` drop the oldest queued request when the queue is full.
    rx: Receiver<Request>,
    wake: Sender<()>,
    worker: Mutex<Option<JoinHandle<()>>>,
    config: DeliveryConfig,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Headers hold credentials: never printed.
        f.debug_struct("Delivery")
            .field("target", &self.shared.target)
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Delivery {
    /// Starts the worker. `base_url` is the server (`http://host:4040`) without a trailing
    /// path; `headers` go on every request and are never logged, spooled or shown in errors.
    /// `target` names the server in error messages; `check` reads 2xx bodies.
    pub fn start(
        base_url: &str,
        headers: Vec<(String, String)>,
        config: DeliveryConfig,
        target: &'static str,
        check: Option<ResponseCheck>,
    ) -> Result<Self, DeliveryError> {
        let tls = tls_config(&config)?;
        let spool = Spool::open(&config)?;
        let shared = Arc::new(Shared {
            counters: Counters::default(),
            progress: Mutex::new(Progress {
                pending: spool.len() as u64,
                ..Progress::default()
            }),
            changed: Condvar::new(),
            shutdown: AtomicBool::new(false),
            deadline_ns: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            target,
        });
        spool.publish(&shared.counters);
        let (tx, rx) = bounded::<Request>(config.queue.max(1));
        let (wake, wake_rx) = bounded::<()>(1);
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(config.timeout))
                .timeout_connect(Some(config.connect_timeout.min(config.timeout)))
                .user_agent(concat!("span-profile/", env!("CARGO_PKG_VERSION")))
                .tls_config(tls)
                .build(),
        );
        let worker = Worker {
            shared: shared.clone(),
            rx: rx.clone(),
            wake: wake_rx,
            spool,
            agent,
            base_url: base_url.trim_end_matches('/').to_string(),
            headers,
            config: config.clone(),
            check,
            attempt: 0,
            rng: XorShift::seeded(),
        };
        let handle = std::thread::Builder::new()
            .name("span-profile-delivery".into())
            .spawn(move || worker.run())
            .map_err(DeliveryError::Thread)?;
        Ok(Self {
            shared,
            tx,
            rx,
            wake,
            worker: Mutex::new(Some(handle)),
            config,
        })
    }

    /// Queues a request for the worker; never blocks. A full queue drops its oldest request
    /// (counted in [`DeliveryStats::dropped_queue_full`]). After shutdown the request is
    /// refused with [`ExportError::AlreadyShutdown`].
    pub fn submit(&self, request: Request) -> Result<(), ExportError> {
        if self.shared.shutdown.load(Ordering::Acquire) {
            return Err(ExportError::AlreadyShutdown);
        }
        let c = &self.shared.counters;
        c.submitted.fetch_add(1, Ordering::Relaxed);
        self.shared.progress().pending += 1;
        let mut request = request;
        loop {
            match self.tx.try_send(request) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(r)) => {
                    if self.rx.try_recv().is_ok() {
                        c.dropped_queue_full.fetch_add(1, Ordering::Relaxed);
                        self.shared.settle(1);
                    }
                    request = r;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.shared.settle(1);
                    return Err(ExportError::InternalFailure(format!(
                        "the delivery thread for {} has stopped; restart the profiler",
                        self.shared.target
                    )));
                }
            }
        }
    }

    /// The body of a network exporter's `export`: refuses after shutdown, drops (and counts
    /// in `expired`) a window that ended longer ago than `max_age`, submits the window's
    /// requests, and returns the failures seen since the previous call as an error (the
    /// window itself is still queued).
    pub(crate) fn export_window(
        &self,
        end_ns: u64,
        expired: &AtomicU64,
        requests: impl FnOnce() -> Vec<Request>,
    ) -> Result<(), ExportError> {
        if self.shared.shutdown.load(Ordering::Acquire) {
            return Err(ExportError::AlreadyShutdown);
        }
        if is_expired(end_ns, self.config.max_age) {
            expired.fetch_add(1, Ordering::Relaxed);
            return Err(ExportError::InternalFailure(format!(
                "window dropped: it ended more than {:?} ago, outside {}'s ingestion window",
                self.config.max_age, self.shared.target
            )));
        }
        for r in requests() {
            self.submit(r)?;
        }
        match self.take_failures() {
            None => Ok(()),
            Some(f) => Err(ExportError::InternalFailure(f)),
        }
    }

    /// [`Delivery::flush`] with the request timeout plus a second: what an exporter's
    /// `force_flush` waits.
    pub(crate) fn flush_default(&self) -> Result<(), ExportError> {
        self.flush(self.config.timeout + Duration::from_secs(1))
    }

    /// Counters so far.
    pub fn stats(&self) -> DeliveryStats {
        let c = &self.shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DeliveryStats {
            submitted: l(&c.submitted),
            sent: l(&c.sent),
            retries: l(&c.retries),
            timeouts: l(&c.timeouts),
            rejected: l(&c.rejected),
            rejected_items: l(&c.rejected_items),
            warnings: l(&c.warnings),
            dropped_queue_full: l(&c.dropped_queue_full),
            dropped_spool_full: l(&c.dropped_spool_full),
            dropped_expired: l(&c.dropped_expired),
            dropped_at_shutdown: l(&c.dropped_at_shutdown),
            spool_errors: l(&c.spool_errors),
            spooled: l(&c.spooled),
            spooled_bytes: l(&c.spooled_bytes),
        }
    }

    /// The last failure (a refused request, a failed attempt), without credentials.
    pub fn last_error(&self) -> Option<String> {
        self.shared.progress().last_error.clone()
    }

    /// The last warning of a server that accepted a request whole (counted in
    /// [`DeliveryStats::warnings`]; not a failure, so `export` does not return it).
    pub fn last_warning(&self) -> Option<String> {
        self.shared.progress().last_warning.clone()
    }

    /// Failures not yet reported, joined into one message; `None` if there were none.
    /// Exporters return it from `export` so the profiler counts it.
    pub fn take_failures(&self) -> Option<String> {
        let mut p = self.shared.progress();
        if p.unreported.is_empty() {
            return None;
        }
        let all = std::mem::take(&mut p.unreported);
        Some(all.join("; "))
    }

    /// Waits until everything submitted is sent or dropped, up to `timeout`. Returns early
    /// with an error while the server is failing (the requests stay spooled).
    pub fn flush(&self, timeout: Duration) -> Result<(), ExportError> {
        let _ = self.wake.try_send(());
        let deadline = Instant::now() + timeout;
        let mut p = self.shared.progress();
        loop {
            if p.pending == 0 {
                return Ok(());
            }
            if p.backing_off || p.worker_done {
                return Err(ExportError::InternalFailure(format!(
                    "{} request(s) for {} wait in the spool: {}",
                    p.pending,
                    self.shared.target,
                    p.last_error
                        .as_deref()
                        .unwrap_or("the server is unreachable")
                )));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ExportError::Timeout(timeout));
            }
            p = self
                .shared
                .changed
                .wait_timeout(p, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Stops accepting requests and gives the worker until `timeout` to send what waits.
    /// What is left stays in a disk spool for the next start, or is counted in
    /// [`DeliveryStats::dropped_at_shutdown`] for a memory spool.
    pub fn shutdown_with_timeout(&self, timeout: Duration) -> Result<(), ExportError> {
        if self.shared.shutdown.swap(true, Ordering::AcqRel) {
            return Err(ExportError::AlreadyShutdown);
        }
        let deadline = self.shared.epoch.elapsed() + timeout;
        self.shared
            .deadline_ns
            .store(deadline.as_nanos() as u64, Ordering::Release);
        let _ = self.wake.try_send(());
        let until = Instant::now() + timeout;
        let mut p = self.shared.progress();
        while !p.worker_done {
            let now = Instant::now();
            if now >= until {
                return Err(ExportError::Timeout(timeout));
            }
            p = self
                .shared
                .changed
                .wait_timeout(p, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(p);
        let handle = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(h) = handle {
            let _ = h.join();
        }
        Ok(())
    }

    /// The configuration in use.
    pub fn config(&self) -> &DeliveryConfig {
        &self.config
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if !self.shared.shutdown.load(Ordering::Acquire) {
            // Nothing waits for the worker: it stops after its current attempt.
            self.shared.shutdown.store(true, Ordering::Release);
            self.shared.deadline_ns.store(0, Ordering::Release);
            let _ = self.wake.try_send(());
        }
    }
}

/// Outcome of one attempt.
enum Attempt {
    Sent(ResponseOutcome),
    Retry {
        message: String,
        retry_after: Option<Duration>,
        timeout: bool,
    },
    Refused(String),
}

struct Worker {
    shared: Arc<Shared>,
    rx: Receiver<Request>,
    wake: Receiver<()>,
    spool: Spool,
    agent: ureq::Agent,
    base_url: String,
    headers: Vec<(String, String)>,
    config: DeliveryConfig,
    check: Option<ResponseCheck>,
    /// Failed attempts in a row.
    attempt: u32,
    rng: XorShift,
}

impl Worker {
    fn run(mut self) {
        let mut next_attempt = Instant::now();
        loop {
            self.drain_queue();
            let shutting_down = self.shared.shutdown.load(Ordering::Acquire);
            if shutting_down {
                self.finish();
                return;
            }
            let now = Instant::now();
            if self.spool.is_empty() {
                self.wait(None);
                continue;
            }
            if now < next_attempt {
                self.wait(Some(next_attempt));
                continue;
            }
            match self.send_head() {
                None => {}
                Some(delay) => next_attempt = Instant::now() + delay,
            }
        }
    }

    /// Blocks until a request arrives, a wake-up, or `until`.
    fn wait(&mut self, until: Option<Instant>) {
        let deadline = until.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        crossbeam_channel::select! {
            recv(self.rx) -> r => {
                if let Ok(r) = r {
                    self.push(r);
                }
            }
            recv(self.wake) -> _ => {}
            default(deadline.saturating_duration_since(Instant::now())) => {}
        }
    }

    fn drain_queue(&mut self) {
        while let Ok(r) = self.rx.try_recv() {
            self.push(r);
        }
    }

    fn push(&mut self, r: Request) {
        let c = &self.shared.counters;
        match self.spool.push(r, &self.config) {
            Ok(dropped) => {
                if dropped > 0 {
                    c.dropped_spool_full.fetch_add(dropped, Ordering::Relaxed);
                    self.shared.settle(dropped);
                    self.shared.fail(format!(
                        "the spool for {} is full; dropped {dropped} oldest request(s) (raise the spool bound or check the server)",
                        self.shared.target
                    ));
                }
            }
            Err(e) => {
                c.spool_errors.fetch_add(1, Ordering::Relaxed);
                self.shared.settle(1);
                self.shared
                    .fail(format!("cannot write to the spool: {e}; request dropped"));
            }
        }
        self.spool.publish(c);
    }

    /// Sends the oldest entry. Returns the delay before the next attempt after a retryable
    /// failure.
    fn send_head(&mut self) -> Option<Duration> {
        let c = &self.shared.counters;
        let (request, spool_error) = self.spool.front();
        c.spool_errors.fetch_add(spool_error, Ordering::Relaxed);
        self.shared.settle(spool_error);
        let request = request?;
        if is_expired(request.window_end_unix_ns, self.config.max_age) {
            c.dropped_expired.fetch_add(1, Ordering::Relaxed);
            self.shared.fail(format!(
                "dropped a request for {} whose window is older than {:?} (the server's ingestion window)",
                self.shared.target, self.config.max_age
            ));
            self.pop();
            return None;
        }
        // The backoff is over: an attempt is in flight, which a flush waits for.
        let was_backing_off = std::mem::replace(&mut self.shared.progress().backing_off, false);
        if was_backing_off {
            self.shared.changed.notify_all();
        }
        match self.attempt(&request) {
            Attempt::Sent(outcome) => {
                c.sent.fetch_add(1, Ordering::Relaxed);
                if outcome.rejected_items > 0 {
                    c.rejected_items
                        .fetch_add(outcome.rejected_items, Ordering::Relaxed);
                    self.shared.fail(format!(
                        "{} rejected {} item(s) of an accepted request: {}",
                        self.shared.target,
                        outcome.rejected_items,
                        outcome.message.as_deref().unwrap_or("no message")
                    ));
                } else if let Some(message) = outcome.message {
                    c.warnings.fetch_add(1, Ordering::Relaxed);
                    self.shared.progress().last_warning = Some(format!(
                        "{} accepted a request with a warning: {message}",
                        self.shared.target
                    ));
                }
                self.attempt = 0;
                self.pop();
                None
            }
            Attempt::Refused(message) => {
                c.rejected.fetch_add(1, Ordering::Relaxed);
                self.shared.fail(message);
                self.attempt = 0;
                self.pop();
                None
            }
            Attempt::Retry {
                message,
                retry_after,
                timeout,
            } => {
                c.retries.fetch_add(1, Ordering::Relaxed);
                if timeout {
                    c.timeouts.fetch_add(1, Ordering::Relaxed);
                }
                self.attempt = self.attempt.saturating_add(1);
                let delay = backoff(
                    self.attempt,
                    self.config.initial_backoff,
                    self.config.max_backoff,
                    &mut self.rng,
                );
                let delay = match retry_after {
                    Some(r) => delay.max(r.min(self.config.max_backoff)),
                    None => delay,
                };
                {
                    let mut p = self.shared.progress();
                    p.backing_off = true;
                    p.last_error = Some(message);
                }
                self.shared.changed.notify_all();
                Some(delay)
            }
        }
    }

    fn pop(&mut self) {
        self.spool.pop();
        self.spool.publish(&self.shared.counters);
        {
            let mut p = self.shared.progress();
            p.backing_off = false;
            p.pending = p.pending.saturating_sub(1);
        }
        self.shared.changed.notify_all();
    }

    fn attempt(&self, r: &Request) -> Attempt {
        let url = format!("{}{}", self.base_url, r.path);
        let mut req = self
            .agent
            .post(&url)
            .header("Content-Type", &r.content_type);
        if let Some(enc) = &r.content_encoding {
            req = req.header("Content-Encoding", enc);
        }
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let target = self.shared.target;
        let mut resp = match req.send(&r.body[..]) {
            Ok(resp) => resp,
            Err(e) => return classify_transport(target, &e),
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 << 10)
            .read_to_vec()
            .unwrap_or_default();
        match status {
            200..=299 => Attempt::Sent(self.check.map(|f| f(&body)).unwrap_or_default()),
            429 | 500..=599 => Attempt::Retry {
                message: format!(
                    "{target} answered {status} {}; retrying with backoff",
                    server_message(&body)
                ),
                retry_after,
                timeout: false,
            },
            _ => Attempt::Refused(format!(
                "{target} refused a request with {status}: {}; not retried (check the endpoint, credentials and tenant)",
                server_message(&body)
            )),
        }
    }

    /// At shutdown: send what waits until the deadline or the first failure, then account
    /// for what is left.
    fn finish(mut self) {
        self.drain_queue();
        let deadline = self.shared.epoch
            + Duration::from_nanos(self.shared.deadline_ns.load(Ordering::Acquire));
        while !self.spool.is_empty() && Instant::now() < deadline {
            if self.send_head().is_some() {
                break;
            }
        }
        let left = self.spool.len() as u64;
        if left > 0 && self.spool.in_memory() {
            self.shared
                .counters
                .dropped_at_shutdown
                .fetch_add(left, Ordering::Relaxed);
        }
        self.spool.publish(&self.shared.counters);
        self.shared.progress().worker_done = true;
        self.shared.changed.notify_all();
    }
}

fn classify_transport(target: &str, e: &ureq::Error) -> Attempt {
    use ureq::Error as E;
    match e {
        E::BadUri(_) | E::RequireHttpsOnly(_) | E::InvalidProxyUrl => Attempt::Refused(format!(
            "cannot send to {target}: {e}; check the endpoint URL"
        )),
        E::Timeout(_) => Attempt::Retry {
            message: format!("{target} did not answer in time ({e}); retrying with backoff"),
            retry_after: None,
            timeout: true,
        },
        _ => Attempt::Retry {
            message: format!("cannot reach {target}: {e}; retrying with backoff"),
            retry_after: None,
            timeout: false,
        },
    }
}

/// The server's message: the body as text, cut to 512 bytes, on one line.
fn server_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(no message)".into();
    }
    let mut end = text.len().min(512);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].replace(['\n', '\r'], " ")
}

/// Whether a window that ended at `end_ns` is older than `max_age`.
pub(crate) fn is_expired(end_ns: u64, max_age: Duration) -> bool {
    now_unix_ns().saturating_sub(end_ns) > max_age.as_nanos() as u64
}

/// Exponential backoff with jitter: `initial * 2^(attempt-1)`, capped at `max`, then a
/// uniform pick in its upper half (so retries of many agents spread out, and the delay never
/// falls below half the nominal one).
fn backoff(attempt: u32, initial: Duration, max: Duration, rng: &mut XorShift) -> Duration {
    let exp = attempt.saturating_sub(1).min(30);
    let nominal = initial.saturating_mul(1u32 << exp).min(max);
    let half = nominal / 2;
    let nanos = half.as_nanos() as u64;
    half + Duration::from_nanos(if nanos == 0 {
        0
    } else {
        rng.next_u64() % nanos
    })
}

/// The spool: entries in submission order, in memory or one file each.
#[derive(Debug)]
enum Spool {
    Memory {
        entries: VecDeque<Request>,
        bytes: u64,
    },
    Disk {
        dir: PathBuf,
        /// (sequence number, file size) in order.
        entries: VecDeque<(u64, u64)>,
        bytes: u64,
        next_seq: u64,
    },
}

const SPOOL_MAGIC: &[u8] = b"SPDL1\n";
const SPOOL_SUFFIX: &str = ".req";

#[derive(serde::Serialize, serde::Deserialize)]
struct SpoolHeader {
    path: String,
    content_type: String,
    content_encoding: Option<String>,
    window_end_unix_ns: u64,
}

impl Spool {
    fn open(config: &DeliveryConfig) -> Result<Self, DeliveryError> {
        let Some(dir) = &config.spool_dir else {
            return Ok(Spool::Memory {
                entries: VecDeque::new(),
                bytes: 0,
            });
        };
        let err = |source| DeliveryError::Spool {
            dir: dir.clone(),
            source,
        };
        fs::create_dir_all(dir).map_err(err)?;
        let mut found = Vec::new();
        for entry in fs::read_dir(dir).map_err(err)? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') {
                // A temporary file from a crash mid-write.
                let _ = fs::remove_file(entry.path());
                continue;
            }
            let Some(seq) = name
                .strip_suffix(SPOOL_SUFFIX)
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            found.push((seq, size));
        }
        found.sort_unstable();
        let next_seq = found.last().map(|&(s, _)| s + 1).unwrap_or(0);
        let bytes = found.iter().map(|&(_, b)| b).sum();
        Ok(Spool::Disk {
            dir: dir.clone(),
            entries: found.into(),
            bytes,
            next_seq,
        })
    }

    fn len(&self) -> usize {
        match self {
            Spool::Memory { entries, .. } => entries.len(),
            Spool::Disk { entries, .. } => entries.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn in_memory(&self) -> bool {
        matches!(self, Spool::Memory { .. })
    }

    fn bytes(&self) -> u64 {
        match self {
            Spool::Memory { bytes, .. } | Spool::Disk { bytes, .. } => *bytes,
        }
    }

    fn publish(&self, c: &Counters) {
        c.spooled.store(self.len() as u64, Ordering::Relaxed);
        c.spooled_bytes.store(self.bytes(), Ordering::Relaxed);
    }

    /// Appends `r`, then drops the oldest entries while over a bound (never the new one).
    /// Returns how many were dropped.
    fn push(&mut self, r: Request, config: &DeliveryConfig) -> std::io::Result<u64> {
        match self {
            Spool::Memory { entries, bytes } => {
                *bytes += r.body.len() as u64;
                entries.push_back(r);
            }
            Spool::Disk {
                dir,
                entries,
                bytes,
                next_seq,
            } => {
                let seq = *next_seq;
                *next_seq += 1;
                let size = write_entry(dir, seq, &r)?;
                *bytes += size;
                entries.push_back((seq, size));
            }
        }
        let mut dropped = 0;
        while self.len() > 1
            && (self.len() > config.spool_max_entries || self.bytes() > config.spool_max_bytes)
        {
            self.pop();
            dropped += 1;
        }
        Ok(dropped)
    }

    /// The oldest entry, and how many unreadable entries were dropped on the way.
    fn front(&mut self) -> (Option<Request>, u64) {
        let mut bad = 0;
        loop {
            match self {
                Spool::Memory { entries, .. } => return (entries.front().cloned(), bad),
                Spool::Disk { dir, entries, .. } => {
                    let Some(&(seq, _)) = entries.front() else {
                        return (None, bad);
                    };
                    match read_entry(dir, seq) {
                        Some(r) => return (Some(r), bad),
                        None => {
                            bad += 1;
                            self.pop();
                        }
                    }
                }
            }
        }
    }

    fn pop(&mut self) {
        match self {
            Spool::Memory { entries, bytes } => {
                if let Some(r) = entries.pop_front() {
                    *bytes = bytes.saturating_sub(r.body.len() as u64);
                }
            }
            Spool::Disk {
                dir,
                entries,
                bytes,
                ..
            } => {
                if let Some((seq, size)) = entries.pop_front() {
                    *bytes = bytes.saturating_sub(size);
                    let _ = fs::remove_file(entry_path(dir, seq));
                }
            }
        }
    }
}

fn entry_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}{SPOOL_SUFFIX}"))
}

fn write_entry(dir: &Path, seq: u64, r: &Request) -> std::io::Result<u64> {
    let header = SpoolHeader {
        path: r.path.clone(),
        content_type: r.content_type.clone(),
        content_encoding: r.content_encoding.clone(),
        window_end_unix_ns: r.window_end_unix_ns,
    };
    let json = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
    let mut buf = Vec::with_capacity(SPOOL_MAGIC.len() + json.len() + 1 + r.body.len());
    buf.extend_from_slice(SPOOL_MAGIC);
    buf.extend_from_slice(&json);
    buf.push(b'\n');
    buf.extend_from_slice(&r.body);
    let tmp = dir.join(format!(".tmp-{seq:020}"));
    fs::write(&tmp, &buf)?;
    fs::rename(&tmp, entry_path(dir, seq))?;
    Ok(buf.len() as u64)
}

fn read_entry(dir: &Path, seq: u64) -> Option<Request> {
    let mut f = fs::File::open(entry_path(dir, seq)).ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    let rest = buf.strip_prefix(SPOOL_MAGIC)?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let header: SpoolHeader = serde_json::from_slice(&rest[..nl]).ok()?;
    Some(Request {
        path: header.path,
        content_type: header.content_type,
        content_encoding: header.content_encoding,
        window_end_unix_ns: header.window_end_unix_ns,
        body: rest[nl + 1..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(n: usize) -> Request {
        Request {
            path: format!("/p/{n}"),
            content_type: "application/proto".into(),
            content_encoding: Some("gzip".into()),
            window_end_unix_ns: now_unix_ns(),
            body: vec![n as u8; 100],
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_within_bounds() {
        let mut rng = XorShift::seeded();
        let i = Duration::from_millis(100);
        let m = Duration::from_secs(2);
        for attempt in 1..12 {
            let nominal = (i * (1 << (attempt - 1).min(20))).min(m);
            for _ in 0..50 {
                let d = backoff(attempt, i, m, &mut rng);
                assert!(d >= nominal / 2 && d <= nominal, "{attempt} {d:?}");
            }
        }
    }

    #[test]
    fn disk_spool_keeps_order_across_reopen_and_drops_oldest() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeliveryConfig::default()
            .with_spool_dir(dir.path())
            .with_spool_max_entries(3);
        let mut s = Spool::open(&config).unwrap();
        let mut dropped = 0;
        for n in 0..5 {
            dropped += s.push(req(n), &config).unwrap();
        }
        assert_eq!(dropped, 2);
        let mut s = Spool::open(&config).unwrap();
        assert_eq!(s.len(), 3);
        for n in 2..5 {
            let (r, bad) = s.front();
            let (r, want) = (r.unwrap(), req(n));
            assert_eq!((bad, &r.path, &r.body), (0, &want.path, &want.body));
            s.pop();
        }
        assert!(s.is_empty());
    }

    #[test]
    fn unreadable_spool_entries_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeliveryConfig::default().with_spool_dir(dir.path());
        let mut s = Spool::open(&config).unwrap();
        s.push(req(1), &config).unwrap();
        s.push(req(2), &config).unwrap();
        fs::write(entry_path(dir.path(), 0), b"garbage").unwrap();
        let (r, bad) = s.front();
        assert_eq!(bad, 1);
        assert_eq!(r.unwrap().path, "/p/2");
    }

    #[test]
    fn server_messages_are_cut_and_single_line() {
        assert_eq!(server_message(b""), "(no message)");
        assert_eq!(server_message(b"bad\nlabel"), "bad label");
        assert!(server_message(&[b'x'; 2000]).len() <= 512);
    }
}
