//! The Pyroscope exporter pushes each window to a real HTTP server as Connect protobuf with
//! gzip; decoded with our own types, the series labels, the per-sample span ids (local root
//! by default, innermost with `SpanScope::All`) and the pprof content match the window.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use common::server::{CaptureServer, Captured, Reply};
use common::{recent_checkout, CHILD, ROOT, TRACE};
use prost::Message;
use span_profile_core::Exporter;
use span_profile_core::SpanScope;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pprof;
use span_profile_export::pyroscope::push::PushRequest;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

fn decode(c: &Captured) -> PushRequest {
    PushRequest::decode(c.plain_body().as_slice()).expect("a PushRequest")
}

fn labels(
    series: &span_profile_export::pyroscope::push::RawProfileSeries,
) -> BTreeMap<String, String> {
    series
        .labels
        .iter()
        .map(|l| (l.name.clone(), l.value.clone()))
        .collect()
}

/// (span_id, trace_id, route, first value) of one sample.
type Row = (String, String, String, i64);

/// The rows of every sample, and the sample types.
fn samples(raw: &[u8]) -> (Vec<Row>, Vec<(String, String)>) {
    let p = pprof::Profile::decode(raw).expect("bare pprof");
    let s = |i: i64| p.string_table[i as usize].clone();
    let types = p
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    let rows = p
        .sample
        .iter()
        .map(|x| {
            let get = |k: &str| {
                x.label
                    .iter()
                    .find(|l| s(l.key) == k)
                    .map(|l| s(l.str))
                    .unwrap_or_default()
            };
            for l in &x.label {
                let key = s(l.key);
                assert!(
                    ["span_id", "trace_id", "route"].contains(&key.as_str()),
                    "unexpected sample label {key} (would become a series label)"
                );
            }
            (get("span_id"), get("trace_id"), get("route"), x.value[0])
        })
        .collect();
    (rows, types)
}

fn fast() -> DeliveryConfig {
    DeliveryConfig::default()
        .with_timeout(Duration::from_secs(2))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(100))
}

#[test]
fn push_request_shape_labels_and_local_root_span_ids() {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let config = PyroscopeConfig::new(&server.url())
        .unwrap()
        .with_tenant_id("team-a")
        .with_tag("region", "eu-west-1")
        .with_header("X-Extra", "yes")
        .with_wall(true)
        .with_delivery(fast());
    let exporter = PyroscopeExporter::new(config).unwrap();
    let window = recent_checkout();
    exporter.export(Arc::new(window.clone())).unwrap();
    exporter.force_flush().unwrap();

    let reqs = server.wait_for(1, Duration::from_secs(5));
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/push.v1.PusherService/Push")
    );
    assert_eq!(r.header("content-type"), Some("application/proto"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("x-scope-orgid"), Some("team-a"));
    assert_eq!(r.header("x-extra"), Some("yes"));
    let push = decode(r);
    assert_eq!(push.series.len(), 2, "process_cpu and wall");

    let cpu = labels(&push.series[0]);
    assert_eq!(cpu["__name__"], "process_cpu");
    assert_eq!(cpu["service_name"], "checkout");
    assert_eq!(cpu["service_version"], "1.4.2");
    assert_eq!(cpu["deployment_environment"], "prod");
    assert_eq!(cpu["instance"], "host-1/pid 42");
    assert_eq!(cpu["region"], "eu-west-1");
    assert!(cpu.len() <= 30);
    assert_eq!(labels(&push.series[1])["__name__"], "wall");
    for s in &push.series {
        assert_eq!(s.samples.len(), 1);
        assert_eq!(s.samples[0].id.len(), 36, "a uuid");
    }

    // CPU: only samples on CPU, span_id = the local root for both spans.
    let (rows, types) = samples(&push.series[0].samples[0].raw_profile);
    assert_eq!(
        types,
        vec![
            ("samples".into(), "count".into()),
            ("cpu".into(), "nanoseconds".into())
        ]
    );
    let total: i64 = rows.iter().map(|r| r.3).sum();
    assert_eq!(total as u64, window.total_cpu_samples());
    let mut by_span: HashMap<String, i64> = HashMap::new();
    for (span, trace, route, v) in &rows {
        if !span.is_empty() {
            assert_eq!(trace, TRACE);
            assert_eq!(route, "/checkout/{id}");
        }
        *by_span.entry(span.clone()).or_default() += v;
    }
    assert_eq!(by_span.get(ROOT), Some(&(55 + 2 + 12)));
    assert!(!by_span.contains_key(CHILD));

    // Wall: every sample, background included.
    let (rows, types) = samples(&push.series[1].samples[0].raw_profile);
    assert_eq!(types[1], ("wall".into(), "nanoseconds".into()));
    assert_eq!(
        rows.iter().map(|r| r.3).sum::<i64>() as u64,
        window.total_wall_samples()
    );
    assert!(rows.iter().any(|r| r.0.is_empty() && r.2 == "background"));

    exporter
        .shutdown_with_timeout(Duration::from_secs(2))
        .unwrap();
    let stats = exporter.stats();
    assert_eq!(
        (stats.windows, stats.profiles, stats.delivery.sent),
        (1, 2, 1)
    );
    assert_eq!(stats.delivery.dropped(), 0);
}

#[test]
fn span_scope_all_keeps_the_innermost_span() {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let config = PyroscopeConfig::new(&server.url())
        .unwrap()
        .with_span_scope(SpanScope::All)
        .with_delivery(fast());
    let exporter = PyroscopeExporter::new(config).unwrap();
    exporter.export(Arc::new(recent_checkout())).unwrap();
    exporter.force_flush().unwrap();
    let push = decode(&server.wait_for(1, Duration::from_secs(5))[0]);
    let (rows, _) = samples(&push.series[0].samples[0].raw_profile);
    let child: i64 = rows.iter().filter(|r| r.0 == CHILD).map(|r| r.3).sum();
    let root: i64 = rows.iter().filter(|r| r.0 == ROOT).map(|r| r.3).sum();
    assert_eq!((child, root), (55 + 12, 2));
}
