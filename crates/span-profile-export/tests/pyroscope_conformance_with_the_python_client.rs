//! Conformance: the real `pyroscope-io` Python client (pip) and our exporter send to the same
//! capture server with the same settings; their requests have the same shape: path, content
//! type and encoding, auth and tenant headers, the label names the client sets, the profile
//! type and a CPU sample type in nanoseconds.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::python::{script, venv};
use common::recent_checkout;
use common::server::{gunzip, CaptureServer, Captured, Reply};
use prost::Message;
use span_profile_core::Exporter;
use span_profile_export::pprof;
use span_profile_export::pyroscope::push::PushRequest;
use span_profile_export::pyroscope::{Auth, PyroscopeConfig, PyroscopeExporter};

#[derive(Debug)]
struct Shape {
    path: String,
    headers: Vec<(String, Option<String>)>,
    label_names: BTreeSet<String>,
    name: String,
    sample_types: BTreeSet<(String, String)>,
    id_len: usize,
}

fn shape(r: &Captured) -> Shape {
    let push = PushRequest::decode(r.plain_body().as_slice()).unwrap();
    let series = &push.series[0];
    let raw = &series.samples[0].raw_profile;
    let raw = if raw.starts_with(&[0x1f, 0x8b]) {
        gunzip(raw)
    } else {
        raw.clone()
    };
    let p = pprof::Profile::decode(raw.as_slice()).unwrap();
    let s = |i: i64| p.string_table[i as usize].clone();
    Shape {
        path: r.path.clone(),
        headers: [
            "content-type",
            "content-encoding",
            "authorization",
            "x-scope-orgid",
        ]
        .iter()
        .map(|h| (h.to_string(), r.header(h).map(str::to_string)))
        .collect(),
        label_names: series.labels.iter().map(|l| l.name.clone()).collect(),
        name: series
            .labels
            .iter()
            .find(|l| l.name == "__name__")
            .unwrap()
            .value
            .clone(),
        sample_types: p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect(),
        id_len: series.samples[0].id.len(),
    }
}

#[test]
fn our_requests_have_the_python_clients_shape() {
    let Some(python) = venv("pyroscope", &["pyroscope-io"], "pyroscope") else {
        return;
    };
    let server = CaptureServer::start(|_, _| Reply::ok());
    let out = Command::new(&python)
        .arg(script("pyroscope_client.py"))
        .arg(server.url())
        .arg("1.5")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = server.wait_for(1, Duration::from_secs(5));
    assert!(!theirs.is_empty(), "the Python client sent nothing");
    let theirs = shape(&theirs[0]);

    let config = PyroscopeConfig::new(&server.url())
        .unwrap()
        .with_auth(Auth::Basic {
            user: "user".into(),
            password: "pass".into(),
        })
        .with_tenant_id("team-a")
        .with_tag("region", "eu-west-1");
    let e = PyroscopeExporter::new(config).unwrap();
    e.export(Arc::new(recent_checkout())).unwrap();
    e.force_flush().unwrap();
    let all = server.wait_for(2, Duration::from_secs(5));
    let ours = shape(all.last().unwrap());

    assert_eq!(ours.path, theirs.path);
    assert_eq!(ours.headers, theirs.headers);
    assert_eq!(ours.name, theirs.name);
    assert_eq!(ours.id_len, theirs.id_len);
    // Every label name the client sets that describes the service is ours too; the client's
    // own extras (its scope and runtime names) are listed, not required.
    for l in ["__name__", "service_name", "region"] {
        assert!(theirs.label_names.contains(l), "{theirs:?}");
        assert!(ours.label_names.contains(l), "{ours:?}");
    }
    let extras: Vec<_> = theirs.label_names.difference(&ours.label_names).collect();
    eprintln!("labels only the Python client sets: {extras:?}");
    // A CPU type in nanoseconds, which Pyroscope turns into process_cpu:cpu:nanoseconds.
    let cpu = ("cpu".to_string(), "nanoseconds".to_string());
    assert!(theirs.sample_types.contains(&cpu), "{theirs:?}");
    assert!(ours.sample_types.contains(&cpu), "{ours:?}");
}
