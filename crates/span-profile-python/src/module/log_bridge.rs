//! Rust's `log` facade, carried to Python's `logging` (ADR 0029).
//!
//! A `log::warn!` in the profiler (the export thread, `stop()`) must reach the application's
//! `logging` configuration, logger `span_profile` and its children, but the thread that logs
//! must never wait for the GIL: at interpreter shutdown the GIL may never come back, and in a
//! forked child the thread that held it does not exist. So the Rust side only queues the
//! record (`try_lock`: a contended or full queue counts the record as dropped instead of
//! waiting), and a Python daemon thread (`span_profile._logging`) takes records off the queue
//! with the GIL released while it waits, and hands them to `logging`. `stop()` drains the
//! queue once more before it returns, so its own messages are out when it returns.
//!
//! The sampling path must not log (it would allocate); nothing there does.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, TryLockError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Records waiting for the Python side; more are counted in [`DROPPED`].
const CAPACITY: usize = 256;
/// How long a record tries for the queue's lock before it is counted as dropped.
const PUSH_PATIENCE: Duration = Duration::from_millis(1);

/// One record: Python level number, logger name, message.
type Entry = (u8, String, String);

static QUEUE: Mutex<VecDeque<Entry>> = Mutex::new(VecDeque::new());
static READY: Condvar = Condvar::new();
/// Records the queue had no room (or no uncontended moment) for. Relaxed: a count only.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Set by [`log_wake`]: the waiting [`log_ready`] returns at once. Relaxed is enough: the
/// condition variable's mutex orders it with the wait.
static WAKE: AtomicBool = AtomicBool::new(false);

/// The `log::Log` that queues records for Python.
#[derive(Debug)]
struct Bridge;

static BRIDGE: Bridge = Bridge;

/// Python's level numbers (`logging.ERROR` ...; TRACE is 5, below DEBUG).
fn python_level(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 40,
        log::Level::Warn => 30,
        log::Level::Info => 20,
        log::Level::Debug => 10,
        log::Level::Trace => 5,
    }
}

/// The Python logger of a `log` target: `span_profile::export::file` is
/// `span_profile.export.file`; a dependency's target goes under `span_profile.deps`.
fn logger_name(target: &str) -> String {
    let dotted = target.replace("::", ".");
    if dotted == "span_profile" || dotted.starts_with("span_profile.") {
        dotted
    } else {
        format!("span_profile.deps.{dotted}")
    }
}

impl log::Log for Bridge {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        // Ours down to info; dependencies' warnings and errors only.
        metadata.level() <= log::Level::Warn
            || (metadata.target().starts_with("span_profile")
                && metadata.level() <= log::Level::Info)
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let entry = (
            python_level(record.level()),
            logger_name(record.target()),
            record.args().to_string(),
        );
        // The lock is held only to push or take records, so a short try nearly always gets it.
        match lock_queue(PUSH_PATIENCE) {
            Some(mut q) if q.len() < CAPACITY => {
                q.push_back(entry);
                READY.notify_one();
            }
            _ => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn flush(&self) {}
}

/// Installs the bridge as this extension's `log` logger (once; later calls do nothing).
pub(crate) fn install() {
    if log::set_logger(&BRIDGE).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

/// Takes every queued record, and a note of the dropped ones.
fn take(q: &mut VecDeque<Entry>) -> Vec<Entry> {
    let mut out: Vec<Entry> = q.drain(..).collect();
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        out.push((
            30,
            "span_profile".to_string(),
            format!("{dropped} log record(s) of the native profiler were dropped (the queue to Python's logging was full or busy)"),
        ));
    }
    out
}

/// Whether records (or a count of dropped ones) wait in the queue.
fn pending(q: &VecDeque<Entry>) -> bool {
    !q.is_empty() || DROPPED.load(Ordering::Relaxed) > 0
}

/// The queue's lock, tried for up to `patience` (once if it is zero): in a forked child the
/// lock may be held by a thread that does not exist there, so this gives up rather than hang.
fn lock_queue(patience: Duration) -> Option<std::sync::MutexGuard<'static, VecDeque<Entry>>> {
    let deadline = Instant::now() + patience;
    loop {
        match QUEUE.try_lock() {
            Ok(g) => return Some(g),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() >= deadline => return None,
            Err(TryLockError::WouldBlock) => std::thread::yield_now(),
        }
    }
}

