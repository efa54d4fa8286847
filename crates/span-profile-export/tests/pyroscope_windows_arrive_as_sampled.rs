//! End to end with the real profiler: what the sampler produced (kept by an in-memory
//! exporter beside ours) is what the Pyroscope server receives, sample for sample.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::server::{CaptureServer, Reply};
use prost::Message;
use span_profile_core::{ActiveSpan, ExecutionKey, Profiler, SpanContext, SpanId, TraceId};
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pprof;
use span_profile_export::pyroscope::push::PushRequest;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};
use span_profile_test::{FakeWalker, InMemoryExporter};

#[test]
fn per_span_cpu_samples_match_the_sampler() {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let delivery = DeliveryConfig::default().with_timeout(Duration::from_secs(2));
    let pyro = PyroscopeExporter::new(
        PyroscopeConfig::new(&server.url())
            .unwrap()
            .with_delivery(delivery),
    )
    .unwrap();
    let memory = InMemoryExporter::default();
    let builder = Profiler::builder();
    let registry = builder.registry().clone();
    let profiler = builder
        .with_service("checkout")
        .with_sample_rate_hz(200)
        .with_window(Duration::from_millis(200))
        .with_walker(FakeWalker::threads(3, 6).with_registry(registry.clone()))
        .with_exporter(memory.clone())
        .with_exporter(pyro)
        .start()
        .unwrap();
    let root = SpanContext {
        trace_id: TraceId::from_u128(0xabc).unwrap(),
        span_id: SpanId::from_u64(0x10).unwrap(),
        local_root_span_id: SpanId::from_u64(0x10).unwrap(),
    };
    let child = SpanContext {
        span_id: SpanId::from_u64(0x11).unwrap(),
        ..root
    };
    let reg = profiler.registry();
    let bg = span_profile_core::labels::LabelValues::BACKGROUND;
    reg.enter(
        ExecutionKey::thread(1),
        ActiveSpan {
            ctx: root,
            route: bg,
        },
    );
    reg.enter(
        ExecutionKey::thread(1),
        ActiveSpan {
            ctx: child,
            route: bg,
        },
    );
    reg.enter(
        ExecutionKey::thread(2),
        ActiveSpan {
            ctx: root,
            route: bg,
        },
    );
    std::thread::sleep(Duration::from_millis(700));
    profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();

    // What the sampler produced, by (leaf function, span_id as Pyroscope sees it: local root).
    let mut want: HashMap<(String, String), i64> = HashMap::new();
    for w in memory.profiles() {
        for s in &w.samples {
            let leaf = w.stack_frames(s.stack).next().unwrap().function.clone();
            let span = s
                .span
                .map(|c| c.local_root_span_id.to_string())
                .unwrap_or_default();
            *want.entry((leaf, span)).or_default() += s.cpu_samples as i64;
        }
    }
    let mut got: HashMap<(String, String), i64> = HashMap::new();
    for r in server.wait_for(1, Duration::from_secs(2)) {
        let push = PushRequest::decode(r.plain_body().as_slice()).unwrap();
        for series in &push.series {
            for raw in &series.samples {
                let p = pprof::Profile::decode(raw.raw_profile.as_slice()).unwrap();
                let s = |i: i64| p.string_table[i as usize].clone();
                for x in &p.sample {
                    let loc = &p.location[(x.location_id[0] - 1) as usize];
                    let f = &p.function[(loc.line[0].function_id - 1) as usize];
                    let span = x
                        .label
                        .iter()
                        .find(|l| s(l.key) == "span_id")
                        .map(|l| s(l.str))
                        .unwrap_or_default();
                    *got.entry((s(f.name), span)).or_default() += x.value[0];
                }
            }
        }
    }
    assert!(want.values().sum::<i64>() > 50, "{want:?}");
    assert_eq!(got, want);
    assert!(got.contains_key(&("leaf_0".into(), "0000000000000010".into())));
}
