//! A tokio task that moves between worker threads keeps its span: two tasks, each in its own
//! span and running its own function, are woken from outside the runtime so any worker may
//! poll them next; every sample of each function carries that task's span.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_sdk::trace::SdkTracerProvider;
use span_profile_core::{otel, Profiler, SpanId};
use span_profile_native::NativeWalker;
use span_profile_test::InMemoryExporter;
use tokio::sync::Notify;

leaf_fn!(task_alpha);
leaf_fn!(task_beta);

#[test]
fn a_tasks_span_follows_it_across_workers() {
    let exporter = InMemoryExporter::default();
    let profiler = NativeWalker::builder()
        .install_in(
            Profiler::builder()
                .with_sample_rate_hz(100)
                .with_overhead_budget(None),
        )
        .unwrap()
        .with_exporter(exporter.clone())
        .start()
        .unwrap();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(otel::install(&profiler))
        .build();
    let tracer = provider.tracer("tokio");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(3)
        .thread_name_fn(|| {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            format!(
                "worker-{}",
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            )
        })
        .on_thread_start(span_profile_native::on_thread_start)
        .on_thread_stop(span_profile_native::on_thread_stop)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut span_ids = HashMap::new();
    let mut handles = Vec::new();
    let mut wakers = Vec::new();
    // Per task, how often each worker ran it: the run goes on until both tasks ran often on
    // at least two workers (on a loaded machine tokio may keep a task on one worker a while).
    let mut polled = Vec::new();
    for (name, f) in [("alpha", task_alpha as fn(Duration)), ("beta", task_beta)] {
        let span = tracer.start(format!("span-{name}"));
        let cx = Context::current_with_span(span);
        span_ids.insert(
            name,
            SpanId::from_bytes(cx.span().span_context().span_id().to_bytes()).unwrap(),
        );
        let notify = Arc::new(Notify::new());
        wakers.push(notify.clone());
        let stop = stop.clone();
        let by_worker = Arc::new(Mutex::new(HashMap::<String, u32>::new()));
        polled.push(by_worker.clone());
        handles.push(
            rt.spawn(
                async move {
                    while !stop.load(Ordering::Relaxed) {
                        let worker = std::thread::current().name().unwrap_or("").to_string();
                        *by_worker.lock().unwrap().entry(worker).or_default() += 1;
                        f(Duration::from_millis(4));
                        notify.notified().await;
                    }
                }
                .with_context(cx),
            ),
        );
    }
    // Wake both from a thread outside the runtime: the woken task goes to the shared queue,
    // and whichever worker is free polls it.
    // Stop on counts, not a time, so a loaded machine only makes it slower.
    let end = Instant::now() + Duration::from_secs(30);
    let moved_often = || {
        polled.iter().all(|p| {
            let p = p.lock().unwrap();
            p.values().filter(|&&n| n >= 10).count() >= 2
        })
    };
    while handles.iter().any(|h| !h.is_finished()) {
        if (span_profile_native::stats().samples >= 120 && moved_often()) || Instant::now() > end {
            stop.store(true, Ordering::Relaxed);
        }
        for n in &wakers {
            n.notify_one();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(rt);
    // Let the sampler drain what the workers left before the last window closes.
    std::thread::sleep(Duration::from_millis(100));
    profiler
        .shutdown_with_timeout(Duration::from_secs(10))
        .unwrap();
    let mut right: HashMap<&str, u64> = HashMap::new();
    let mut all: HashMap<&str, u64> = HashMap::new();
    let mut workers: HashMap<&str, HashSet<String>> = HashMap::new();
    for p in exporter.profiles() {
        for s in &p.samples {
            let Some(leaf) = p.stack_frames(s.stack).next() else {
                continue;
            };
            for name in ["alpha", "beta"] {
                if leaf.function.ends_with(&format!("::task_{name}")) {
                    *all.entry(name).or_default() += s.wall_samples;
                    if s.span.map(|c| c.span_id) == Some(span_ids[name]) {
                        *right.entry(name).or_default() += s.wall_samples;
                    }
                    workers
                        .entry(name)
                        .or_default()
                        .insert(s.thread_name.to_string());
                }
            }
        }
    }
    if std::env::var_os("NATIVE_DEBUG").is_some() {
        for p in exporter.profiles() {
            for s in &p.samples {
                let f: Vec<_> = p
                    .stack_frames(s.stack)
                    .take(4)
                    .map(|f| f.function.clone())
                    .collect();
                eprintln!(
                    "{} {:?} {f:?} {}",
                    s.thread_name,
                    s.span.map(|c| c.span_id),
                    s.wall_samples
                );
            }
        }
        eprintln!("{:?}", span_profile_native::stats());
    }
    for name in ["alpha", "beta"] {
        let (r, a) = (
            right.get(name).copied().unwrap_or(0),
            all.get(name).copied().unwrap_or(0),
        );
        assert!(a >= 10, "task_{name}: only {a} samples");
        assert!(r * 100 >= a * 99, "task_{name}: {r} of {a} carry its span");
    }
    let moved = workers.values().map(HashSet::len).max().unwrap_or(0);
    assert!(
        moved >= 2,
        "no task was sampled on two workers: {workers:?}; polls by worker {:?}",
        polled
            .iter()
            .map(|p| p.lock().unwrap().clone())
            .collect::<Vec<_>>()
    );
    let _ = provider.shutdown();
}
