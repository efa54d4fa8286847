//! Pyroscope's limits are met before sending: profiles over the sample or byte limit are
//! split (no sample lost), series labels stay at 30 with valid names, and windows older than
//! the ingestion window are dropped and counted, never sent.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::server::{CaptureServer, Reply};
use common::{recent_checkout, wide_profile};
use prost::Message;
use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pprof;
use span_profile_export::pyroscope::push::PushRequest;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

fn exporter(url: &str) -> PyroscopeConfig {
    PyroscopeConfig::new(url)
        .unwrap()
        .with_delivery(DeliveryConfig::default().with_timeout(Duration::from_secs(5)))
}

/// (profiles, samples, cpu total, largest raw profile) over every request.
fn totals(server: &CaptureServer) -> (usize, usize, i64, usize) {
    let mut t = (0, 0, 0, 0);
    for r in server.requests() {
        let push = PushRequest::decode(r.plain_body().as_slice()).unwrap();
        for raw in push.series.iter().flat_map(|s| &s.samples) {
            let p = pprof::Profile::decode(raw.raw_profile.as_slice()).unwrap();
            t.0 += 1;
            t.1 += p.sample.len();
            t.2 += p.sample.iter().map(|s| s.value[0]).sum::<i64>();
            t.3 = t.3.max(raw.raw_profile.len());
        }
    }
    t
}

#[test]
fn profiles_over_16000_samples_are_split() {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let e = PyroscopeExporter::new(exporter(&server.url())).unwrap();
    let p = wide_profile(40_000, 4);
    e.export(Arc::new(p.clone())).unwrap();
    e.force_flush().unwrap();
    let (profiles, samples, cpu, _) = totals(&server);
    assert_eq!(profiles, 3);
    assert_eq!(samples, 40_000);
    assert_eq!(cpu as u64, p.total_cpu_samples());
    assert_eq!(e.stats().split_profiles, 1);
}

#[test]
fn profiles_over_the_byte_limit_are_split() {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let e = PyroscopeExporter::new(exporter(&server.url()).with_profile_limits(64 << 10, 16_000))
        .unwrap();
    let p = wide_profile(3000, 30);
    e.export(Arc::new(p.clone())).unwrap();
    e.force_flush().unwrap();
    let (profiles, samples, cpu, largest) = totals(&server);
    assert!(profiles > 2, "{profiles}");
    assert!(largest <= 64 << 10, "{largest}");
    assert_eq!((samples, cpu as u64), (3000, p.total_cpu_samples()));
    assert_eq!(e.stats().dropped_oversize_samples, 0);
}

#[test]
fn series_labels_are_capped_at_30_with_valid_names() {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let mut p = recent_checkout();
    for i in 0..40 {
        p.resource
            .attributes
            .push((format!("k8s.label.{i}"), format!("v{i}")));
    }
    p.resource.attributes.push(("9bad name".into(), "x".into()));
    let e = PyroscopeExporter::new(exporter(&server.url())).unwrap();
    e.export(Arc::new(p)).unwrap();
    e.force_flush().unwrap();
    let push = PushRequest::decode(server.requests()[0].plain_body().as_slice()).unwrap();
    let labels = &push.series[0].labels;
    // 29 series labels, one place left for `route`, which the server promotes from samples.
    assert_eq!(labels.len(), 29);
    for l in labels {
        let ok = l
            .name
            .chars()
            .enumerate()
            .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        assert!(ok, "{}", l.name);
    }
    assert_eq!(labels[0].name, "__name__");
    assert!(labels.iter().any(|l| l.name == "k8s_label_0"));
    // 2 + 3 resource labels + 41 attributes wanted, 29 kept.
    assert_eq!(e.stats().dropped_labels, 46 - 29);
}

#[test]
fn windows_older_than_the_ingestion_window_are_dropped_and_counted() {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let e = PyroscopeExporter::new(exporter(&server.url())).unwrap();
    let mut p = recent_checkout();
    p.start_unix_ns -= 2 * 3600 * 1_000_000_000;
    let err = e.export(Arc::new(p)).unwrap_err();
    assert!(err.to_string().contains("ingestion window"), "{err}");
    e.export(Arc::new(recent_checkout())).unwrap();
    e.force_flush().unwrap();
    assert_eq!(server.requests().len(), 1);
    let s = e.stats();
    assert_eq!(
        (s.windows, s.dropped_expired_windows, s.delivery.sent),
        (2, 1, 1)
    );
}
