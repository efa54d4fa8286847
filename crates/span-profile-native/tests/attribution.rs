//! Ground truth: each span runs a uniquely named function, and (nearly) every sample of that
//! function carries that span, through the real pipeline (core Profiler, otel::install, an
//! opentelemetry_sdk tracer, the in-memory exporter). Each thread's spans are children of one
//! local root with an `http.route` that stays open across many short windows, so a sample's
//! route must come from the span read at the sample instant, not from the root's record at
//! window close.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::{TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracerProvider;
use span_profile_core::{otel, Profile, Profiler, SpanId};
use span_profile_native::NativeWalker;
use span_profile_test::InMemoryExporter;

leaf_fn!(work_0);
leaf_fn!(work_1);
leaf_fn!(work_2);
leaf_fn!(between_spans);

const WORK: [fn(Duration); 3] = [work_0, work_1, work_2];

/// Per function: samples whose span is one of that function's spans, all its samples, samples
/// with no span, and samples with that function's span and route.
pub fn tally(profiles: &[Arc<Profile>], prefix: &str) -> HashMap<String, (u64, u64, u64, u64)> {
    let mut names: HashMap<SpanId, String> = HashMap::new();
    for p in profiles {
        for s in &p.spans {
            names.insert(s.span_id, s.name.to_string());
        }
    }
    let mut out: HashMap<String, (u64, u64, u64, u64)> = HashMap::new();
    for p in profiles {
        for s in &p.samples {
            let Some(leaf) = p.stack_frames(s.stack).next() else {
                continue;
            };
            let Some(f) = leaf
                .function
                .rsplit("::")
                .next()
                .filter(|f| f.starts_with(prefix))
            else {
                continue;
            };
            let e = out.entry(f.to_string()).or_default();
            e.1 += s.wall_samples;
            match s.span.and_then(|c| names.get(&c.span_id)) {
                Some(n) if n.strip_prefix("span-") == f.strip_prefix(prefix) => {
                    e.0 += s.wall_samples;
                    if s.route.strip_prefix("/route/") == f.strip_prefix(prefix) {
                        e.3 += s.wall_samples;
                    }
                }
                None if s.span.is_none() => e.2 += s.wall_samples,
                _ => {}
            }
        }
    }
    out
}

#[test]
fn every_sample_of_a_spans_function_carries_that_span() {
    let exporter = InMemoryExporter::default();
    let profiler = NativeWalker::builder()
        .install_in(
            Profiler::builder()
                .with_sample_rate_hz(100)
                .with_window(Duration::from_millis(500))
                .with_overhead_budget(None),
        )
        .unwrap()
        .with_exporter(exporter.clone())
        .start()
        .unwrap();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(otel::install(&profiler))
        .build();
    let tracer = Arc::new(provider.tracer("attribution"));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let (tracer, stop) = (tracer.clone(), stop.clone());
            std::thread::spawn(move || {
                let _g = span_profile_native::register_current_thread().unwrap();
                let root = tracer
                    .span_builder(format!("root-{i}"))
                    .with_attributes([KeyValue::new("http.route", format!("/route/{i}"))])
                    .start(tracer.as_ref());
                let root = Context::current_with_span(root);
                let deadline = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let attached = root.clone().attach();
                    tracer.in_span(format!("span-{i}"), |_cx| {
                        WORK[i](Duration::from_millis(20))
                    });
                    drop(attached);
                    between_spans(Duration::from_millis(3));
                }
            })
        })
        .collect();
    // Enough samples of each function, however loaded the machine: stop on counts, not time.
    let end = Instant::now() + Duration::from_secs(25);
    while Instant::now() < end && span_profile_native::stats().samples < 600 {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    profiler
        .shutdown_with_timeout(Duration::from_secs(10))
        .unwrap();
    let profiles = exporter.profiles();
    if std::env::var_os("NATIVE_DEBUG").is_some() {
        let mut leaves: HashMap<String, u64> = HashMap::new();
        for p in &profiles {
            for s in &p.samples {
                let f: Vec<_> = p
                    .stack_frames(s.stack)
                    .take(3)
                    .map(|f| f.function.clone())
                    .collect();
                *leaves
                    .entry(format!("{f:?} cpu={}", s.cpu_samples))
                    .or_default() += s.wall_samples;
            }
        }
        eprintln!(
            "{leaves:#?} {:?}",
            profiles.iter().map(|p| &p.stats).collect::<Vec<_>>()
        );
    }
    let work = tally(&profiles, "work_");
    for i in 0..3 {
        let (right, all, _, routed) = work.get(&format!("work_{i}")).copied().unwrap_or_default();
        assert!(all >= 20, "work_{i}: only {all} samples ({work:?})");
        assert!(
            right * 100 >= all * 99,
            "work_{i}: {right} of {all} carry span-{i}"
        );
        assert!(
            routed * 100 >= all * 99,
            "work_{i}: {routed} of {all} carry span-{i} and /route/{i}"
        );
    }
    let between = tally(&profiles, "between_");
    let (_, all, none, _) = between.get("between_spans").copied().unwrap_or_default();
    assert!(
        none * 100 >= all * 95,
        "between_spans: {none} of {all} without a span"
    );
    let _ = provider.shutdown();
}
