//! 429 and 5xx answers are retried after an exponential, jittered backoff; a `Retry-After`
//! is honoured; the request goes through once the server says 200.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::recent_checkout;
use common::server::{CaptureServer, Reply};
use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

#[test]
fn backoff_and_retry_after_are_honoured() {
    let server = CaptureServer::start(|_, i| match i {
        0 => Reply::status(429, "rate limited"),
        1 => Reply::Status(
            503,
            vec![("Retry-After".into(), "1".into())],
            b"busy".to_vec(),
        ),
        _ => Reply::ok(),
    });
    let delivery = DeliveryConfig::default()
        .with_timeout(Duration::from_secs(2))
        .with_backoff(Duration::from_millis(200), Duration::from_secs(3));
    let exporter = PyroscopeExporter::new(
        PyroscopeConfig::new(&server.url())
            .unwrap()
            .with_delivery(delivery),
    )
    .unwrap();
    exporter.export(Arc::new(recent_checkout())).unwrap();
    let reqs = server.wait_for(3, Duration::from_secs(6));
    assert_eq!(reqs.len(), 3);
    let gap1 = reqs[1].at - reqs[0].at;
    let gap2 = reqs[2].at - reqs[1].at;
    // Attempt 1 waits 100-200 ms (half to all of the initial backoff).
    assert!(gap1 >= Duration::from_millis(95), "{gap1:?}");
    // Attempt 2 waits for the server's Retry-After: 1 s, over the 200-400 ms backoff.
    assert!(gap2 >= Duration::from_millis(990), "{gap2:?}");
    assert_eq!(reqs[0].body, reqs[2].body, "the same request is retried");
    exporter.force_flush().unwrap();
    let s = exporter.stats().delivery;
    assert_eq!((s.retries, s.sent, s.rejected), (2, 1, 0), "{s:?}");
    exporter
        .shutdown_with_timeout(Duration::from_secs(2))
        .unwrap();
}
