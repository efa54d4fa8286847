//! Registry costs: a span hook's enter+exit pair, and the sampler's lookup with 64 threads
//! registered. Targets: enter+exit ≤ 100 ns, lookup ≤ 30 ns.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use span_profile_core::labels::LabelValues;
use span_profile_core::{
    ActiveSpan, ActiveSpanRegistry, ExecutionKey, SpanContext, SpanId, TraceId,
};

fn span(id: u64) -> ActiveSpan {
    ActiveSpan {
        ctx: SpanContext {
            trace_id: TraceId::from_u128(u128::from(id) << 64 | 7).unwrap(),
            span_id: SpanId::from_u64(id).unwrap(),
            local_root_span_id: SpanId::from_u64(id).unwrap(),
        },
        route: LabelValues::BACKGROUND,
    }
}

fn registry(c: &mut Criterion) {
    let reg = ActiveSpanRegistry::default();
    // 64 threads, each inside a span, as in a busy service.
    for t in 1..=64u64 {
        reg.enter(ExecutionKey::thread(t), span(t));
    }
    let key = ExecutionKey::thread(1_000);
    let s = span(99);
    c.bench_function("registry/enter_exit_pair", |b| {
        b.iter(|| {
            reg.enter(black_box(key), black_box(s));
            reg.exit(black_box(key), black_box(s.ctx.span_id));
        })
    });
    c.bench_function("registry/nested_enter_exit_pair", |b| {
        // A key that already has a span: the common case of a child span.
        let k = ExecutionKey::thread(5);
        b.iter(|| {
            reg.enter(black_box(k), black_box(s));
            reg.exit(black_box(k), black_box(s.ctx.span_id));
        })
    });
    // A key never seen before each time (asyncio tasks): its entry is inserted and, with the
    // shards past their kept-entry bound, removed again.
    let mut fresh = 10_000u64;
    c.bench_function("registry/enter_exit_pair_new_key", |b| {
        b.iter(|| {
            fresh += 1;
            let k = ExecutionKey::thread(fresh);
            reg.enter(black_box(k), black_box(s));
            reg.exit(black_box(k), black_box(s.ctx.span_id));
        })
    });
    let mut t = 0u64;
    c.bench_function("registry/lookup_hit_64_threads", |b| {
        b.iter(|| {
            t = t % 64 + 1;
            black_box(reg.current(black_box(ExecutionKey::thread(t))))
        })
    });
    c.bench_function("registry/lookup_miss_64_threads", |b| {
        b.iter(|| black_box(reg.current(black_box(ExecutionKey::thread(5_000)))))
    });
}

criterion_group!(benches, registry);
criterion_main!(benches);
