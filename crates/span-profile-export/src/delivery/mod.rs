//! Delivery shared by the network exporters: a worker thread, a bounded spool (on disk or in
//! memory), retries with exponential backoff and jitter, and a counter for every drop.
//!
//! An exporter encodes a window into one or more [`Request`]s and hands them to the
//! delivery, which appends them to the spool on the caller's thread (a disk spool writes the
//! file then, before any attempt to send can block) and wakes the delivery's own worker
//! thread. The worker sends the spool oldest-first, one request at a time, so requests arrive
//! in the order they were submitted. Each window is accounted for once: delivered (every
//! request accepted), waiting in the spool, or lost for one reason ([`DeliveryStats`]'s
//! `windows*` counters, ADR 0027).
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
//! temporary name and renamed) in a folder of this process's own, so what waits survives a
//! restart: a new [`Delivery`] over the same directory claims the folders of processes that
//! are gone and sends their entries first. Processes that share a directory never send each
//! other's entries (each folder is held under a `flock`). Request headers (credentials) are
//! never written to disk; they are added when the entry is sent.
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

use crossbeam_channel::{bounded, Sender};
use span_profile_core::{ExportError, WindowCounts};

pub use config::{DeliveryConfig, DeliveryError};
pub use spool::Request;
pub use worker::{DeliveryStats, ResponseCheck, ResponseOutcome};

use spool::Spool;
use tls::UreqTransport;
use worker::{is_expired, Loss, Shared, Transport, Worker};

impl DeliveryStats {
    /// Requests lost for any reason.
    pub fn dropped(&self) -> u64 {
        self.rejected
            + self.dropped_spool_full
            + self.dropped_expired
            + self.dropped_at_shutdown
            + self.spool_errors
    }

    /// The fate of every window handed over, as the profiler counts it.
    pub fn window_counts(&self) -> WindowCounts {
        WindowCounts {
            delivered: self.windows_delivered,
            waiting: self.windows_waiting(),
            dropped_spool_full: self.windows_dropped_spool_full,
            dropped_expired: self.windows_dropped_expired,
            dropped_rejected: self.windows_rejected,
            dropped_at_shutdown: self.windows_dropped_at_shutdown,
        }
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
    /// path and without credentials; `headers` go on every request and are never logged,
    /// spooled or shown in errors. `target` names the server in error messages; `check`
    /// reads 2xx bodies.
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
        let shared = Arc::new(Shared::new(target, spool));
        let (wake, wake_rx) = bounded::<()>(1);
        let worker = Worker::new(shared.clone(), wake_rx, transport, config.clone(), check);
        let handle = std::thread::Builder::new()
            .name("span-profile-delivery".into())
            .spawn(move || worker.run())
            .map_err(DeliveryError::Thread)?;
        Ok(Self {
            shared,
            wake,
            worker: Mutex::new(Some(handle)),
            config,
        })
    }

    /// Spools a request (one window) for the worker. Blocks only for the spool write, never
    /// for the network. A full spool drops its oldest entries (counted in
    /// [`DeliveryStats::dropped_spool_full`]). After shutdown the request is refused with
    /// [`ExportError::AlreadyShutdown`].
    pub fn submit(&self, request: Request) -> Result<(), ExportError> {
        self.submit_window(vec![request])
    }

    /// Spools the requests of one window, in order, and wakes the worker.
    fn submit_window(&self, requests: Vec<Request>) -> Result<(), ExportError> {
        if self.shared.shutdown.load(Ordering::Acquire) {
            let c = &self.shared.counters;
            c.windows.fetch_add(1, Ordering::Relaxed);
            self.shared.count_lost_window(Loss::Shutdown);
            return Err(ExportError::AlreadyShutdown);
        }
        self.shared.submit_window(requests, &self.config);
        let _ = self.wake.try_send(());
        Ok(())
    }

    /// The body of a network exporter's `export`: refuses after shutdown, drops (and counts
    /// in `expired`) a window that ended longer ago than `max_age`, spools the window's
    /// requests, and returns the failures seen since the previous call as an error (the
    /// window itself is still spooled).
    pub(crate) fn export_window(
        &self,
        end_ns: u64,
        expired: &AtomicU64,
        requests: impl FnOnce() -> Vec<Request>,
    ) -> Result<(), ExportError> {
        if self.shared.shutdown.load(Ordering::Acquire) {
            return self.submit_window(Vec::new());
        }
        if is_expired(end_ns, self.config.max_age) {
            expired.fetch_add(1, Ordering::Relaxed);
            self.shared.counters.windows.fetch_add(1, Ordering::Relaxed);
            self.shared.count_lost_window(Loss::Expired);
            return Err(ExportError::InternalFailure(format!(
                "window dropped: it ended more than {:?} ago, outside {}'s ingestion window",
                self.config.max_age, self.shared.target
            )));
        }
        self.submit_window(requests())?;
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

    /// Stops accepting requests and gives the worker until `timeout` for a last attempt at
    /// what waits (each attempt cut to the time left). Returns within `timeout`. What is
    /// left stays in a disk spool for the next start, or is lost from a memory spool and
    /// counted in [`DeliveryStats::dropped_at_shutdown`], also when an attempt that started
    /// before the shutdown is still in flight at the deadline (then `Timeout` is returned).
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
                drop(p);
                // The worker is stuck in an attempt: what a memory spool holds is lost now
                // (the worker finds nothing to remove when its attempt ends).
                let mut st = self.shared.state();
                let left = st.spool.drain_memory();
                self.shared.lose(&mut st, &left, Loss::Shutdown);
                self.shared.counters.publish(&st.spool);
                drop(st);
                self.shared.flush_warnings();
                self.report_undelivered();
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
        self.report_undelivered();
        Ok(())
    }

    /// At shutdown, one warning if windows were not delivered: how many, and where they are
    /// (the spool directory, for the next start or `span-profile push`) or that they are lost.
    fn report_undelivered(&self) {
        let s = self.stats();
        let waiting = s.windows_waiting();
        let lost = s.windows_dropped_spool_full
            + s.windows_dropped_expired
            + s.windows_rejected
            + s.windows_dropped_at_shutdown;
        if waiting == 0 && lost == 0 {
            return;
        }
        let mut parts = Vec::new();
        if waiting > 0 {
            parts.push(match &self.config.spool_dir {
                Some(dir) => format!(
                    "{waiting} wait in the spool {} for the next start (or `span-profile push`)",
                    dir.display()
                ),
                None => format!("{waiting} wait in memory and are lost when the process exits"),
            });
        }
        if lost > 0 {
            parts.push(format!(
                "{lost} were lost ({} spool full, {} too old, {} rejected, {} at shutdown{})",
                s.windows_dropped_spool_full,
                s.windows_dropped_expired,
                s.windows_rejected,
                s.windows_dropped_at_shutdown,
                if self.config.spool_dir.is_none() {
                    "; set SPAN_PROFILE_SPOOL_DIR to keep undelivered windows on disk"
                } else {
                    ""
                }
            ));
        }
        log::warn!(
            target: "span_profile::export",
            "{} of {} window(s) were not delivered to {}: {}",
            waiting + lost,
            s.windows,
            self.shared.target,
            parts.join("; ")
        );
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
        assert_eq!((s.windows, s.windows_delivered), (3, 3));
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
        let s = d.stats();
        assert_eq!(
            (s.dropped_at_shutdown, s.windows_dropped_at_shutdown),
            (1, 1)
        );
        assert_eq!(s.windows_waiting(), 0);
    }
}
