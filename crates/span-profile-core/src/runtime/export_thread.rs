//! The export thread: hands each closed window to every exporter in turn and counts what
//! failed. Exporters bound their own calls (the [`Exporter`] contract); this thread only
//! keeps a failing or panicking one from costing the others their windows.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::budget::ThreadCpuClock;
use crate::failure::FailureLog;
use crate::{ExportError, Profile};

use super::{Counters, Ledger};

/// Exports windows until the channel closes, then shuts the exporters down, giving each
/// `shutdown_timeout` but never more than what is left of the profiler's stop deadline (an
/// exporter's shutdown flushes: it makes the last delivery attempt within its timeout).
pub(super) fn export_loop(
    rx: Receiver<Arc<Profile>>,
    ledger: &Ledger,
    shutdown_timeout: Duration,
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
        let mut delivered = false;
        for (i, e) in ledger.exporters().iter().enumerate() {
            let exported = catch_unwind(AssertUnwindSafe(|| e.export(window.clone())))
                .unwrap_or_else(|panic| {
                    failures.exporter_panicked(&*panic);
                    Err(ExportError::InternalFailure("the exporter panicked".into()))
                });
            ledger.exported(i, exported.is_ok());
            match exported {
                Ok(()) => delivered = true,
                Err(_) => {
                    errors_since_last += 1;
                    counters.export_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
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
    // A failed or panicking shutdown is counted like a failed export, and a panic is logged
    // once, as in `export`. The exporters share what is left of the stop deadline, less a
    // tenth (at most 100 ms) for this thread to report back.
    let exporters = ledger.exporters();
    for (i, e) in exporters.iter().enumerate() {
        let timeout = match ledger.time_left() {
            Some(left) => {
                let left = left.saturating_sub((left / 10).min(Duration::from_millis(100)));
                // Split evenly among the exporters still to shut down.
                shutdown_timeout.min(left / (exporters.len() - i) as u32)
            }
            None => shutdown_timeout,
        };
        match catch_unwind(AssertUnwindSafe(|| e.shutdown_with_timeout(timeout))) {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                counters.export_errors.fetch_add(1, Ordering::Relaxed);
            }
            Err(panic) => {
                failures.exporter_panicked(&*panic);
                counters.export_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let _ = done.send(());
}