/// Waits up to `timeout_s` (GIL released) until native log records are queued; true if some
/// are, false on the timeout or a [`log_wake`]. Takes nothing: `span_profile._logging`'s thread
/// then takes them with [`log_drain`] under the lock `flush()` takes too, so a record is never
/// in that thread's hands, unlogged, while a flush finds the queue empty.
#[pyfunction]
#[pyo3(signature = (timeout_s))]
pub(crate) fn log_ready(py: Python<'_>, timeout_s: f64) -> bool {
    let timeout = Duration::from_secs_f64(timeout_s.clamp(0.0, 3600.0));
    py.detach(move || {
        let deadline = Instant::now() + timeout;
        loop {
            if WAKE.swap(false, Ordering::Relaxed) {
                return false;
            }
            // One try: a held lock means polling (see `lock_queue`).
            let guard = lock_queue(Duration::ZERO);
            let now = Instant::now();
            match guard {
                Some(q) => {
                    if pending(&q) {
                        return true;
                    }
                    // Looked at again under the lock, which `log_wake` takes before it
                    // notifies: a wake that came after the look above is not lost.
                    if now >= deadline || WAKE.swap(false, Ordering::Relaxed) {
                        return false;
                    }
                    let (q, _) = READY
                        .wait_timeout(q, deadline - now)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if pending(&q) {
                        return true;
                    }
                    if Instant::now() >= deadline {
                        return false;
                    }
                }
                None if now >= deadline => return false,
                None => std::thread::sleep(Duration::from_millis(20).min(deadline - now)),
            }
        }
    })
}

/// Makes a waiting (or the next) [`log_ready`] return at once: the pump's exit at interpreter
/// shutdown, before finalization (a thread that comes back from a native wait during
/// finalization crashes the process).
#[pyfunction]
pub(crate) fn log_wake() {
    WAKE.store(true, Ordering::Relaxed);
    // Taken (briefly, and bounded for a forked child) so that a `log_ready` between its look
    // at `WAKE` and its wait is either before the look under the lock or inside the wait.
    let _guard = lock_queue(Duration::from_millis(50));
    READY.notify_all();
}

/// The records queued now, as `(level, logger, message)` tuples, without waiting for more
/// (the pump after [`log_ready`], and `flush()`). Gives up, leaving them queued, only if the
/// queue's lock stays held for 50 ms (a forked child's copy held by a thread it does not have).
#[pyfunction]
pub(crate) fn log_drain(py: Python<'_>) -> Vec<Entry> {
    py.detach(|| {
        lock_queue(Duration::from_millis(50))
            .map(|mut q| take(&mut q))
            .unwrap_or_default()
    })
}

/// Logs `message` at `level` (`"error"`, `"warn"`, `"info"`, `"debug"`) under `target` from a
/// new native thread, as the export thread does, and waits for that thread (GIL released).
/// For the specs of the bridge.
#[pyfunction]
pub(crate) fn emit_log(py: Python<'_>, level: &str, target: &str, message: &str) -> PyResult<()> {
    let level: log::Level = level
        .parse()
        .map_err(|_| pyo3::exceptions::PyValueError::new_err(format!("unknown level {level:?}")))?;
    let (target, message) = (target.to_string(), message.to_string());
    py.detach(move || {
        let t = std::thread::spawn(move || log::log!(target: &target, level, "{message}"));
        t.join()
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("the logging thread panicked"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_map_to_loggers_under_span_profile() {
        assert_eq!(logger_name("span_profile::export"), "span_profile.export");
        assert_eq!(logger_name("span_profile"), "span_profile");
        assert_eq!(logger_name("ureq::pool"), "span_profile.deps.ureq.pool");
    }
}
