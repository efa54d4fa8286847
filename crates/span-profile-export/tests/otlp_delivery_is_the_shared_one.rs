//! The OTLP exporter sends through the delivery module it shares with Pyroscope, configured by
//! the OpenTelemetry variables: `OTEL_EXPORTER_OTLP_TIMEOUT` bounds each attempt against a
//! server that never answers; while the server is down, windows wait in the on-disk spool
//! under `SPAN_PROFILE_SPOOL_DIR/otlp` across a restart; a 503 is retried; every window then
//! arrives once, in order, at the prefix of `OTEL_EXPORTER_OTLP_ENDPOINT`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::recent_checkout;
use common::server::{CaptureServer, Reply};
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use prost::Message;
use span_profile_core::Exporter;
use span_profile_export::otlp::{OtlpConfig, OtlpExporter};
use span_profile_export::ExporterEnv;

fn exporter(env: &ExporterEnv) -> OtlpExporter {
    let mut config = OtlpConfig::from_env("", env).unwrap();
    config.delivery = config
        .delivery
        .with_backoff(Duration::from_millis(20), Duration::from_millis(150));
    OtlpExporter::new(config).unwrap()
}

#[test]
fn each_attempt_is_bounded_by_the_otel_timeout() {
    let server = CaptureServer::start(|_, _| Reply::Hang);
    let env = ExporterEnv::from_pairs([
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("{}/gateway/", server.url()),
        ),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "300".to_string()),
    ]);
    let e = exporter(&env);
    e.export(Arc::new(recent_checkout())).unwrap();
    // With the default 10 s timeout only one attempt would arrive in this time.
    let reqs = server.wait_for(3, Duration::from_secs(5));
    assert!(reqs.len() >= 3, "{} attempts", reqs.len());
    assert_eq!(reqs[0].path, "/gateway/v1development/profiles");
    for pair in reqs.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_millis(290), "{gap:?}");
    }
    let s = e.stats().delivery;
    assert!(s.timeouts >= 2 && s.retries >= 2, "{s:?}");
    assert!(e.last_error().unwrap().contains("did not answer in time"));
    let _ = e.shutdown_with_timeout(Duration::from_millis(500));
}

#[test]
fn windows_wait_in_the_spool_and_a_503_is_retried() {
    let spool = tempfile::tempdir().unwrap();
    // A port with nothing listening.
    let addr = CaptureServer::start(|_, _| Reply::ok()).addr;
    let env = ExporterEnv::from_pairs([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}/gw")),
        (
            "SPAN_PROFILE_SPOOL_DIR",
            spool.path().to_str().unwrap().to_string(),
        ),
    ]);
    let base = common::now_ns() - 60_000_000_000;
    let window = |i: u64| {
        let mut p = recent_checkout();
        p.start_unix_ns = base + i * 1_000_000_000;
        Arc::new(p)
    };

    let first = exporter(&env);
    for i in 0..3 {
        // The export call only queues; the outage is reported later.
        let _ = first.export(window(i));
    }
    std::thread::sleep(Duration::from_millis(300));
    let s = first.stats().delivery;
    assert!(s.retries >= 1, "{s:?}");
    assert_eq!(s.spooled, 3, "{s:?}");
    assert!(first
        .last_error()
        .unwrap()
        .contains("cannot reach the OTLP endpoint"));
    first.shutdown_with_timeout(Duration::from_secs(2)).unwrap();
    // Each process spools in a folder of its own under the backend's directory.
    let on_disk = spool.path().join("otlp");
    let files: usize = std::fs::read_dir(&on_disk)
        .unwrap()
        .flatten()
        .map(|d| {
            std::fs::read_dir(d.path())
                .unwrap()
                .flatten()
                .filter(|f| f.file_name().to_string_lossy().ends_with(".req"))
                .count()
        })
        .sum();
    assert_eq!(files, 3);

    // A new exporter over the same spool; the server is back but busy once.
    let server = CaptureServer::start_on(addr, |_, i| match i {
        0 => Reply::status(503, "busy"),
        _ => Reply::ok(),
    });
    let second = exporter(&env);
    let reqs = server.wait_for(4, Duration::from_secs(5));
    second.force_flush().unwrap();
    assert_eq!(reqs.len(), 4);
    assert!(reqs.iter().all(|r| r.path == "/gw/v1development/profiles"));
    assert_eq!(reqs[0].body, reqs[1].body, "the 503'd request is retried");
    let starts: Vec<u64> = reqs[1..]
        .iter()
        .map(|r| {
            let req = ExportProfilesServiceRequest::decode(r.plain_body().as_slice()).unwrap();
            req.resource_profiles[0].scope_profiles[0].profiles[0].time_unix_nano
        })
        .collect();
    let expected: Vec<u64> = (0..3).map(|i| base + i * 1_000_000_000).collect();
    assert_eq!(starts, expected, "every window once, in order");
    let s = second.stats().delivery;
    assert_eq!(
        (s.sent, s.retries, s.spooled, s.dropped()),
        (3, 1, 0, 0),
        "{s:?}"
    );
    // The first exporter's folder was claimed, emptied and removed: only the second's is left.
    assert_eq!(std::fs::read_dir(&on_disk).unwrap().count(), 1);
    second
        .shutdown_with_timeout(Duration::from_secs(2))
        .unwrap();
}
