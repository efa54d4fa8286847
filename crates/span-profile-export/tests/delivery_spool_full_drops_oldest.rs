//! With the server down, a full spool drops its oldest windows and counts them; what it
//! holds stays within its bounds, on disk and in memory; the newest windows arrive later.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::server::{CaptureServer, Reply};
use common::wide_profile;
use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

fn run(spool_dir: Option<&std::path::Path>) {
    let addr = CaptureServer::start(|_, _| Reply::ok()).addr;
    let mut delivery = DeliveryConfig::default()
        .with_timeout(Duration::from_secs(1))
        .with_backoff(Duration::from_millis(10), Duration::from_millis(50))
        .with_spool_max_entries(5)
        .with_spool_max_bytes(4 << 20);
    if let Some(d) = spool_dir {
        delivery = delivery.with_spool_dir(d);
    }
    let exporter = PyroscopeExporter::new(
        PyroscopeConfig::new(&format!("http://{addr}"))
            .unwrap()
            .with_delivery(delivery),
    )
    .unwrap();
    let mut starts = Vec::new();
    for i in 0..20u64 {
        let mut p = wide_profile(2000, 20);
        p.start_unix_ns -= (20 - i) * 1_000_000;
        starts.push(p.start_unix_ns as i64);
        let _ = exporter.export(Arc::new(p));
        std::thread::sleep(Duration::from_millis(5));
        let s = exporter.stats().delivery;
        assert!(s.spooled <= 5 && s.spooled_bytes <= 4 << 20, "{s:?}");
    }
    std::thread::sleep(Duration::from_millis(100));
    let s = exporter.stats().delivery;
    assert_eq!(s.spooled, 5, "{s:?}");
    assert_eq!(s.dropped_spool_full, 15, "{s:?}");
    if let Some(d) = spool_dir {
        let bytes: u64 = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(bytes <= 4 << 20, "{bytes}");
    }
    let server = CaptureServer::start_on(addr, |_, _| Reply::ok());
    let reqs = server.wait_for(5, Duration::from_secs(5));
    exporter.force_flush().unwrap();
    let got: Vec<i64> = reqs.iter().map(common::first_profile_start).collect();
    assert_eq!(got, starts[15..].to_vec(), "the newest five, in order");
    exporter
        .shutdown_with_timeout(Duration::from_secs(2))
        .unwrap();
}

#[test]
fn memory_spool_drops_oldest_and_stays_bounded() {
    run(None);
}

#[test]
fn disk_spool_drops_oldest_and_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    run(Some(dir.path()));
}
