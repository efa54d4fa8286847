//! The runtime's own CPU at 100 Hz with the fake walker and 64 threads, half inside spans,
//! measured from the profiler's threads' CPU clocks (Profiler::stats). Not criterion: it runs
//! the real threads for a few seconds and prints the share of one core and the CPU per tick.
//! Target ≤ 0.5%. The overhead budget is off, so the sampler really ticks at 100 Hz.
//!
//! The baseline, alternated with it (A B A B): the same profiler with a walker that reports
//! no thread, which is the cost of waking the sampler 100 times a second and closing windows.
//!
//! `cargo bench -p span-profile-benches --bench runtime_cpu` (SECONDS=10 per run, ROUNDS=3).

use std::time::{Duration, Instant};

use span_profile_core::{ExecutionKey, Profiler, SpanId, SpanStart, TraceId};
use span_profile_test::{FakeWalker, InMemoryExporter};

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing: run briefly then.
    let bench = std::env::args().any(|a| a == "--bench");
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let secs = var("SECONDS", if bench { 10 } else { 1 });
    let rounds = var("ROUNDS", if bench { 3 } else { 1 });
    let (mut empty, mut full) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        empty.push(run(0, secs));
        full.push(run(64, secs));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (e, f) = (median(&mut empty), median(&mut full));
    println!(
        "runtime_cpu medians over {rounds} rounds: no threads {e:.1} µs/tick, 64 threads {f:.1} µs/tick; the 64 threads add {:.1} µs/tick ({:.3}% of one core at 100 Hz)",
        f - e,
        (f - e) / 100.0,
    );
}

/// Runs the profiler over `threads` fake threads for `secs`; prints and returns its CPU per tick
/// in µs.
fn run(threads: usize, secs: u64) -> f64 {
    let exporter = InMemoryExporter::default();
    let builder = Profiler::builder();
    let registry = builder.registry().clone();
    let profiler = builder
        .with_service("bench")
        .with_sample_rate_hz(100)
        // At the full 100 Hz: the default 1% budget would stretch the interval and hide the
        // cost per tick.
        .with_overhead_budget(None)
        .with_window(Duration::from_secs(1))
        .with_walker(FakeWalker::threads(threads, 30).with_registry(registry.clone()))
        .with_exporter(exporter.clone())
        .start()
        .expect("profiler starts");
    for t in 0..(threads as u64 / 2) {
        let a = profiler.span_table().start(SpanStart {
            trace_id: TraceId::from_u128(u128::from(t) + 1).expect("nonzero"),
            span_id: SpanId::from_u64(t + 1).expect("nonzero"),
            parent_span_id: None,
            parent_is_remote: false,
            name: "work",
            route: Some("/orders/{id}"),
            start_unix_ns: 0,
        });
        profiler.registry().enter(ExecutionKey::thread(t + 1), a);
    }
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let stats = profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .expect("clean shutdown");
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (stats.sampler_cpu_ns + stats.exporter_cpu_ns) as f64 / 1e9;
    let per_tick = cpu * 1e6 / stats.ticks.max(1) as f64;
    println!(
        "runtime_cpu: {threads} threads, depth 30, 100 Hz, {wall:.1} s: sampler {:.3} ms + exporter {:.3} ms = {:.3}% of one core; {} ticks ({:.1}/s, {:.1} µs of CPU each), {} samples",
        stats.sampler_cpu_ns as f64 / 1e6,
        stats.exporter_cpu_ns as f64 / 1e6,
        100.0 * cpu / wall,
        stats.ticks,
        stats.ticks as f64 / wall,
        per_tick,
        stats.samples,
    );
    per_tick
}
