//! The delivery thread. It sends the spool oldest-first, one request at a time, through a
//! [`Transport`], retries failures with a jittered exponential backoff, drops what is refused
//! or too old, and keeps the counters and the progress that the
//! [`Delivery`](super::Delivery) handle reads and `flush` waits on. Requests reach the spool
//! in `submit`, on the caller's thread, before any attempt can block (ADR 0027); the worker
//! holds the spool's lock only to read its head and to remove it, never while sending. It
//! knows nothing of HTTP clients or TLS: the transport does.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use span_profile_core::internal::{now_unix_ns, XorShift};

use super::config::DeliveryConfig;
use super::spool::{Entry, Part, Request, Spool};

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
        /// Requests handed to the delivery (one or more per window).
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
        /// Requests an earlier process left in the spool directory that this one sent.
        recovered,
        /// Windows handed to the delivery (by an exporter's `export`).
        windows,
        /// Windows whose every request the server accepted.
        windows_delivered,
        /// Windows lost because the spool was over its bound or could not be written or read.
        windows_dropped_spool_full,
        /// Windows lost because they were older than `max_age`.
        windows_dropped_expired,
        /// Windows lost because the server refused one of their requests (4xx, a bad URL).
        windows_rejected,
        /// Windows lost at shutdown (in a memory spool, or refused after shutdown).
        windows_dropped_at_shutdown,
    }
    /// Counters over a delivery's life. Every drop and failure has one. The `windows*`
    /// counters count this process's windows; requests are what is sent.
    #[non_exhaustive]
    pub struct DeliveryStats
}

impl DeliveryStats {
    /// Windows handed over and neither delivered nor lost yet: in the spool (memory or disk).
    pub fn windows_waiting(&self) -> u64 {
        self.windows.saturating_sub(
            self.windows_delivered
                + self.windows_dropped_spool_full
                + self.windows_dropped_expired
                + self.windows_rejected
                + self.windows_dropped_at_shutdown,
        )
    }
}

impl Counters {
    /// Shows what `spool` holds now.
    pub(super) fn publish(&self, spool: &Spool) {
        self.spooled.store(spool.len() as u64, Ordering::Relaxed);
        self.spooled_bytes.store(spool.bytes(), Ordering::Relaxed);
    }
}

/// Why a spool entry left without being sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Loss {
    /// Over the spool's bound, or its file could not be written or read.
    SpoolFull,
    /// Older than `max_age`.
    Expired,
    /// Refused by the server.
    Rejected,
    /// Left in a memory spool at shutdown.
    Shutdown,
}

/// The spool and the window book, behind one lock.
#[derive(Debug)]
pub(super) struct State {
    pub(super) spool: Spool,
    /// This process's windows that lost a request while later requests of theirs still wait
    /// (each window is counted once, by its first loss).
    lost: HashSet<u64>,
    /// The next window number.
    pub(super) next_window: u64,
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
    /// Failures since the last warning was logged, and when it was.
    unlogged: u64,
    logged_at: Option<Instant>,
}

/// At most one summary warning a minute after the first failure (issue 28).
const LOG_EVERY: Duration = Duration::from_secs(60);

