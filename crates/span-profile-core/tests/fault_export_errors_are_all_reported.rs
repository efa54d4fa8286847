//! Fault: an exporter fails for several windows in a row, then recovers. Every failed export is
//! counted in `ProfilerStats::export_errors` and reported in the `WindowStats::export_errors`
//! of a window that does get out; none is lost because the window carrying an earlier count
//! failed too (it used to be: only the last failure before a success was reported).

use std::time::Duration;

use span_profile_core::Profiler;
use span_profile_test::{FakeWalker, InMemoryExporter};

#[test]
fn consecutive_failures_are_all_reported_once_exports_succeed() {
    let exporter = InMemoryExporter::default();
    exporter.set_failing(true);
    let profiler = Profiler::builder()
        .with_window(Duration::from_millis(40))
        .with_sample_rate_hz(100)
        .with_overhead_budget(None)
        .with_walker(FakeWalker::threads(1, 2))
        .with_exporter(exporter.clone())
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    exporter.set_failing(false);
    std::thread::sleep(Duration::from_millis(200));
    let stats = profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    let windows = exporter.profiles();
    assert!(stats.export_errors >= 3, "{stats:?}");
    assert_eq!(stats.export_errors, stats.windows - stats.exported_windows);
    assert_eq!(windows.len() as u64, stats.exported_windows);
    let reported: u64 = windows.iter().map(|w| w.stats.export_errors).sum();
    assert_eq!(reported, stats.export_errors, "{stats:?}");
}
