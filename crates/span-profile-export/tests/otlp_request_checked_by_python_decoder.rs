//! The OTLP exporter's requests, decoded by our Rust types and by the Python
//! `opentelemetry-proto` package (an independent decoder): zero rows, 16/8-byte link ids,
//! index bounds, and every sample's stack, link, attributes and value as in the window.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::python::{script, venv};
use common::server::{CaptureServer, Reply};
use common::{recent_checkout, ROOT, TRACE};
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use prost::Message;
use span_profile_core::SpanScope;
use span_profile_core::{Exporter, Profile};
use span_profile_export::otlp::{OtlpConfig, OtlpExporter};
use span_profile_export::TRUNCATED_FRAME;

type Rows = BTreeMap<(Vec<String>, String, String, String, String), i64>;

/// What the window should give: (leaf-first names, trace, span, route, thread) → value.
fn expected(
    p: &Profile,
    scope: SpanScope,
    value: impl Fn(&span_profile_core::ProfileSample) -> u64,
) -> Rows {
    let mut out = Rows::new();
    for s in &p.samples {
        let v = value(s);
        if v == 0 {
            continue;
        }
        let mut names: Vec<String> = p
            .stack_frames(s.stack)
            .map(|f| f.function.clone())
            .collect();
        if p.stacks[s.stack as usize].truncated {
            names.push(TRUNCATED_FRAME.into());
        }
        let (t, sp) = match s.span {
            Some(c) => {
                let span = if scope == SpanScope::LocalRoot {
                    c.local_root_span_id
                } else {
                    c.span_id
                };
                (c.trace_id.to_string(), span.to_string())
            }
            None => ("0".repeat(32), "0".repeat(16)),
        };
        *out.entry((names, t, sp, s.route.to_string(), s.thread_name.to_string()))
            .or_default() += v as i64;
    }
    out
}

fn rows(summary: &serde_json::Value) -> Rows {
    let mut out = Rows::new();
    for s in summary["samples"].as_array().unwrap() {
        let names = s[0]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        let attrs = &s[4];
        let key = (
            names,
            s[1].as_str().unwrap().to_string(),
            s[2].as_str().unwrap().to_string(),
            attrs["http.route"].as_str().unwrap().to_string(),
            attrs["thread.name"].as_str().unwrap().to_string(),
        );
        *out.entry(key).or_default() += s[3].as_i64().unwrap();
    }
    out
}

fn capture(scope: SpanScope) -> (Profile, Vec<u8>, common::server::Captured) {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let config = OtlpConfig::new(&server.url())
        .unwrap()
        .with_span_scope(scope)
        .with_header("x-tenant", "t1");
    let e = OtlpExporter::new(config).unwrap();
    let window = recent_checkout();
    e.export(Arc::new(window.clone())).unwrap();
    e.force_flush().unwrap();
    let r = server.wait_for(1, Duration::from_secs(5)).remove(0);
    (window, r.plain_body(), r)
}

#[test]
fn rust_decoder_sees_the_documented_shape() {
    let (window, body, r) = capture(SpanScope::All);
    assert_eq!(r.path, "/v1development/profiles");
    assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("x-tenant"), Some("t1"));
    let req = ExportProfilesServiceRequest::decode(body.as_slice()).unwrap();
    let d = req.dictionary.as_ref().unwrap();
    let s = |i: i32| d.string_table[i as usize].as_str();
    let profiles = &req.resource_profiles[0].scope_profiles[0].profiles;
    assert_eq!(profiles.len(), 2, "cpu and wall");
    let cpu = &profiles[0];
    let st = cpu.sample_type.unwrap();
    let pt = cpu.period_type.unwrap();
    assert_eq!(
        (s(st.type_strindex), s(st.unit_strindex)),
        ("samples", "count")
    );
    assert_eq!(
        (s(pt.type_strindex), s(pt.unit_strindex)),
        ("cpu", "nanoseconds")
    );
    assert_eq!(cpu.period, 10_000_000);
    assert_eq!(cpu.profile_id.len(), 16);
    assert_eq!(cpu.time_unix_nano, window.start_unix_ns);
    let wall_pt = profiles[1].period_type.unwrap();
    assert_eq!(s(wall_pt.type_strindex), "wall");
    let link = &d.link_table[cpu.samples[0].link_index as usize];
    assert_eq!(hex(&link.trace_id), TRACE);
    let total: i64 = cpu.samples.iter().map(|x| x.values[0]).sum();
    assert_eq!(total as u64, window.total_cpu_samples());
    let res = req.resource_profiles[0].resource.as_ref().unwrap();
    assert!(res.attributes.iter().any(|kv| kv.key == "service.name"));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn python_decoder_agrees_for_both_span_scopes() {
    let Some(python) = venv(
        "otlp",
        &["opentelemetry-proto==1.45.2"],
        "opentelemetry.proto",
    ) else {
        return;
    };
    for scope in [SpanScope::All, SpanScope::LocalRoot] {
        let (window, body, _) = capture(scope);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("req.bin");
        std::fs::write(&file, &body).unwrap();
        let out = Command::new(&python)
            .arg(script("otlp_check.py"))
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let req = &summary[0];
        assert_eq!(req["resource"]["service.name"], "checkout");
        assert_eq!(req["resource"]["service.version"], "1.4.2");
        let cpu = &req["profiles"][0];
        assert_eq!(cpu["sample_type"], serde_json::json!(["samples", "count"]));
        assert_eq!(
            cpu["period_type"],
            serde_json::json!(["cpu", "nanoseconds"])
        );
        assert_eq!(cpu["period"], 10_000_000);
        assert_eq!(
            rows(cpu),
            expected(&window, scope, |s| s.cpu_samples),
            "{scope:?}"
        );
        assert_eq!(
            rows(&req["profiles"][1]),
            expected(&window, scope, |s| s.wall_samples)
        );
        if scope == SpanScope::LocalRoot {
            assert!(rows(cpu)
                .keys()
                .all(|k| k.2 == ROOT || k.2 == "0".repeat(16)));
        }
    }
}
