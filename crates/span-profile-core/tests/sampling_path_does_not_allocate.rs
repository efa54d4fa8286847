//! After warm-up, a sampler tick (walk with a registry lookup, stamping, aggregation) allocates
//! nothing: the rule of the hot path, proved with a counting allocator (as pprof-rs does).

use std::sync::Arc;

use span_profile_core::internal::SamplerHarness;
use span_profile_core::{ActiveSpanRegistry, ExecutionKey, SpanId, SpanStart, SpanTable, TraceId};
use span_profile_test::{counting_allocator, FakeWalker};

counting_allocator!(ALLOC);

#[test]
fn the_counter_sees_allocations() {
    let (v, n) = ALLOC.track(|| Vec::<u64>::with_capacity(16));
    assert!(
        n >= 1 && v.capacity() >= 16,
        "the counting allocator must count, or the test below proves nothing"
    );
}

#[test]
fn a_warm_tick_allocates_nothing() {
    let registry = Arc::new(ActiveSpanRegistry::default());
    let spans = Arc::new(SpanTable::default());
    // Half of the 64 threads are inside a span.
    for t in 0..32u64 {
        let active = spans.start(SpanStart {
            trace_id: TraceId::from_u128(u128::from(t) + 1).unwrap(),
            span_id: SpanId::from_u64(t + 1).unwrap(),
            parent_span_id: None,
            parent_is_remote: false,
            name: "work",
            route: Some("/orders/{id}"),
            start_unix_ns: 0,
        });
        registry.enter(ExecutionKey::thread(t + 1), active);
    }
    let mut h = SamplerHarness::new(
        FakeWalker::threads(64, 30).with_registry(registry.clone()),
        registry,
        spans,
        100,
    );
    for _ in 0..10 {
        h.tick();
    }
    let ((), allocations) = ALLOC.track(|| {
        for _ in 0..100 {
            h.tick();
        }
    });
    assert_eq!(
        allocations, 0,
        "the sampling path allocated {allocations} times in 100 warm ticks"
    );
    let window = h.close_window().expect("a window");
    assert_eq!(window.total_wall_samples(), 110 * 64);
}
