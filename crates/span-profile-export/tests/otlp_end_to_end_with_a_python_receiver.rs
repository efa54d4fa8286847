//! End to end: the real profiler, `exporter_for_output("otlp+http://…")`, and a receiver
//! written in Python with the `opentelemetry-proto` classes. Every sampled CPU and wall
//! sample arrives, with its span link, typed samples/count with `period` = 1e9/Hz; the
//! receiver's partial success is counted and reported.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::python::{script, venv};
use span_profile_core::{ActiveSpan, ExecutionKey, Profiler, SpanContext, SpanId, TraceId};
use span_profile_export::otlp::{OtlpConfig, OtlpExporter};
use span_profile_export::{exporter_for_output, ExporterEnv};
use span_profile_test::{FakeWalker, InMemoryExporter};

struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn profiler_to_python_receiver() {
    let Some(python) = venv(
        "otlp",
        &["opentelemetry-proto==1.45.2"],
        "opentelemetry.proto",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("received.jsonl");
    let mut child = Child(
        Command::new(&python)
            .arg(script("otlp_receiver.py"))
            .arg(&out)
            // Reject one profile of the first request from the typed exporter.
            .args(["1", "x-exporter"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut port = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    let port = port.trim();

    // The one place outputs are parsed: a boxed exporter for the profiler...
    let env = ExporterEnv::from_pairs([("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=t9")]);
    let url = format!("otlp+http://127.0.0.1:{port}");
    let boxed = exporter_for_output(&url, &env).unwrap();
    // ...and a typed one beside it, for its counters.
    let typed = std::sync::Arc::new(
        OtlpExporter::new(
            OtlpConfig::from_env(&format!("http://127.0.0.1:{port}"), &env)
                .unwrap()
                .with_header("x-exporter", "typed"),
        )
        .unwrap(),
    );
    let memory = InMemoryExporter::default();
    let builder = Profiler::builder();
    let registry = builder.registry().clone();
    let profiler = builder
        .with_service("checkout")
        .with_sample_rate_hz(200)
        .with_window(Duration::from_millis(250))
        .with_walker(FakeWalker::threads(2, 5).with_registry(registry.clone()))
        .with_exporter(memory.clone())
        .with_shared_exporter(std::sync::Arc::from(boxed))
        .with_shared_exporter(typed.clone())
        .start()
        .unwrap();
    let ctx = SpanContext {
        trace_id: TraceId::from_u128(0xfeed).unwrap(),
        span_id: SpanId::from_u64(0x22).unwrap(),
        local_root_span_id: SpanId::from_u64(0x21).unwrap(),
    };
    let bg = span_profile_core::labels::LabelValues::BACKGROUND;
    profiler
        .registry()
        .enter(ExecutionKey::thread(1), ActiveSpan { ctx, route: bg });
    std::thread::sleep(Duration::from_millis(800));
    profiler
        .shutdown_with_timeout(Duration::from_secs(10))
        .unwrap();

    let windows = memory.profiles();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        2 * windows.len(),
        "each window from both exporters"
    );
    // (profile, leaf, span) → samples, from the sampler and from the receiver (each
    // exporter sent every window, so the receiver saw each sample twice).
    let mut want: BTreeMap<(usize, String, String), i64> = BTreeMap::new();
    for w in &windows {
        for s in &w.samples {
            let leaf = w.stack_frames(s.stack).next().unwrap().function.clone();
            let span = s
                .span
                .map(|c| c.span_id.to_string())
                .unwrap_or("0".repeat(16));
            for (profile, v) in [(0, s.cpu_samples), (1, s.wall_samples)] {
                if v > 0 {
                    *want
                        .entry((profile, leaf.clone(), span.clone()))
                        .or_default() += 2 * v as i64;
                }
            }
        }
    }
    let mut got: BTreeMap<(usize, String, String), i64> = BTreeMap::new();
    for l in &lines {
        assert_eq!(l["headers"]["x-tenant"], "t9");
        assert_eq!(l["headers"]["content-encoding"], "gzip");
        for (profile, period_type) in [(0, "cpu"), (1, "wall")] {
            let p = &l["profiles"][profile];
            assert_eq!(p["sample_type"], serde_json::json!(["samples", "count"]));
            assert_eq!(
                p["period_type"],
                serde_json::json!([period_type, "nanoseconds"])
            );
            assert_eq!(p["period"], 1_000_000_000 / 200, "1e9 / Hz");
            for s in p["samples"].as_array().unwrap() {
                let leaf = s[0][0].as_str().unwrap().to_string();
                *got.entry((profile, leaf, s[2].as_str().unwrap().to_string()))
                    .or_default() += s[3].as_i64().unwrap();
            }
        }
    }
    assert_eq!(got, want);
    assert!(got.contains_key(&(0, "leaf_0".to_string(), "0000000000000022".to_string())));
    // The receiver rejected one profile of the typed exporter's first request.
    let d = typed.stats().delivery;
    assert_eq!(d.sent as usize, windows.len(), "{d:?}");
    assert_eq!(d.rejected_items, 1, "{d:?}");
    let err = typed.last_error().unwrap_or_default();
    assert!(err.contains("profile too old"), "{err}");
}
