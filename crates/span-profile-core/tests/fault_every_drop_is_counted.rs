//! Visible failure: every kind of drop a window reports (rows past the row cap, stacks cut at
//! the depth cap, threads skipped by a per-tick cap, failed walks, label values past a
//! cardinality cap, span records past the span table's cap, samples torn by a span change
//! mid-walk) is counted both in the window's `WindowStats` and, summed over the windows, in
//! `Profiler::stats()`. What the span registry loses (enters into a full table, unmatched
//! exits) is reported per window too, and adds up to the registry's own counters.

use std::sync::Arc;
use std::time::Duration;

use span_profile_core::{
    ActiveSpan, ActiveSpanRegistry, AggregatorLimits, ExecutionKey, Frame, Profiler, RawFrame,
    RawSample, SpanId, SpanSource, SpanStart, SpanTable, SpanTableLimits, StackSink, StackWalker,
    TraceId, WalkError,
};
use span_profile_test::InMemoryExporter;

/// Each tick: a truncated stack, a stack under a never-seen thread name, a new distinct stack
/// (to fill the row cap), a skipped thread and a failed walk.
#[derive(Debug, Default)]
struct Faulty {
    tick: u64,
    name: String,
}

impl StackWalker for Faulty {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        self.tick += 1;
        let deep = [RawFrame { id: 1, line: 1 }; 4];
        let fresh = [RawFrame {
            id: 100 + self.tick,
            line: 1,
        }];
        self.name = format!("thread-{}", self.tick);
        for (frames, truncated, name) in [
            (&deep[..], true, "main"),
            (&fresh[..], false, self.name.as_str()),
        ] {
            sink.sample(
                &RawSample::new(ExecutionKey::thread(1), frames, name)
                    .with_truncated(truncated)
                    .with_cpu_ns(10_000_000)
                    .with_span(SpanSource::Resolved(None)),
            );
        }
        sink.error(WalkError::Skipped);
        sink.error(WalkError::InvalidRead);
        sink.error(WalkError::Torn);
    }

    fn symbolize(&mut self, raw: RawFrame) -> Frame {
        Frame::new(format!("f{}", raw.id), "faulty.py", raw.line)
    }
}

#[test]
fn window_counters_and_profiler_stats_agree_on_every_drop() {
    let spans = Arc::new(SpanTable::with_limits(SpanTableLimits {
        max_open: 4,
        max_ended_per_window: 4,
        max_routes: 3,
        ..Default::default()
    }));
    for i in 1..=20u64 {
        spans.start(SpanStart {
            trace_id: TraceId::from_u128(u128::from(i)).unwrap(),
            span_id: SpanId::from_u64(i).unwrap(),
            parent_span_id: None,
            parent_is_remote: false,
            name: "s",
            route: Some(&format!("/route/{i}")),
            start_unix_ns: 1,
        });
    }
    let registry = Arc::new(ActiveSpanRegistry::with_capacity(64));
    let exporter = InMemoryExporter::default();
    let profiler = Profiler::builder()
        .with_registry(registry.clone())
        .with_sample_rate_hz(200)
        .with_overhead_budget(None)
        .with_window(Duration::from_millis(100))
        .with_limits(AggregatorLimits {
            max_rows: 4,
            max_thread_names: 4,
            ..Default::default()
        })
        .with_span_table(spans)
        .with_walker(Faulty::default())
        .with_exporter(exporter.clone())
        .start()
        .unwrap();
    // Span hooks overfill the registry (64 slots) and exit spans never entered.
    let active = |id: u64| ActiveSpan {
        ctx: span_profile_core::SpanContext {
            trace_id: TraceId::from_u128(7).unwrap(),
            span_id: SpanId::from_u64(id).unwrap(),
            local_root_span_id: SpanId::from_u64(id).unwrap(),
        },
        route: span_profile_core::labels::LabelValues::BACKGROUND,
    };
    for k in 0..200u64 {
        registry.enter(ExecutionKey::thread(1000 + k), active(k + 1));
        registry.exit(
            ExecutionKey::thread(5000 + k),
            SpanId::from_u64(k + 1).unwrap(),
        );
    }
    std::thread::sleep(Duration::from_millis(400));
    let stats = profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    let windows = exporter.profiles();
    let sum = |f: fn(&span_profile_core::WindowStats) -> u64| {
        windows.iter().map(|w| f(&w.stats)).sum::<u64>()
    };
    let pairs = [
        (
            "dropped_samples",
            stats.dropped_samples,
            sum(|s| s.dropped_samples),
        ),
        (
            "truncated_stacks",
            stats.truncated_stacks,
            sum(|s| s.truncated_stacks),
        ),
        (
            "skipped_threads",
            stats.skipped_threads,
            sum(|s| s.skipped_threads),
        ),
        ("walk_errors", stats.walk_errors, sum(|s| s.walk_errors)),
        (
            "label_overflow",
            stats.label_overflow,
            sum(|s| s.label_overflow),
        ),
        (
            "dropped_spans",
            stats.dropped_spans,
            sum(|s| s.dropped_spans),
        ),
        ("torn_samples", stats.torn_samples, sum(|s| s.torn_samples)),
        ("missed_ticks", stats.missed_ticks, sum(|s| s.missed_ticks)),
        ("ticks", stats.ticks, sum(|s| s.ticks)),
    ];
    for (name, profiler, windows) in pairs {
        assert_eq!(
            profiler, windows,
            "{name}: Profiler::stats() vs the windows"
        );
        if name != "missed_ticks" {
            assert!(profiler > 0, "{name} was never counted: {stats:?}");
        }
    }
    let lost = registry.stats();
    assert!(lost.full > 0 && lost.unmatched_exits == 200, "{lost:?}");
    assert_eq!(
        sum(|s| s.registry_full),
        lost.full,
        "registry_full per window"
    );
    assert_eq!(sum(|s| s.unmatched_exits), lost.unmatched_exits);
    assert_eq!(sum(|s| s.contended_reads), lost.contended_reads);
    // Nothing vanished: what the windows kept plus what they dropped is what was sampled.
    let kept: u64 = windows.iter().map(|w| w.total_wall_samples()).sum();
    assert_eq!(kept + stats.dropped_samples, stats.samples);
}
