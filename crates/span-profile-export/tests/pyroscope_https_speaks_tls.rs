//! An `https://` endpoint is reached over TLS (rustls, compiled in through ureq's `rustls`
//! feature): the first bytes the server receives are a TLS handshake record, never plain
//! HTTP. A server whose certificate cannot be verified (here: none at all) is a failed,
//! retried attempt with a message, not a request sent in the clear.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use common::recent_checkout;
use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

#[test]
fn https_sends_a_tls_client_hello_first() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accept = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut head = [0u8; 6];
        s.read_exact(&mut head).unwrap();
        head
        // Dropping the connection fails the handshake.
    });
    let exporter = PyroscopeExporter::new(
        PyroscopeConfig::new(&format!("https://{addr}"))
            .unwrap()
            .with_delivery(
                DeliveryConfig::default()
                    .with_timeout(Duration::from_secs(2))
                    .with_backoff(Duration::from_secs(5), Duration::from_secs(5)),
            ),
    )
    .unwrap();
    exporter.export(Arc::new(recent_checkout())).unwrap();
    let head = accept.join().unwrap();
    // A TLS record: content type 22 (handshake), version 3.x, then a ClientHello (type 1).
    assert_eq!(head[0], 0x16, "{head:?}");
    assert_eq!(head[1], 0x03, "{head:?}");
    assert_eq!(head[5], 0x01, "{head:?}");
    assert!(!head.starts_with(b"POST"));
    // The failed handshake is a retried attempt, reported with a message.
    let start = std::time::Instant::now();
    while exporter.stats().delivery.retries == 0 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = exporter.stats().delivery;
    assert_eq!((s.retries, s.sent, s.spooled), (1, 0, 1), "{s:?}");
    let err = exporter.last_error().unwrap();
    assert!(err.contains("Pyroscope"), "{err}");
    exporter
        .shutdown_with_timeout(Duration::from_millis(100))
        .ok();
}
