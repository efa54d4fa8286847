//! The delivery thread. It moves submitted requests from the hand-off queue into the spool,
//! sends the spool oldest-first, one request at a time, through a [`Transport`], retries
//! failures with a jittered exponential backoff, drops what is refused or too old, and keeps
//! the counters and the progress that the [`Delivery`](super::Delivery) handle reads and
//! `flush` waits on. It knows nothing of HTTP clients or TLS: the transport does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use span_profile_core::internal::{now_unix_ns, XorShift};

use super::config::DeliveryConfig;
use super::spool::{Request, Spool};

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

span_profile_core::counters! {
    /// What a delivery counts: the worker and `submit` count, [`Delivery::stats`](super::Delivery::stats)
    /// reads. Every access is `Relaxed`: each counter stands alone, and nothing is published
    /// through them.
    pub(super) struct Counters(pub(super)) {
        /// Requests handed to [`Delivery::submit`].
        submitted,
        /// Requests the server accepted (2xx).
        sent,
        /// Attempts that failed in a retryable way (429, 5xx, connection errors, timeouts).
        retries,
        /// Of those, attempts that timed out.
        timeouts,
        /// Requests the server refused with a non-retryable status (dropped).
        rejected,
        /// Items rejected inside accepted requests (OTLP partial success).
        rejected_items,
        /// Requests accepted whole but with a message from the server (OTLP's partial success
        /// with nothing rejected: a warning); the last one is [`Delivery::last_warning`].
        warnings,
        /// Requests dropped because the hand-off queue was full (oldest first).
        dropped_queue_full,
        /// Requests dropped because the spool was over its bound (oldest first).
        dropped_spool_full,
        /// Requests dropped because their window was older than `max_age`.
        dropped_expired,
        /// Requests still in an in-memory spool at shutdown (lost).
        dropped_at_shutdown,
        /// Spool files that could not be read or written (dropped).
        spool_errors,
        /// Requests waiting in the spool now.
        spooled,
        /// Bytes waiting in the spool now.
        spooled_bytes,
    }
    /// Counters over a delivery's life. Every drop and failure has one.
    #[non_exhaustive]
    pub struct DeliveryStats
}

impl Counters {
    /// Shows what `spool` holds now.
    pub(super) fn publish(&self, spool: &Spool) {
        self.spooled.store(spool.len() as u64, Ordering::Relaxed);
        self.spooled_bytes.store(spool.bytes(), Ordering::Relaxed);
    }
}

/// Worker state that `force_flush` waits on.
#[derive(Debug, Default)]
pub(super) struct Progress {
    /// Requests submitted but not yet sent or dropped.
    pub(super) pending: u64,
    /// The last attempt failed and the worker is waiting to retry.
    pub(super) backing_off: bool,
    pub(super) last_error: Option<String>,
    pub(super) last_warning: Option<String>,
    /// Failures not yet reported through `take_failures`.
    pub(super) unreported: Vec<String>,
    pub(super) worker_done: bool,
}

/// What the [`Delivery`](super::Delivery) handle and its worker share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) counters: Counters,
    pub(super) progress: Mutex<Progress>,
    /// Notified whenever `progress` changes.
    pub(super) changed: Condvar,
    pub(super) shutdown: AtomicBool,
    /// The shutdown deadline, as nanoseconds since `epoch`.
    pub(super) deadline_ns: AtomicU64,
    pub(super) epoch: Instant,
    /// Where to report a failure: `"Pyroscope"`, `"the OTLP endpoint"`.
    pub(super) target: &'static str,
}

impl Shared {
    /// The state of a delivery named `target` whose spool holds `pending` requests.
    pub(super) fn new(target: &'static str, pending: u64) -> Self {
        Self {
            counters: Counters::default(),
            progress: Mutex::new(Progress {
                pending,
                ..Progress::default()
            }),
            changed: Condvar::new(),
            shutdown: AtomicBool::new(false),
            deadline_ns: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            target,
        }
    }

