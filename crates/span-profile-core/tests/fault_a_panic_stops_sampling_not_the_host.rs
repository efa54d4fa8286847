//! Visible failure: a panic inside the profiler's own threads never reaches the host.
//! - A walker that panics stops sampling for good: the failure is logged once, kept for
//!   `Profiler::failure()` and `stats().failed`, the windows sampled before it still go out,
//!   and shutdown works.
//! - An exporter that panics costs that exporter's windows (counted as export errors, logged
//!   once); the other exporters get every window and sampling goes on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use span_profile_core::{
    ExecutionKey, ExportError, Exporter, Frame, Profile, Profiler, RawFrame, RawSample, SpanSource,
    StackSink, StackWalker,
};
use span_profile_test::{FakeWalker, InMemoryExporter};

/// Samples one stack per tick and panics on tick `panic_at`.
#[derive(Debug)]
struct PanicsAt {
    panic_at: u64,
    walks: Arc<AtomicU64>,
}

impl StackWalker for PanicsAt {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        let n = self.walks.fetch_add(1, Ordering::Relaxed) + 1;
        if n == self.panic_at {
            panic!("walker bug on tick {n}");
        }
        let frames = [RawFrame { id: 1, line: 1 }];
        sink.sample(
            &RawSample::new(ExecutionKey::thread(1), &frames, "main")
                .with_cpu_ns(10_000_000)
                .with_span(SpanSource::Resolved(None)),
        );
    }
    fn symbolize(&mut self, _raw: RawFrame) -> Frame {
        Frame::new("work", "app.py", 1)
    }
}

fn collect_log() -> (
    Arc<Mutex<Vec<String>>>,
    impl Fn(&str) + Send + Sync + 'static,
) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    (log, move |m: &str| sink.lock().unwrap().push(m.to_string()))
}

#[test]
fn a_panicking_walker_stops_sampling_logs_once_and_the_host_goes_on() {
    let (log, handler) = collect_log();
    let walks = Arc::new(AtomicU64::new(0));
    let exporter = InMemoryExporter::default();
    let profiler = Profiler::builder()
        .with_sample_rate_hz(200)
        .with_overhead_budget(None)
        .with_window(Duration::from_secs(60))
        .with_walker(PanicsAt {
            panic_at: 10,
            walks: walks.clone(),
        })
        .with_exporter(exporter.clone())
        .with_failure_log(handler)
        .start()
        .unwrap();
    // Wait (generously: shared CI machines) for the panic, then for the sampler to be gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while profiler.failure().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let failure = profiler.failure().map(str::to_string);
    let walked = walks.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        walks.load(Ordering::Relaxed),
        walked,
        "no tick after the panic"
    );
    assert_eq!(walked, 10);
    let stats = profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    assert!(stats.failed, "{stats:?}");
    let failure = failure.expect("Profiler::failure() names the failure");
    assert!(
        failure.contains("sampler panicked (walker bug on tick 10)"),
        "{failure}"
    );
    assert_eq!(*log.lock().unwrap(), vec![failure], "logged exactly once");
    // The nine ticks before the panic were not lost.
    let windows = exporter.profiles();
    let kept: u64 = windows.iter().map(|w| w.total_wall_samples()).sum();
    assert_eq!(kept, 9, "{windows:?}");
}

/// Panics on every export.
#[derive(Debug)]
struct PanickingExporter;

impl Exporter for PanickingExporter {
    fn export(&self, _profile: Arc<Profile>) -> Result<(), ExportError> {
        panic!("exporter bug");
    }
}

#[test]
fn a_panicking_exporter_costs_its_windows_only_and_is_logged_once() {
    let (log, handler) = collect_log();
    let good = InMemoryExporter::default();
    let profiler = Profiler::builder()
        .with_sample_rate_hz(200)
        .with_window(Duration::from_millis(50))
        .with_walker(FakeWalker::threads(1, 3))
        .with_exporter(PanickingExporter)
        .with_exporter(good.clone())
        .with_failure_log(handler)
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let stats = profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    let windows = good.profiles();
    assert!(
        windows.len() >= 4,
        "sampling went on: {} windows",
        windows.len()
    );
    // Every window that was not dropped from a full queue reached the good exporter, and
    // cost one failed export of the panicking one.
    let offered = stats.windows - stats.dropped_windows;
    assert_eq!(windows.len() as u64, offered, "{stats:?}");
    assert_eq!(stats.export_errors, offered, "{stats:?}");
    assert!(!stats.failed);
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(
        log[0].contains("an exporter panicked (exporter bug)"),
        "{}",
        log[0]
    );
}

/// Exports fine; panics when shut down.
#[derive(Debug)]
struct PanicsAtShutdown;

impl Exporter for PanicsAtShutdown {
    fn export(&self, _profile: Arc<Profile>) -> Result<(), ExportError> {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> Result<(), ExportError> {
        panic!("exporter shutdown bug");
    }
}

#[test]
fn a_panic_in_an_exporters_shutdown_is_counted_and_logged_and_the_others_still_shut_down() {
    let (log, handler) = collect_log();
    let good = InMemoryExporter::default();
    let profiler = Profiler::builder()
        .with_walker(FakeWalker::threads(1, 3))
        .with_exporter(PanicsAtShutdown)
        .with_exporter(good.clone())
        .with_failure_log(handler)
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let stats = profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    assert_eq!(stats.export_errors, 1, "{stats:?}");
    assert_eq!(good.shutdowns(), 1, "the next exporter was still shut down");
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(log[0].contains("exporter shutdown bug"), "{log:?}");
}
