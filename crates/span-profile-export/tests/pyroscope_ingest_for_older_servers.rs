//! `Protocol::Ingest` sends each profile to the legacy `/ingest` with the app name and
//! labels in `name`, the window in `from`/`until`, and a gzip pprof body.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::recent_checkout;
use common::server::{gunzip, CaptureServer, Reply};
use prost::Message;
use span_profile_core::Exporter;
use span_profile_export::pprof;
use span_profile_export::pyroscope::{Protocol, PyroscopeConfig, PyroscopeExporter};

fn query(path: &str) -> Vec<(String, String)> {
    let q = path.split_once('?').unwrap().1;
    q.split('&')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            let mut out = Vec::new();
            let b = v.as_bytes();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'%' {
                    out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
                    i += 3;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            (k.to_string(), String::from_utf8(out).unwrap())
        })
        .collect()
}

#[test]
fn ingest_requests_carry_name_labels_and_pprof() {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let config = PyroscopeConfig::new(&server.url())
        .unwrap()
        .with_protocol(Protocol::Ingest)
        .with_wall(true);
    let e = PyroscopeExporter::new(config).unwrap();
    let window = recent_checkout();
    e.export(Arc::new(window.clone())).unwrap();
    e.force_flush().unwrap();
    let reqs = server.wait_for(2, Duration::from_secs(5));
    assert_eq!(reqs.len(), 2, "cpu and wall");
    let q = query(&reqs[0].path);
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert!(reqs[0].path.starts_with("/ingest?"));
    let name = get("name").unwrap();
    assert!(name.starts_with("checkout{"), "{name}");
    assert!(name.contains("service_version=1.4.2"), "{name}");
    assert!(!name.contains("__name__"), "{name}");
    assert_eq!(get("format"), Some("pprof"));
    assert_eq!(
        get("from"),
        Some((window.start_unix_ns / 1_000_000_000).to_string().as_str())
    );
    assert_eq!(get("sampleRate"), Some("100"));
    let p = pprof::Profile::decode(gunzip(&reqs[0].body).as_slice()).unwrap();
    assert_eq!(p.string_table[p.sample_type[1].r#type as usize], "cpu");
    let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(total as u64, window.total_cpu_samples());
}