    pub(super) fn progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `n` requests were sent or dropped.
    pub(super) fn settle(&self, n: u64) {
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

/// What sends one request: [`UreqTransport`](super::tls::UreqTransport) in production, a
/// scripted fake in the tests.
///
/// `send` may block, for at most the timeouts it was built with; the worker calls it from its
/// own thread, one request at a time. It adds the headers common to every request.
pub(super) trait Transport: Send + 'static {
    /// Sends `request` once. Any status is an answer; an error means no answer came.
    fn send(&mut self, request: &Request) -> Result<Response, TransportError>;
}

/// A server's answer to one request.
#[derive(Debug)]
pub(super) struct Response {
    /// The HTTP status.
    pub(super) status: u16,
    /// `Retry-After`, when given in seconds.
    pub(super) retry_after: Option<Duration>,
    /// The body (the transport may cut it).
    pub(super) body: Vec<u8>,
}

/// Why no answer came; each carries the client's own description, without credentials.
#[derive(Debug)]
pub(super) enum TransportError {
    /// The request cannot be sent as configured (a bad URL): not retried.
    BadEndpoint(String),
    /// No answer in time: retried, and counted in `timeouts`.
    Timeout(String),
    /// Any other failure to connect, write or read: retried.
    Unreachable(String),
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

/// The delivery thread's state: it alone touches the spool and the transport.
pub(super) struct Worker {
    shared: Arc<Shared>,
    /// The hand-off queue that `submit` fills.
    rx: Receiver<Request>,
    /// Wake-ups from `flush` and shutdown.
    wake: Receiver<()>,
    spool: Spool,
    transport: Box<dyn Transport>,
    config: DeliveryConfig,
    check: Option<ResponseCheck>,
    /// Failed attempts in a row.
    attempt: u32,
    rng: XorShift,
}

impl Worker {
    /// A worker over `spool` that sends through `transport` and reads 2xx bodies with `check`.
    pub(super) fn new(
        shared: Arc<Shared>,
        rx: Receiver<Request>,
        wake: Receiver<()>,
        spool: Spool,
        transport: Box<dyn Transport>,
        config: DeliveryConfig,
        check: Option<ResponseCheck>,
    ) -> Self {
        Self {
            shared,
            rx,
            wake,
            spool,
            transport,
            config,
            check,
            attempt: 0,
            rng: XorShift::seeded(),
        }
    }

