//! The export thread: hands each closed window to every exporter, with a timeout per call,
//! and counts what failed.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::budget::ThreadCpuClock;
use crate::failure::FailureLog;
use crate::{Exporter, Profile};

use super::Counters;

pub(super) fn export_loop(
    rx: Receiver<Arc<Profile>>,
    exporters: Vec<Arc<dyn Exporter>>,
    timeout: Duration,
    counters: Arc<Counters>,
    failures: &FailureLog,
    done: Sender<()>,
) {
    let clock = ThreadCpuClock::for_current_thread();
    let mut cpu_last = clock.now_ns();
    let mut errors_since_last = 0u64;
    while let Ok(window) = rx.recv() {
        let carried = std::mem::take(&mut errors_since_last);
        let window = if carried > 0 {
            let mut w = (*window).clone();
            w.stats.export_errors = carried;
            Arc::new(w)
        } else {
            window
        };
        let mut ok = true;
        let mut delivered = false;
        for e in &exporters {
            let exported = catch_unwind(AssertUnwindSafe(|| {
                block_on_timeout(e.export(window.clone()), timeout)
            }))
            .unwrap_or_else(|panic| {
                failures.exporter_panicked(&*panic);
                None
            });
            match exported {
                Some(Ok(())) => delivered = true,
                Some(Err(_)) | None => {
                    ok = false;
                    errors_since_last += 1;
                    counters.export_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if ok {
            counters.exported_windows.fetch_add(1, Ordering::Relaxed);
        }
        if !delivered {
            // No exporter took the window, so the earlier failures it carried were not
            // reported either: carry them on to the next window.
            errors_since_last += carried;
        }
        let cpu = clock.now_ns();
        let used = cpu.saturating_sub(cpu_last);
        counters.exporter_cpu_ns.fetch_add(used, Ordering::Relaxed);
        counters
            .exporter_cpu_pending
            .fetch_add(used, Ordering::Relaxed);
        cpu_last = cpu;
    }
    for e in &exporters {
        if block_on_timeout(e.force_flush(), timeout).is_none_or(|r| r.is_err()) {
            counters.export_errors.fetch_add(1, Ordering::Relaxed);
        }
        let _ = block_on_timeout(e.shutdown_with_timeout(timeout), timeout);
    }
    let _ = done.send(());
}

struct ThreadWaker(Thread);
impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future on the current thread until it completes or `timeout` passes. Exporters are
/// async for the benefit of async callers; the profiler needs no async runtime to drive them.
pub(crate) fn block_on_timeout<F: Future>(fut: F, timeout: Duration) -> Option<F::Output> {
    let deadline = Instant::now() + timeout;
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::park_timeout(deadline - now);
    }
}
