//! The signal handler never allocates. The counting allocator counts per thread, and the
//! handler runs on the sampled thread: that thread only spins (or sleeps) while counting, so
//! every allocation it records would be the handler's.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use span_profile_core::labels::LabelValues;
use span_profile_core::{
    ActiveSpan, ActiveSpanRegistry, ExecutionKey, SpanContext, SpanId, TraceId,
};
use span_profile_native::NativeWalker;

span_profile_test::counting_allocator!(ALLOC);

#[test]
fn the_signal_handler_never_allocates() {
    let registry = Arc::new(ActiveSpanRegistry::default());
    let mut w = NativeWalker::builder()
        .with_registry(registry.clone())
        .with_cpu_hz(1000)
        .build()
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let worker = {
        let (registry, done) = (registry.clone(), done.clone());
        std::thread::spawn(move || {
            let _g = span_profile_native::register_current_thread().unwrap();
            // A current span, so the handler takes the full path including the span read.
            registry.enter(
                ExecutionKey::current_thread(),
                ActiveSpan {
                    ctx: SpanContext {
                        trace_id: TraceId::from_u128(7).unwrap(),
                        span_id: SpanId::from_u64(9).unwrap(),
                        local_root_span_id: SpanId::from_u64(9).unwrap(),
                    },
                    route: LabelValues::BACKGROUND,
                },
            );
            let before = span_profile_native::stats().samples;
            let ((), allocs) = ALLOC.track(|| {
                // On CPU: CPU-timer samples.
                let end = Instant::now() + Duration::from_millis(400);
                let mut x = 1u64;
                while Instant::now() < end {
                    burn!(x, 10_000);
                }
                std::hint::black_box(x);
                // Off CPU: wall samples while sleeping.
                let end = Instant::now() + Duration::from_millis(300);
                while Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            let after = span_profile_native::stats().samples;
            done.store(true, Ordering::Relaxed);
            tx.send((allocs, after - before)).unwrap();
        })
    };
    let mut sink = common::Collect::default();
    while !done.load(Ordering::Relaxed) {
        span_profile_core::StackWalker::walk(&mut w, &mut sink);
        std::thread::sleep(Duration::from_millis(5));
    }
    worker.join().unwrap();
    let (allocs, samples) = rx.recv().unwrap();
    assert!(samples >= 20, "only {samples} samples taken while counting");
    assert!(
        sink.samples.iter().any(|g| g.cpu_ns == 0),
        "no off-CPU sample"
    );
    assert_eq!(
        allocs, 0,
        "{allocs} allocations in the handler over {samples} samples"
    );
}
