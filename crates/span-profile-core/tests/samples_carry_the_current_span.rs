//! The runtime stamps each sampled stack with the span current on its key, and labels threads
//! without a span `background`.

use std::sync::Arc;
use std::time::Duration;

use span_profile_core::{ExecutionKey, Profiler, SpanId, SpanStart, TraceId};
use span_profile_test::{FakeWalker, InMemoryExporter};

#[test]
fn span_ids_routes_and_background() {
    let exporter = InMemoryExporter::default();
    let builder = Profiler::builder();
    let registry = builder.registry().clone();
    let profiler = builder
        .with_service("checkout")
        .with_sample_rate_hz(200)
        .with_walker(FakeWalker::threads(2, 5).with_registry(registry.clone()))
        .with_exporter(exporter.clone())
        .start()
        .unwrap();
    let trace_id = TraceId::from_u128(0x1234).unwrap();
    let root = profiler.span_table().start(SpanStart {
        trace_id,
        span_id: SpanId::from_u64(10).unwrap(),
        parent_span_id: None,
        parent_is_remote: false,
        name: "POST /checkout",
        route: Some("/checkout"),
        start_unix_ns: 1,
    });
    let child = profiler.span_table().start(SpanStart {
        trace_id,
        span_id: SpanId::from_u64(11).unwrap(),
        parent_span_id: Some(SpanId::from_u64(10).unwrap()),
        parent_is_remote: false,
        name: "pricing.calculate",
        route: None,
        start_unix_ns: 2,
    });
    // Thread 1 (leaf_0) runs the child span; thread 2 (leaf_1) has no span.
    profiler.registry().enter(ExecutionKey::thread(1), root);
    profiler.registry().enter(ExecutionKey::thread(1), child);
    std::thread::sleep(Duration::from_millis(300));
    profiler
        .span_table()
        .end(SpanId::from_u64(11).unwrap(), 3, None);
    profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();

    let windows = exporter.profiles();
    let p: Vec<_> = windows
        .iter()
        .flat_map(|w| w.samples.iter().map(move |s| (w.clone(), s.clone())))
        .collect();
    assert!(!p.is_empty());
    for (w, s) in &p {
        let leaf = &w.stack_frames(s.stack).next().unwrap().function;
        match leaf.as_str() {
            "leaf_0" => {
                let c = s.span.expect("thread 1 is inside a span");
                assert_eq!(c.span_id.to_u64(), 11);
                assert_eq!(c.local_root_span_id.to_u64(), 10);
                assert_eq!(c.trace_id, trace_id);
                assert_eq!(&*s.route, "/checkout");
            }
            "leaf_1" => {
                assert_eq!(s.span, None);
                assert_eq!(&*s.route, "background");
            }
            other => panic!("unexpected leaf {other}"),
        }
        assert!(s.thread_name.starts_with("worker-"));
    }
    let spans: Vec<_> = windows.iter().flat_map(|w| w.spans.iter()).collect();
    assert!(spans
        .iter()
        .any(|s| &*s.name == "pricing.calculate" && s.end_unix_ns == Some(3)));
    let _ = Arc::strong_count(&windows[0]);
}