/// What the [`Delivery`](super::Delivery) handle and its worker share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) counters: Counters,
    pub(super) state: Mutex<State>,
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
    /// The state of a delivery named `target` over `spool`.
    pub(super) fn new(target: &'static str, spool: Spool) -> Self {
        let counters = Counters::default();
        counters.publish(&spool);
        let pending = spool.len() as u64;
        Self {
            counters,
            state: Mutex::new(State {
                spool,
                lost: HashSet::new(),
                next_window: 0,
            }),
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

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `n` requests were sent or dropped.
    pub(super) fn settle(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut p = self.progress();
        p.pending = p.pending.saturating_sub(n);
        drop(p);
        self.changed.notify_all();
    }

    /// Spools the requests of one window (on disk before any attempt to send can block),
    /// keeping the spool's bounds; books what the bounds or a failed write cost. Returns how
    /// many requests were spooled.
    pub(super) fn submit_window(&self, requests: Vec<Request>, config: &DeliveryConfig) -> usize {
        let c = &self.counters;
        c.windows.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state();
        let window = st.next_window;
        st.next_window += 1;
        if requests.is_empty() {
            // Nothing to send is nothing to lose.
            c.windows_delivered.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let n = requests.len();
        c.submitted.fetch_add(n as u64, Ordering::Relaxed);
        self.progress().pending += n as u64;
        let mut spooled = 0;
        let mut failures = Vec::new();
        for (i, r) in requests.into_iter().enumerate() {
            let part = Part {
                window,
                last: i + 1 == n,
            };
            match st.spool.push(r, part, config) {
                Ok(dropped) => {
                    spooled += 1;
                    if !dropped.is_empty() {
                        self.lose(&mut st, &dropped, Loss::SpoolFull);
                        failures.push(format!(
                            "the spool for {} is full; dropped {} oldest request(s) (raise SPAN_PROFILE_SPOOL_MAX_BYTES/_ENTRIES or check the server)",
                            self.target,
                            dropped.len()
                        ));
                    }
                }
                Err(e) => {
                    c.spool_errors.fetch_add(1, Ordering::Relaxed);
                    self.lose(
                        &mut st,
                        &[Entry {
                            id: u64::MAX,
                            part: Some(part),
                        }],
                        Loss::SpoolFull,
                    );
                    failures.push(format!(
                        "cannot write to the spool for {}: {e}; request dropped (check the spool directory's space and permissions)",
                        self.target
                    ));
                }
            }
        }
        c.publish(&st.spool);
        drop(st);
        for f in failures {
            self.fail(f);
        }
        spooled
    }

    /// Books `entries` as lost for `loss`: the request counters, and each window of this
    /// process once. Settles them.
    pub(super) fn lose(&self, state: &mut State, entries: &[Entry], loss: Loss) {
        let c = &self.counters;
        for e in entries {
            let requests = match loss {
                Loss::SpoolFull => &c.dropped_spool_full,
                Loss::Expired => &c.dropped_expired,
                Loss::Rejected => &c.rejected,
                Loss::Shutdown => &c.dropped_at_shutdown,
            };
            requests.fetch_add(1, Ordering::Relaxed);
            let Some(part) = e.part else { continue };
            if state.lost.insert(part.window) {
                self.count_lost_window(loss);
            }
            if part.last {
                state.lost.remove(&part.window);
            }
        }
        // Published before the settle, which a flush may be waiting on.
        c.publish(&state.spool);
        self.settle(entries.len() as u64);
    }

    /// Counts one window of this process lost for `loss`.
    pub(super) fn count_lost_window(&self, loss: Loss) {
        let c = &self.counters;
        let windows = match loss {
            Loss::SpoolFull => &c.windows_dropped_spool_full,
            Loss::Expired => &c.windows_dropped_expired,
            Loss::Rejected => &c.windows_rejected,
            Loss::Shutdown => &c.windows_dropped_at_shutdown,
        };
        windows.fetch_add(1, Ordering::Relaxed);
    }

    /// Books `entry` as sent.
    fn delivered(&self, state: &mut State, entry: Entry) {
        let c = &self.counters;
        c.sent.fetch_add(1, Ordering::Relaxed);
        match entry.part {
            None => {
                c.recovered.fetch_add(1, Ordering::Relaxed);
            }
            Some(part) if part.last => {
                if !state.lost.remove(&part.window) {
                    c.windows_delivered.fetch_add(1, Ordering::Relaxed);
                }
            }
            Some(_) => {}
        }
        c.publish(&state.spool);
        self.settle(1);
    }

    /// A failure that loses data: kept for `take_failures` and logged.
    pub(super) fn fail(&self, message: String) {
        let mut p = self.progress();
        if p.unreported.len() < 8 {
            p.unreported.push(message.clone());
        }
        drop(p);
        self.warn(message);
    }

    /// Logs `message` as a warning: the first at once, then at most one summary a minute.
    pub(super) fn warn(&self, message: String) {
        let mut p = self.progress();
        p.last_error = Some(message.clone());
        let now = Instant::now();
        let due = p
            .logged_at
            .is_none_or(|at| now.duration_since(at) >= LOG_EVERY);
        if !due {
            p.unlogged += 1;
            return;
        }
        let more = std::mem::take(&mut p.unlogged);
        let first = p.logged_at.is_none();
        p.logged_at = Some(now);
        drop(p);
        let s = self.counters.snapshot();
        if first {
            log::warn!(target: "span_profile::export", "{message}");
        } else {
            log::warn!(
                target: "span_profile::export",
                "{} more delivery problem(s) for {} in the last minute; the latest: {message}; windows so far: {} delivered, {} waiting, {} dropped",
                more + 1,
                self.target,
                s.windows_delivered,
                s.windows_waiting(),
                s.windows_dropped_spool_full + s.windows_dropped_expired + s.windows_rejected + s.windows_dropped_at_shutdown,
            );
        }
    }

    /// Logs the failures not logged yet (at shutdown).
    pub(super) fn flush_warnings(&self) {
        let mut p = self.progress();
        let more = std::mem::take(&mut p.unlogged);
        let last = p.last_error.clone();
        drop(p);
        if more > 0 {
            log::warn!(
                target: "span_profile::export",
                "{more} more delivery problem(s) for {}; the latest: {}",
                self.target,
                last.as_deref().unwrap_or("unknown")
            );
        }
    }
}

/// What sends one request: [`UreqTransport`](super::tls::UreqTransport) in production, a
/// scripted fake in the tests.
///
/// `send` may block, for at most `timeout`; the worker calls it from its own thread, one
/// request at a time. It adds the headers common to every request.
pub(super) trait Transport: Send + 'static {
    /// Sends `request` once, giving up after `timeout`. Any status is an answer; an error
    /// means no answer came.
    fn send(&mut self, request: &Request, timeout: Duration) -> Result<Response, TransportError>;
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

/// The delivery thread's state: it alone touches the transport.
pub(super) struct Worker {
    shared: Arc<Shared>,
    /// Wake-ups from `submit`, `flush` and shutdown.
    wake: Receiver<()>,
    transport: Box<dyn Transport>,
    config: DeliveryConfig,
    check: Option<ResponseCheck>,
    /// Failed attempts in a row.
    attempt: u32,
    rng: XorShift,
}

impl Worker {
    /// A worker that sends the shared spool through `transport` and reads 2xx bodies with
    /// `check`.
    pub(super) fn new(
        shared: Arc<Shared>,
        wake: Receiver<()>,
        transport: Box<dyn Transport>,
        config: DeliveryConfig,
        check: Option<ResponseCheck>,
    ) -> Self {
        Self {
            shared,
            wake,
            transport,
            config,
            check,
            attempt: 0,
            rng: XorShift::seeded(),
        }
    }

    /// The thread's body: until shutdown, send the spool's head when no backoff is pending,
    /// and sleep otherwise; then [`Worker::finish`].
    pub(super) fn run(mut self) {
        let mut next_attempt = Instant::now();
        loop {
            if self.shared.shutdown.load(Ordering::Acquire) {
                self.finish();
                return;
            }
            if self.shared.state().spool.is_empty() {
                self.wait(None);
                continue;
            }
            if Instant::now() < next_attempt {
                self.wait(Some(next_attempt));
                continue;
            }
            if let Some(delay) = self.send_head(self.config.timeout) {
                next_attempt = Instant::now() + delay;
            }
        }
    }

    /// Blocks until a wake-up or `until`.
    fn wait(&mut self, until: Option<Instant>) {
        let deadline = until.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        let _ = self
            .wake
            .recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }

    /// Sends the oldest entry, giving up after `timeout`. Returns the delay before the next
    /// attempt after a retryable failure.
    fn send_head(&mut self, timeout: Duration) -> Option<Duration> {
        let shared = self.shared.clone();
        let (entry, request) = {
            let mut st = shared.state();
            let (head, bad) = st.spool.front();
            if !bad.is_empty() {
                shared
                    .counters
                    .spool_errors
                    .fetch_add(bad.len() as u64, Ordering::Relaxed);
                shared.lose(&mut st, &bad, Loss::SpoolFull);
                shared.counters.publish(&st.spool);
            }
            head?
        };
        if is_expired(request.window_end_unix_ns, self.config.max_age) {
            shared.fail(format!(
                "dropped a request for {} whose window is older than {:?} (the server's ingestion window)",
                shared.target, self.config.max_age
            ));
            let mut st = shared.state();
            if let Some(e) = st.spool.pop_if(entry.id) {
                shared.lose(&mut st, &[e], Loss::Expired);
            }
            shared.counters.publish(&st.spool);
            drop(st);
            self.end_backoff();
            return None;
        }
        // The backoff is over: an attempt is in flight, which a flush waits for.
        self.end_backoff();
        let answer = self.transport.send(&request, timeout);
        let c = &shared.counters;
        match attempt_outcome(shared.target, self.check, answer) {
            Attempt::Sent(outcome) => {
                // What the server said is recorded before the entry settles: a flush that
                // returns then sees it.
                if outcome.rejected_items > 0 {
                    c.rejected_items
                        .fetch_add(outcome.rejected_items, Ordering::Relaxed);
                    shared.fail(format!(
                        "{} rejected {} item(s) of an accepted request: {}",
                        shared.target,
                        outcome.rejected_items,
                        outcome.message.as_deref().unwrap_or("no message")
                    ));
                } else if let Some(message) = outcome.message {
                    c.warnings.fetch_add(1, Ordering::Relaxed);
                    shared.progress().last_warning = Some(format!(
                        "{} accepted a request with a warning: {message}",
                        shared.target
                    ));
                }
                {
                    let mut st = shared.state();
                    if let Some(e) = st.spool.pop_if(entry.id) {
                        shared.delivered(&mut st, e);
                    }
                    c.publish(&st.spool);
                }
                self.attempt = 0;
                None
            }
            Attempt::Refused(message) => {
                shared.fail(message);
                {
                    let mut st = shared.state();
                    if let Some(e) = st.spool.pop_if(entry.id) {
                        shared.lose(&mut st, &[e], Loss::Rejected);
                    }
                    c.publish(&st.spool);
                }
                self.attempt = 0;
                None
            }
            Attempt::Retry {
                message,
                retry_after,
                timeout,
            } => {
                // The message first: whoever sees the retry counted finds what went wrong.
                shared.warn(message);
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
                shared.progress().backing_off = true;
                shared.changed.notify_all();
                Some(delay)
            }
        }
    }

    fn end_backoff(&self) {
        let was = std::mem::replace(&mut self.shared.progress().backing_off, false);
        if was {
            self.shared.changed.notify_all();
        }
    }

    /// At shutdown: send what waits until the deadline or the first failure, each attempt
    /// cut to the time left, then account for what is left: a memory spool's entries are
    /// lost, a disk spool's wait for the next start.
    fn finish(mut self) {
        let deadline = self.shared.epoch
            + Duration::from_nanos(self.shared.deadline_ns.load(Ordering::Acquire));
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.shared.state().spool.is_empty() {
                break;
            }
            if self.send_head(left.min(self.config.timeout)).is_some() {
                break;
            }
        }
        {
            let mut st = self.shared.state();
            let left = st.spool.drain_memory();
            self.shared.lose(&mut st, &left, Loss::Shutdown);
            // `spooled` keeps saying what waits on disk; the folders are let go, so a new
            // delivery over the directory (in this process or another) sends them.
            self.shared.counters.publish(&st.spool);
            st.spool.release();
        }
        self.shared.flush_warnings();
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
        fn send(&mut self, request: &Request, _timeout: Duration) -> Answer {
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

    /// A worker with an in-memory spool, and the paths its transport is sent.
    fn worker(
        config: DeliveryConfig,
        answers: Vec<Answer>,
    ) -> (Worker, Arc<Shared>, Arc<Mutex<Vec<String>>>) {
        let spool = Spool::open(&config).unwrap();
        let shared = Arc::new(Shared::new("the test server", spool));
        let (transport, sent) = Scripted::new(answers);
        // The sender is dropped: the tests call the worker's steps directly.
        let (_, wake) = crossbeam_channel::bounded(1);
        let w = Worker::new(shared.clone(), wake, Box::new(transport), config, None);
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
        let (mut w, shared, sent) = worker(config.clone(), answers);
        for n in 1..=3 {
            shared.submit_window(vec![req(n)], &config);
        }
        let t = config.timeout;
        // The 503's Retry-After is longer than the first backoff (50-100 ms): it wins.
        assert_eq!(w.send_head(t), Some(Duration::from_secs(7)));
        assert!(shared.progress().backing_off);
        // The second failure backs off 100-200 ms.
        let d = w.send_head(t).unwrap();
        assert!(
            d >= Duration::from_millis(100) && d <= Duration::from_millis(200),
            "{d:?}"
        );
        for _ in 0..3 {
            assert_eq!(w.send_head(t), None);
        }
        assert_eq!(paths(&sent), ["/p/1", "/p/1", "/p/1", "/p/2", "/p/3"]);
        let s = shared.counters.snapshot();
        assert_eq!((s.retries, s.timeouts, s.sent, s.rejected), (2, 1, 2, 1));
        assert_eq!(
            (
                s.windows,
                s.windows_delivered,
                s.windows_rejected,
                s.windows_waiting()
            ),
            (3, 2, 1, 0)
        );
        assert_eq!((s.spooled, s.spooled_bytes), (0, 0));
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
    fn a_window_of_several_requests_is_delivered_once_and_lost_once() {
        let config = DeliveryConfig::default();
        // Window 0: both parts accepted. Window 1: its first part refused, its second sent.
        let answers = vec![
            status(200, ""),
            status(200, ""),
            status(400, "no"),
            status(200, ""),
        ];
        let (mut w, shared, _) = worker(config.clone(), answers);
        shared.submit_window(vec![req(1), req(2)], &config);
        shared.submit_window(vec![req(3), req(4)], &config);
        let s = shared.counters.snapshot();
        assert_eq!((s.windows, s.windows_waiting(), s.submitted), (2, 2, 4));
        w.send_head(config.timeout);
        assert_eq!(
            shared.counters.snapshot().windows_delivered,
            0,
            "half a window"
        );
        for _ in 0..3 {
            w.send_head(config.timeout);
        }
        let s = shared.counters.snapshot();
        assert_eq!(
            (s.windows_delivered, s.windows_rejected, s.windows_waiting()),
            (1, 1, 0),
            "{s:?}"
        );
        assert_eq!((s.sent, s.rejected), (3, 1));
    }

    #[test]
    fn a_full_spool_drops_the_oldest_and_an_expired_request_is_not_sent() {
        let config = DeliveryConfig::default().with_spool_max_entries(2);
        let (mut w, shared, sent) = worker(config.clone(), Vec::new());
        for n in 1..=4 {
            shared.submit_window(vec![req(n)], &config);
        }
        let mut old = req(5);
        old.window_end_unix_ns = 0;
        shared.submit_window(vec![old], &config);
        let c = &shared.counters;
        assert_eq!(c.dropped_spool_full.load(Ordering::Relaxed), 3);
        assert_eq!(c.spooled.load(Ordering::Relaxed), 2);
        while !shared.state().spool.is_empty() {
            assert_eq!(w.send_head(config.timeout), None);
        }
        assert_eq!(
            paths(&sent),
            ["/p/4"],
            "the newest in time, the expired one never"
        );
        let s = c.snapshot();
        assert_eq!((s.dropped_expired, s.sent), (1, 1));
        assert_eq!(
            (
                s.windows,
                s.windows_delivered,
                s.windows_dropped_spool_full,
                s.windows_dropped_expired
            ),
            (5, 1, 3, 1)
        );
        assert_eq!(shared.progress().pending, 0);
    }

    #[test]
    fn what_a_memory_spool_holds_past_the_deadline_is_dropped_at_shutdown() {
        let config = DeliveryConfig::default();
        let (w, shared, sent) = worker(config.clone(), Vec::new());
        shared.submit_window(vec![req(1)], &config);
        shared.submit_window(vec![req(2)], &config);
        shared.deadline_ns.store(0, Ordering::Release);
        shared.shutdown.store(true, Ordering::Release);
        w.run();
        assert!(paths(&sent).is_empty());
        let s = shared.counters.snapshot();
        assert_eq!(
            (s.dropped_at_shutdown, s.windows_dropped_at_shutdown),
            (2, 2)
        );
        assert_eq!((s.spooled, s.windows_waiting()), (0, 0));
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
