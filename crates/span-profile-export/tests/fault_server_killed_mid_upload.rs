//! Fault: the Pyroscope server dies in the middle of an upload, stays down a while, then comes
//! back on the same port.
//!
//! The dying server accepts each connection, reads the request headers and the start of the
//! body, and closes the socket with the rest unread (the kernel answers with a reset, as when
//! the process is killed); then its listener closes too (connection refused). The exporter
//! counts each failed attempt as a retry, keeps the windows, and when a server answers again
//! every request arrives whole, exactly once; nothing is counted as dropped.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::server::{CaptureServer, Reply};
use common::{now_ns, recent_checkout};
use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

/// Serves `uploads` connections by reading up to `partial` bytes of each and hanging up.
fn die_mid_upload(listener: TcpListener, uploads: usize, partial: usize) -> usize {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut cut = 0;
    while cut < uploads && Instant::now() < deadline {
        match listener.accept() {
            Ok((mut stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(2)))
                    .unwrap();
                let mut buf = vec![0u8; partial];
                let mut got = 0;
                while got < partial {
                    match stream.read(&mut buf[got..]) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got += n,
                    }
                }
                cut += 1;
                drop(stream); // unread bytes remain: the peer gets a reset
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    cut
}

#[test]
fn uploads_cut_by_a_dying_server_are_retried_and_arrive_once() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let delivery = DeliveryConfig::default()
        .with_timeout(Duration::from_secs(2))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(100))
        .with_spool_max_entries(50);
    let exporter = PyroscopeExporter::new(
        PyroscopeConfig::new(&format!("http://{addr}"))
            .unwrap()
            .with_delivery(delivery),
    )
    .unwrap();

    let base = now_ns() - 60_000_000_000;
    let windows: Vec<_> = (0..3u64)
        .map(|i| {
            let mut p = recent_checkout();
            p.start_unix_ns = base + i * 1_000_000_000;
            Arc::new(p)
        })
        .collect();
    let expected: usize = windows.iter().map(|w| exporter.requests(w).len()).sum();

    let server = std::thread::spawn(move || die_mid_upload(listener, 2, 300));
    for w in &windows {
        // Queues the window; the outage is never waited for.
        exporter.export(w.clone()).unwrap();
    }
    let cut = server.join().unwrap();
    assert_eq!(cut, 2, "two uploads were cut mid-request");
    // Down: nothing listens on the port for a while.
    std::thread::sleep(Duration::from_millis(300));
    let during = exporter.stats().delivery;
    assert!(
        during.retries >= 3,
        "cut uploads and refused connections are retries: {during:?}"
    );
    assert_eq!(during.sent, 0, "{during:?}");
    assert_eq!(during.dropped(), 0, "{during:?}");
    let error = exporter.last_error().unwrap_or_default();

    let back = CaptureServer::start_on(addr, |_, _| Reply::ok());
    let got = back.wait_for(expected, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(200)); // any duplicate would arrive by now
    let got_after = back.requests();
    assert_eq!(got.len(), expected, "every request arrived");
    assert_eq!(got_after.len(), expected, "and only once");
    let mut bodies: Vec<_> = got_after.iter().map(|r| r.body.clone()).collect();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), expected, "no request arrived twice");
    for r in &got_after {
        // Whole: the body decompresses to its end (a cut body would not).
        assert!(!r.plain_body().is_empty());
    }
    let after = exporter.stats().delivery;
    assert_eq!(after.sent as usize, expected, "{after:?}");
    assert_eq!(after.dropped(), 0, "{after:?}");
    exporter
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    eprintln!(
        "{cut} uploads cut, {} retries before the server came back (last error: {error}); \
         {expected} requests delivered once each",
        during.retries
    );
}
