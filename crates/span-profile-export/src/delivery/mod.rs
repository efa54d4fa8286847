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
//!
//! The parts: [`DeliveryConfig`] and its checks (`config`), the worker thread with its
//! retries and ordering (`worker`), the spool and its bounds (`spool`), and the HTTP client
//! with its TLS roots (`tls`), which the worker reaches only through a `Transport` trait.

mod config;
mod spool;
mod tls;
mod worker;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use span_profile_core::ExportError;

pub use config::{DeliveryConfig, DeliveryError};
pub use spool::Request;
pub use worker::{DeliveryStats, ResponseCheck, ResponseOutcome};

use spool::Spool;
use tls::UreqTransport;
use worker::{is_expired, Shared, Transport, Worker};

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
        let transport = UreqTransport::new(base_url, headers, &config)?;
        Self::start_with(Box::new(transport), config, target, check)
    }

    /// [`Delivery::start`] over any transport (the tests' fakes).
    fn start_with(
        transport: Box<dyn Transport>,
        config: DeliveryConfig,
        target: &'static str,
        check: Option<ResponseCheck>,
    ) -> Result<Self, DeliveryError> {
        let spool = Spool::open(&config)?;
        let shared = Arc::new(Shared::new(target, spool.len() as u64));
        shared.counters.publish(&spool);
        let (tx, rx) = bounded::<Request>(config.queue.max(1));
        let (wake, wake_rx) = bounded::<()>(1);
        let worker = Worker::new(
            shared.clone(),
            rx.clone(),
            wake_rx,
            spool,
            transport,
            config.clone(),
            check,
        );
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
        self.shared.counters.snapshot()
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

#[cfg(test)]
mod tests {
    use super::spool::tests::req;
    use super::worker::tests::{paths, status, Scripted};
    use super::worker::TransportError;
    use super::*;

    fn start(answers: Vec<worker::tests::Answer>) -> (Delivery, Arc<Mutex<Vec<String>>>) {
        let config = DeliveryConfig::default()
            .with_backoff(Duration::from_millis(10), Duration::from_millis(20));
        let (transport, sent) = Scripted::new(answers);
        let d = Delivery::start_with(Box::new(transport), config, "the test server", None);
        (d.unwrap(), sent)
    }

    #[test]
    fn submitted_requests_are_sent_in_order_through_the_transport() {
        let (d, sent) = start(vec![status(503, "busy")]);
        for n in 1..=3 {
            d.submit(req(n)).unwrap();
        }
        // The first flush may catch the worker backing off from the 503.
        let deadline = Instant::now() + Duration::from_secs(5);
        while d.flush(Duration::from_secs(1)).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(paths(&sent), ["/p/1", "/p/1", "/p/2", "/p/3"]);
        let s = d.stats();
        assert_eq!(
            (s.submitted, s.sent, s.retries, s.dropped()),
            (3, 3, 1, 0),
            "{s:?}"
        );
        assert!(
            d.take_failures().is_none(),
            "a retry that succeeded is no failure"
        );
        d.shutdown_with_timeout(Duration::from_secs(1)).unwrap();
        assert!(matches!(
            d.submit(req(4)),
            Err(ExportError::AlreadyShutdown)
        ));
    }

    #[test]
    fn flush_returns_at_once_while_the_server_is_unreachable() {
        let down = || Err(TransportError::Unreachable("connection refused".into()));
        let (d, _) = start((0..1000).map(|_| down()).collect());
        d.submit(req(1)).unwrap();
        let started = Instant::now();
        let err = match d.flush(Duration::from_secs(5)) {
            Err(ExportError::InternalFailure(e)) => e,
            other => panic!("{other:?}"),
        };
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            err.contains("wait in the spool") && err.contains("cannot reach the test server"),
            "{err}"
        );
        // The worker tries once more before it stops; the request is lost with the memory spool.
        d.shutdown_with_timeout(Duration::from_secs(2)).unwrap();
        assert_eq!(d.stats().dropped_at_shutdown, 1);
    }
}
