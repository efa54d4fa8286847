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
use crate::{ExportError, Exporter, Profile};

use super::Counters;

/// Exports windows until the channel closes, then flushes the exporters and shuts them down,
/// giving each `shutdown_timeout`.
pub(super) fn export_loop(
    rx: Receiver<Arc<Profile>>,
    exporters: Vec<Arc<dyn Exporter>>,
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
        let mut ok = true;
        let mut delivered = false;
        for e in &exporters {
            let exported = catch_unwind(AssertUnwindSafe(|| e.export(window.clone())))
                .unwrap_or_else(|panic| {
                    failures.exporter_panicked(&*panic);
                    Err(ExportError::InternalFailure("the exporter panicked".into()))
                });
            match exported {
                Ok(()) => delivered = true,
                Err(_) => {
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
    // A failed or panicking flush or shutdown is counted like a failed export, and a panic is
    // logged once, as in `export`.
    for e in &exporters {
        let calls: [&dyn Fn() -> Result<(), ExportError>; 2] = [&|| e.force_flush(), &|| {
            e.shutdown_with_timeout(shutdown_timeout)
        }];
        for call in calls {
            match catch_unwind(AssertUnwindSafe(call)) {
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
    }
    let _ = done.send(());
}
