//! An exporter that fails or hangs costs windows (counted), never samples, and never blocks
//! shutdown beyond its timeout.

use std::time::{Duration, Instant};

use span_profile_core::Profiler;
use span_profile_test::{FakeWalker, InMemoryExporter};

#[test]
fn failing_exports_are_counted_and_reported_with_the_next_window() {
    let exporter = InMemoryExporter::default();
    exporter.set_failing(true);
    let walker = FakeWalker::threads(1, 3);
    let walks = walker.walk_count();
    let profiler = Profiler::builder()
        .with_window(Duration::from_millis(50))
        .with_sample_rate_hz(200)
        .with_walker(walker)
        .with_exporter(exporter.clone())
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    exporter.set_failing(false);
    std::thread::sleep(Duration::from_millis(200));
    let stats = profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    assert!(stats.export_errors >= 2, "{stats:?}");
    assert!(walks.load(std::sync::atomic::Ordering::Relaxed) > 50);
    let windows = exporter.profiles();
    assert!(
        windows.iter().any(|w| w.stats.export_errors > 0),
        "the first good window reports earlier failures"
    );
}

#[test]
fn a_hanging_exporter_drops_the_oldest_windows_and_shutdown_keeps_its_timeout() {
    let exporter = InMemoryExporter::default();
    exporter.set_hang(Some(Duration::from_secs(3)));
    let walker = FakeWalker::threads(1, 3);
    let walks = walker.walk_count();
    let profiler = Profiler::builder()
        .with_window(Duration::from_millis(20))
        .with_sample_rate_hz(500)
        .with_export_queue(2)
        .with_walker(walker)
        .with_exporter(exporter.clone())
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let before = walks.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        before > 100,
        "sampling went on while the exporter hung: {before} walks"
    );
    let t = Instant::now();
    let r = profiler.shutdown_with_timeout(Duration::from_millis(300));
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        t.elapsed()
    );
    assert!(r.is_err(), "the hung exporter makes shutdown time out");
    let stats = profiler.stats();
    assert!(stats.dropped_windows > 5, "{stats:?}");
}

#[test]
fn shutdown_flushes_the_last_partial_window() {
    let exporter = InMemoryExporter::default();
    let profiler = Profiler::builder()
        .with_window(Duration::from_secs(3600))
        .with_walker(FakeWalker::threads(3, 3))
        .with_exporter(exporter.clone())
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    profiler.shutdown().unwrap();
    let w = exporter.profiles();
    assert_eq!(w.len(), 1);
    assert!(w[0].total_wall_samples() >= 3);
    assert_eq!(exporter.shutdowns(), 1);
    assert!(
        profiler.shutdown().is_err(),
        "a second shutdown says it is already shut down"
    );
}

#[test]
fn windows_end_on_wall_clock_multiples() {
    let exporter = InMemoryExporter::default();
    let profiler = Profiler::builder()
        .with_window(Duration::from_millis(100))
        .with_walker(FakeWalker::threads(1, 1))
        .with_exporter(exporter.clone())
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(450));
    profiler.shutdown().unwrap();
    let w = exporter.profiles();
    assert!(w.len() >= 3);
    // Every window but the first and the last starts and ends on a multiple of 100 ms
    // (within one sampling interval).
    for p in &w[1..w.len() - 1] {
        let end = p.start_unix_ns + p.duration_ns;
        let off = end % 100_000_000;
        assert!(off < 20_000_000, "window end is {off} ns past a multiple");
    }
}

#[test]
fn bad_settings_are_errors() {
    let e = Profiler::builder()
        .with_sample_rate_hz(0)
        .with_walker(FakeWalker::threads(1, 1))
        .start()
        .unwrap_err();
    assert!(e.to_string().contains("sample_rate_hz"), "{e}");
    let e = Profiler::builder().start().unwrap_err();
    assert!(e.to_string().contains("with_walker"), "{e}");
}
