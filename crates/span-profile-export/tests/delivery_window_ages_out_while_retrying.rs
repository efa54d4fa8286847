//! A window accepted while fresh, then retried against a server that keeps failing, is
//! dropped and counted once it is older than the ingestion window: it is not retried
//! forever, the spool empties, and the next `export` says why.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::server::{CaptureServer, Reply};
use common::{now_ns, recent_checkout};
use span_profile_core::{ExportError, Exporter};
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

#[test]
fn a_window_that_ages_out_while_retrying_is_dropped_and_counted() {
    let server = CaptureServer::start(|_, _| Reply::status(503, "ingester unavailable"));
    let spool = tempfile::tempdir().unwrap();
    let max_age = Duration::from_millis(1500);
    let delivery = DeliveryConfig::default()
        .with_timeout(Duration::from_secs(1))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(50))
        .with_max_age(max_age)
        .with_spool_dir(spool.path());
    let exporter = PyroscopeExporter::new(
        PyroscopeConfig::new(&server.url())
            .unwrap()
            .with_delivery(delivery),
    )
    .unwrap();
    // The window ended 1 s ago: fresh at export, stale half a second later.
    let mut p = recent_checkout();
    p.start_unix_ns = now_ns() - p.duration_ns - 1_000_000_000;
    exporter.export(Arc::new(p)).unwrap();

    let start = Instant::now();
    while exporter.stats().delivery.dropped_expired == 0 && start.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = exporter.stats().delivery;
    assert_eq!((s.dropped_expired, s.sent, s.spooled), (1, 0, 0), "{s:?}");
    assert!(s.retries >= 2, "retried while fresh: {s:?}");
    let left: Vec<_> = walk(spool.path());
    assert!(left.iter().all(|f| !f.ends_with(".req")), "{left:?}");
    // No attempt after the drop.
    let attempts = server.requests().len();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.requests().len(), attempts, "retried after the drop");
    assert_eq!(exporter.stats().delivery.retries, s.retries);
    // The next export reports the drop (and the 503s before it).
    let err = exporter.export(Arc::new(recent_checkout())).unwrap_err();
    let ExportError::InternalFailure(msg) = err else {
        panic!("{err:?}")
    };
    assert!(msg.contains("older than"), "{msg}");
    exporter
        .shutdown_with_timeout(Duration::from_millis(100))
        .ok();
}

/// Every file under `dir`, one level of folders deep (each process spools in its own).
fn walk(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .flat_map(|d| match std::fs::read_dir(d.path()) {
            Ok(inner) => inner
                .flatten()
                .map(|f| f.path().display().to_string())
                .collect(),
            Err(_) => vec![d.path().display().to_string()],
        })
        .collect()
}
