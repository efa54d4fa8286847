//! While the server is down, windows wait in the on-disk spool, across a restart of the
//! exporter; when the server comes back every window arrives once, in order.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::recent_checkout;
use common::server::{CaptureServer, Reply};
use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

fn exporter(url: &str, spool: &std::path::Path) -> PyroscopeExporter {
    let delivery = DeliveryConfig::default()
        .with_timeout(Duration::from_secs(1))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(150))
        .with_spool_dir(spool)
        .with_spool_max_entries(20);
    PyroscopeExporter::new(PyroscopeConfig::new(url).unwrap().with_delivery(delivery)).unwrap()
}

/// The spooled entries under `spool` (each process spools in a folder of its own).
fn spooled_files(spool: &std::path::Path) -> usize {
    std::fs::read_dir(spool)
        .unwrap()
        .flatten()
        .filter(|d| d.path().is_dir())
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .filter(|f| f.file_name().to_string_lossy().ends_with(".req"))
        .count()
}

fn window(base: u64, i: u64) -> Arc<span_profile_core::Profile> {
    let mut p = recent_checkout();
    p.start_unix_ns = base + i * 1_000_000_000;
    Arc::new(p)
}

#[test]
fn every_window_arrives_in_order_after_an_outage_and_a_restart() {
    let spool = tempfile::tempdir().unwrap();
    // A port with nothing listening.
    let addr = CaptureServer::start(|_, _| Reply::ok()).addr;
    let url = format!("http://{addr}");

    let base = common::now_ns() - 60_000_000_000;
    let first = exporter(&url, spool.path());
    for i in 0..4 {
        // The export call only queues: the outage is reported later, never waited for.
        let _ = first.export(window(base, i));
    }
    std::thread::sleep(Duration::from_millis(300));
    let s = first.stats().delivery;
    assert!(s.retries >= 2, "{s:?}");
    assert_eq!(s.spooled, 4, "{s:?}");
    assert!(first
        .last_error()
        .unwrap()
        .contains("cannot reach Pyroscope"));
    // The flush gives up while the server is failing instead of hanging.
    assert!(first.force_flush().is_err());
    first.shutdown_with_timeout(Duration::from_secs(2)).unwrap();
    assert_eq!(spooled_files(spool.path()), 4, "spooled on disk");
    let s = first.stats().delivery;
    assert_eq!(
        (s.windows, s.windows_waiting(), s.windows_delivered),
        (4, 4, 0)
    );

    // A new process over the same spool; still down for two more windows.
    let second = exporter(&url, spool.path());
    for i in 4..6 {
        let _ = second.export(window(base, i));
    }
    std::thread::sleep(Duration::from_millis(100));
    let server = CaptureServer::start_on(addr, |_, _| Reply::ok());
    let reqs = server.wait_for(6, Duration::from_secs(5));
    second.force_flush().unwrap();
    assert_eq!(reqs.len(), 6);
    let starts: Vec<i64> = reqs.iter().map(common::first_profile_start).collect();
    let expected: Vec<i64> = (0..6).map(|i| (base + i * 1_000_000_000) as i64).collect();
    assert_eq!(starts, expected, "every window once, in order");
    let s = second.stats().delivery;
    assert_eq!((s.sent, s.spooled, s.dropped()), (6, 0, 0), "{s:?}");
    // The earlier process's four windows are the recovered requests; this one's two windows
    // are delivered.
    assert_eq!(
        (s.recovered, s.windows, s.windows_delivered),
        (4, 2, 2),
        "{s:?}"
    );
    assert_eq!(spooled_files(spool.path()), 0);
    assert_eq!(
        std::fs::read_dir(spool.path()).unwrap().count(),
        1,
        "only the running process's own folder is left"
    );
    second
        .shutdown_with_timeout(Duration::from_secs(2))
        .unwrap();
}
