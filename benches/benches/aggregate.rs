//! Aggregator throughput with 10k distinct stacks (depth 20) and span-labelled samples.
//! Target: ≥ 5 M samples/s on one core.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use span_profile_core::internal::{Sample, WindowAggregator};
use span_profile_core::labels::LabelValues;
use span_profile_core::{Frame, RawFrame, SpanContext, SpanId, TraceId};

const STACKS: usize = 10_000;
const DEPTH: usize = 20;
const BATCH: usize = 100_000;

fn aggregate(c: &mut Criterion) {
    let stacks: Vec<Vec<RawFrame>> = (0..STACKS)
        .map(|s| {
            (0..DEPTH)
                .map(|d| RawFrame {
                    id: ((s * 7 + d * 13) % 5_000) as u64,
                    line: d as u32,
                })
                .collect()
        })
        .collect();
    let mut agg = WindowAggregator::default();
    let thread = agg.intern_thread_name("worker");
    let ids: Vec<_> = stacks.iter().map(|s| agg.intern_stack(s, false)).collect();
    agg.resolve_frames(&mut |r| Frame::new(format!("f{}", r.id), "bench.py", r.line));
    let spans: Vec<Option<SpanContext>> = (0..64u64)
        .map(|i| {
            (i % 2 == 0).then(|| SpanContext {
                trace_id: TraceId::from_u128(u128::from(i) + 1).unwrap(),
                span_id: SpanId::from_u64(i + 1).unwrap(),
                local_root_span_id: SpanId::from_u64(1).unwrap(),
            })
        })
        .collect();
    // A pseudo-random but fixed sample sequence over the stacks and spans.
    let seq: Vec<(usize, usize)> = (0..BATCH)
        .map(|i| ((i * 7_919) % STACKS, (i * 31) % 64))
        .collect();

    let mut g = c.benchmark_group("aggregate");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("add_10k_stacks", |b| {
        b.iter(|| {
            for &(s, sp) in &seq {
                agg.add(
                    Sample {
                        stack: ids[s],
                        span: spans[sp],
                        route: LabelValues::BACKGROUND,
                        thread,
                        task: None,
                    },
                    10_000_000,
                    10_000_000,
                    1,
                );
            }
            black_box(agg.rows())
        })
    });
    g.bench_function("intern_and_add_10k_stacks", |b| {
        // The full per-sample path: find the stack by its raw frames, then count it.
        b.iter(|| {
            for &(s, sp) in &seq {
                let st = agg.intern_stack(&stacks[s], false);
                agg.add(
                    Sample {
                        stack: st,
                        span: spans[sp],
                        route: LabelValues::BACKGROUND,
                        thread,
                        task: None,
                    },
                    10_000_000,
                    10_000_000,
                    1,
                );
            }
            black_box(agg.rows())
        })
    });
    g.finish();
}

criterion_group!(benches, aggregate);
criterion_main!(benches);