    /// The thread's body: until shutdown, take what `submit` queued, send the spool's head
    /// when no backoff is pending, and sleep otherwise; then [`Worker::finish`].
    pub(super) fn run(mut self) {
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
        c.publish(&self.spool);
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
        let answer = self.transport.send(&request);
        match attempt_outcome(self.shared.target, self.check, answer) {
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
        self.shared.counters.publish(&self.spool);
        {
            let mut p = self.shared.progress();
            p.backing_off = false;
            p.pending = p.pending.saturating_sub(1);
        }
        self.shared.changed.notify_all();
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
        self.shared.counters.publish(&self.spool);
        self.shared.progress().worker_done = true;
        self.shared.changed.notify_all();
    }
}

/// What one answer, or the lack of one, means for the request.
fn attempt_outcome(
    target: &str,
    check: Option<ResponseCheck>,
    answer: Result<Response, TransportError>,
) -> Attempt {
    let Response {
        status,
        retry_after,
        body,
    } = match answer {
        Ok(response) => response,
        Err(TransportError::BadEndpoint(e)) => {
            return Attempt::Refused(format!(
                "cannot send to {target}: {e}; check the endpoint URL"
            ))
        }
        Err(TransportError::Timeout(e)) => {
            return Attempt::Retry {
                message: format!("{target} did not answer in time ({e}); retrying with backoff"),
                retry_after: None,
                timeout: true,
            }
        }
        Err(TransportError::Unreachable(e)) => {
            return Attempt::Retry {
                message: format!("cannot reach {target}: {e}; retrying with backoff"),
                retry_after: None,
                timeout: false,
            }
        }
    };
    match status {
        200..=299 => Attempt::Sent(check.map(|f| f(&body)).unwrap_or_default()),
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
pub(super) fn is_expired(end_ns: u64, max_age: Duration) -> bool {
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

#[cfg(test)]
pub(super) mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::delivery::spool::tests::req;

    pub(in crate::delivery) type Answer = Result<Response, TransportError>;

    /// A transport that answers from a script (then 200s) and notes every path it is sent.
    pub(in crate::delivery) struct Scripted {
        answers: VecDeque<Answer>,
        sent: Arc<Mutex<Vec<String>>>,
    }

    impl Scripted {
        /// The transport, and the paths it will have been sent.
        pub(in crate::delivery) fn new(answers: Vec<Answer>) -> (Self, Arc<Mutex<Vec<String>>>) {
            let sent = Arc::new(Mutex::new(Vec::new()));
            let answers = answers.into();
            let transport = Self {
                answers,
                sent: sent.clone(),
            };
            (transport, sent)
        }
    }

    impl Transport for Scripted {
        fn send(&mut self, request: &Request) -> Answer {
            self.sent.lock().unwrap().push(request.path.clone());
            self.answers.pop_front().unwrap_or_else(|| status(200, ""))
        }
    }

    pub(in crate::delivery) fn status(status: u16, body: &str) -> Answer {
        Ok(Response {
            status,
            retry_after: None,
            body: body.as_bytes().to_vec(),
        })
    }

    /// A worker with an in-memory spool, `pending` requests counted as submitted, and the
    /// paths its transport is sent.
    fn worker(
        config: DeliveryConfig,
        pending: u64,
        answers: Vec<Answer>,
    ) -> (Worker, Arc<Shared>, Arc<Mutex<Vec<String>>>) {
        let shared = Arc::new(Shared::new("the test server", pending));
        let (transport, sent) = Scripted::new(answers);
        // The senders are dropped: the tests hand requests to `push` directly.
        let (_, rx) = crossbeam_channel::bounded(1);
        let (_, wake) = crossbeam_channel::bounded(1);
        let spool = Spool::open(&config).unwrap();
        let w = Worker::new(
            shared.clone(),
            rx,
            wake,
            spool,
            Box::new(transport),
            config,
            None,
        );
        (w, shared, sent)
    }

    pub(in crate::delivery) fn paths(sent: &Mutex<Vec<String>>) -> Vec<String> {
        sent.lock().unwrap().clone()
    }

    #[test]
    fn a_retried_request_holds_the_head_and_a_refused_one_is_dropped() {
        let config = DeliveryConfig::default()
            .with_backoff(Duration::from_millis(100), Duration::from_secs(10));
        let busy = Ok(Response {
            status: 503,
            retry_after: Some(Duration::from_secs(7)),
            body: b"busy".to_vec(),
        });
        let answers = vec![
            busy,
            Err(TransportError::Timeout("timed out".into())),
            status(200, ""),
            status(400, "invalid labels:\nbad name"),
            status(200, ""),
        ];
        let (mut w, shared, sent) = worker(config, 3, answers);
        for n in 1..=3 {
            w.push(req(n));
        }
        // The 503's Retry-After is longer than the first backoff (50-100 ms): it wins.
        assert_eq!(w.send_head(), Some(Duration::from_secs(7)));
        assert!(shared.progress().backing_off);
        // The second failure backs off 100-200 ms.
        let d = w.send_head().unwrap();
        assert!(
            d >= Duration::from_millis(100) && d <= Duration::from_millis(200),
            "{d:?}"
        );
        for _ in 0..3 {
            assert_eq!(w.send_head(), None);
        }
        assert_eq!(paths(&sent), ["/p/1", "/p/1", "/p/1", "/p/2", "/p/3"]);
        let c = &shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!(
            (l(&c.retries), l(&c.timeouts), l(&c.sent), l(&c.rejected)),
            (2, 1, 2, 1)
        );
        assert_eq!((l(&c.spooled), l(&c.spooled_bytes)), (0, 0));
        let p = shared.progress();
        assert_eq!((p.pending, p.backing_off), (0, false));
        assert_eq!(p.unreported.len(), 1, "{:?}", p.unreported);
        let refused = &p.unreported[0];
        assert!(
            refused.contains("refused a request with 400: invalid labels: bad name;"),
            "{refused}"
        );
    }

    #[test]
    fn a_full_spool_drops_the_oldest_and_an_expired_request_is_not_sent() {
        let config = DeliveryConfig::default().with_spool_max_entries(2);
        let (mut w, shared, sent) = worker(config, 5, Vec::new());
        for n in 1..=4 {
            w.push(req(n));
        }
        let mut old = req(5);
        old.window_end_unix_ns = 0;
        w.push(old);
        let c = &shared.counters;
        assert_eq!(c.dropped_spool_full.load(Ordering::Relaxed), 3);
        assert_eq!(c.spooled.load(Ordering::Relaxed), 2);
        while !w.spool.is_empty() {
            assert_eq!(w.send_head(), None);
        }
        assert_eq!(
            paths(&sent),
            ["/p/4"],
            "the newest in time, the expired one never"
        );
        assert_eq!(c.dropped_expired.load(Ordering::Relaxed), 1);
        assert_eq!(c.sent.load(Ordering::Relaxed), 1);
        assert_eq!(shared.progress().pending, 0);
    }

    #[test]
    fn what_a_memory_spool_holds_past_the_deadline_is_dropped_at_shutdown() {
        let (mut w, shared, sent) = worker(DeliveryConfig::default(), 2, Vec::new());
        w.push(req(1));
        w.push(req(2));
        shared.deadline_ns.store(0, Ordering::Release);
        shared.shutdown.store(true, Ordering::Release);
        w.run();
        assert!(paths(&sent).is_empty());
        let c = &shared.counters;
        assert_eq!(c.dropped_at_shutdown.load(Ordering::Relaxed), 2);
        assert_eq!(c.spooled.load(Ordering::Relaxed), 2);
        assert!(shared.progress().worker_done);
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
    fn server_messages_are_cut_and_single_line() {
        assert_eq!(server_message(b""), "(no message)");
        assert_eq!(server_message(b"bad\nlabel"), "bad label");
        assert!(server_message(&[b'x'; 2000]).len() <= 512);
    }
}
