//! A server that accepts and never answers: each attempt times out and is counted, while the
//! profiler's ticks keep coming as fast as those of a control profiler (same machine, same
//! moment, in-memory exporter) and no window is lost to a blocked export thread. Neither has a
//! CPU budget: the question is blocking, and a budget would slow the one whose exporter works
//! harder (encoding for a real server) on purpose.

mod common;

use std::time::{Duration, Instant};

use common::server::{CaptureServer, Reply};
use span_profile_core::Profiler;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};
use span_profile_test::{FakeWalker, InMemoryExporter};

#[test]
fn timeouts_fire_and_ticks_keep_coming() {
    let server = CaptureServer::start(|_, _| Reply::Hang);
    let delivery = DeliveryConfig::default()
        .with_timeout(Duration::from_millis(300))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(50));
    let exporter = std::sync::Arc::new(
        PyroscopeExporter::new(
            PyroscopeConfig::new(&server.url())
                .unwrap()
                .with_delivery(delivery),
        )
        .unwrap(),
    );
    let walker = FakeWalker::threads(4, 20);
    let walks = walker.walk_count();
    let profiler = Profiler::builder()
        .with_service("hang")
        .with_sample_rate_hz(200)
        .with_window(Duration::from_millis(100))
        .with_exporter_shutdown_timeout(Duration::from_millis(200))
        .with_overhead_budget(None)
        .with_walker(walker)
        .with_shared_exporter(exporter.clone())
        .start()
        .unwrap();
    let control_walker = FakeWalker::threads(4, 20);
    let control_walks = control_walker.walk_count();
    let control = Profiler::builder()
        .with_service("control")
        .with_sample_rate_hz(200)
        .with_window(Duration::from_millis(100))
        .with_overhead_budget(None)
        .with_walker(control_walker)
        .with_exporter(InMemoryExporter::default())
        .start()
        .unwrap();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let ticks = walks.load(std::sync::atomic::Ordering::Relaxed);
    let control_ticks = control_walks.load(std::sync::atomic::Ordering::Relaxed);
    let elapsed = t0.elapsed();
    let stats = profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    control
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    // On an idle machine both are ~300; under load both fall alike.
    assert!(
        ticks as f64 >= control_ticks as f64 * 0.8,
        "{ticks} ticks against {control_ticks} for the control, in {elapsed:?}"
    );
    // No window was lost to a blocked export thread: each export call only queued.
    assert_eq!(stats.dropped_windows, 0, "{stats:?}");
    assert!(stats.windows >= 10, "{stats:?}");
    let d = exporter.stats().delivery;
    assert!(d.timeouts >= 2, "{d:?}");
    assert_eq!(d.sent, 0);
    assert!(server.requests().len() >= 2);
    assert!(exporter
        .last_error()
        .unwrap()
        .contains("did not answer in time"));
}
