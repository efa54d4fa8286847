//! A 4xx other than 429 is not retried: the request is dropped, counted, and the server's
//! message comes back from the next `export`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::recent_checkout;
use common::server::{CaptureServer, Reply};
use span_profile_core::{ExportError, Exporter};
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

#[test]
fn a_400_is_reported_with_the_server_message_and_not_retried() {
    let server = CaptureServer::start(|_, _| {
        Reply::status(400, "invalid labels: label name \"9x\" is not valid")
    });
    let delivery = DeliveryConfig::default()
        .with_backoff(Duration::from_millis(10), Duration::from_millis(20));
    let exporter = PyroscopeExporter::new(
        PyroscopeConfig::new(&server.url())
            .unwrap()
            .with_delivery(delivery),
    )
    .unwrap();
    exporter.export(Arc::new(recent_checkout())).unwrap();
    exporter.force_flush().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(server.requests().len(), 1, "not retried");
    let s = exporter.stats().delivery;
    assert_eq!(
        (s.rejected, s.retries, s.sent, s.spooled),
        (1, 0, 0, 0),
        "{s:?}"
    );
    // The next export reports it (and still queues its own window).
    let err = exporter.export(Arc::new(recent_checkout())).unwrap_err();
    let ExportError::InternalFailure(msg) = err else {
        panic!("{err:?}")
    };
    assert!(msg.contains("400") && msg.contains("is not valid"), "{msg}");
    exporter
        .shutdown_with_timeout(Duration::from_secs(2))
        .unwrap();
}
