//! Cost of one native sample at stack depth 30: `walk()` drains the previous sample and
//! queues a wall signal to this (registered) thread, which the kernel delivers before the
//! syscall returns; the handler unwinds 30+ frames, reads the span and pushes. So one
//! iteration = signal send + delivery + unwind + span read + ring push + drain.
//!
//! Frame pointers are needed for the depth to be real:
//! `RUSTFLAGS="-C force-frame-pointers=yes" CARGO_TARGET_DIR=target/fp \
//!  cargo bench -p span-profile-benches --bench native_sample`

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use span_profile_core::labels::LabelValues;
use span_profile_core::{
    ActiveSpan, ActiveSpanRegistry, ExecutionKey, RawSample, SpanContext, SpanId, StackSink,
    StackWalker, TraceId, WalkError,
};
use span_profile_native::NativeWalker;

#[derive(Default)]
struct Count {
    samples: u64,
    frames: u64,
}
impl StackSink for Count {
    fn sample(&mut self, s: &RawSample<'_>) {
        self.samples += 1;
        self.frames += s.frames.len() as u64;
    }
    fn error(&mut self, _e: WalkError) {}
}

#[inline(never)]
fn at_depth(n: u32, f: &mut dyn FnMut()) {
    if n == 0 {
        f();
    } else {
        at_depth(n - 1, f);
    }
    std::hint::black_box(n);
}

fn bench(c: &mut Criterion) {
    let registry = Arc::new(ActiveSpanRegistry::default());
    let _g = span_profile_native::register_current_thread().expect("register");
    registry.enter(
        ExecutionKey::current_thread(),
        ActiveSpan {
            ctx: SpanContext {
                trace_id: TraceId::from_u128(1).expect("non-zero"),
                span_id: SpanId::from_u64(2).expect("non-zero"),
                local_root_span_id: SpanId::from_u64(2).expect("non-zero"),
            },
            route: LabelValues::BACKGROUND,
        },
    );
    // Wall only, so the handler never defers to the CPU timer.
    let mut w = NativeWalker::builder()
        .with_registry(registry)
        .with_cpu_hz(0)
        .build()
        .expect("walker");
    let mut sink = Count::default();
    at_depth(28, &mut || {
        c.bench_function("native_sample_depth30", |b| b.iter(|| w.walk(&mut sink)));
    });
    // Drain-only baseline: no signal, so this is the walker's per-tick floor.
    let mut idle = Count::default();
    drop(w);
    let mut w = NativeWalker::builder()
        .with_cpu_hz(0)
        .with_wall(false)
        .build()
        .expect("walker");
    c.bench_function("native_walk_no_signal", |b| b.iter(|| w.walk(&mut idle)));
    if sink.samples > 0 {
        eprintln!(
            "native_sample: {} samples, {:.1} frames per sample on average",
            sink.samples,
            sink.frames as f64 / sink.samples as f64
        );
    }
}

extern "C" fn empty(_sig: i32, _info: *mut libc::siginfo_t, _uc: *mut libc::c_void) {}

/// The kernel's part alone: queue a signal to this thread and return from an empty handler.
/// `native_sample_depth30` minus this is the handler's and the drain's own cost.
fn signal_round_trip(c: &mut Criterion) {
    let sig = libc::SIGRTMAX() - 1;
    // SAFETY: all-zero sigaction is valid; `empty` has the SA_SIGINFO signature.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        a.sa_sigaction = empty as *const () as usize;
        a.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigaction(sig, &a, std::ptr::null_mut());
    }
    // SAFETY: getpid/gettid cannot fail.
    let (pid, tid) = unsafe { (libc::getpid(), libc::syscall(libc::SYS_gettid) as i32) };
    c.bench_function("signal_round_trip_empty_handler", |b| {
        // SAFETY: tgkill to our own thread with a signal that has a handler.
        b.iter(|| unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, sig) })
    });
}

criterion_group!(benches, bench, signal_round_trip);
criterion_main!(benches);
