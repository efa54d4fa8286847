//! Shared test helpers: a sink that keeps every sample, symbolized.
// Shared by several test binaries, each using some of it: `pub`, and no dead-code warnings.
#![allow(dead_code, unreachable_pub)]

use std::sync::Mutex;
use std::time::{Duration, Instant};

use span_profile_core::{
    ExecutionKey, Frame, RawFrame, RawSample, StackSink, StackWalker, WalkError,
};

/// One walker may be attached per process: tests of one binary take turns.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug, Clone)]
pub struct Got {
    pub key: ExecutionKey,
    pub frames: Vec<RawFrame>,
    pub cpu_ns: u64,
    pub thread: String,
    pub weight: u32,
    pub truncated: bool,
}

#[derive(Debug, Default)]
pub struct Collect {
    pub samples: Vec<Got>,
    pub errors: Vec<WalkError>,
}

impl StackSink for Collect {
    fn sample(&mut self, s: &RawSample<'_>) {
        self.samples.push(Got {
            key: s.key,
            frames: s.frames.to_vec(),
            cpu_ns: s.cpu_ns,
            thread: s.thread_name.to_string(),
            weight: s.weight,
            truncated: s.truncated,
        });
    }
    fn error(&mut self, e: WalkError) {
        self.errors.push(e);
    }
}

/// Walks every `every` until `done` returns true or `max` passes.
pub fn walk_until(
    w: &mut impl StackWalker,
    sink: &mut Collect,
    every: Duration,
    max: Duration,
    mut done: impl FnMut(&Collect) -> bool,
) {
    let end = Instant::now() + max;
    while Instant::now() < end && !done(sink) {
        w.walk(sink);
        std::thread::sleep(every);
    }
    w.walk(sink);
}

/// Function names of a sample, leaf first.
pub fn names(w: &mut impl StackWalker, frames: &[RawFrame]) -> Vec<String> {
    frames.iter().map(|&f| w.symbolize(f).function).collect()
}

pub fn frame(w: &mut impl StackWalker, f: RawFrame) -> Frame {
    w.symbolize(f)
}

/// Burns CPU until `d` has passed.
#[inline(never)]
pub fn spin_for(d: Duration) {
    let end = Instant::now() + d;
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }
    std::hint::black_box(x);
}

/// Burns `$n` rounds of xorshift on `$x` without any call, even unoptimised (no iterator,
/// no `black_box`, no wrapping helpers), so a sample lands in the function using it.
#[macro_export]
macro_rules! burn {
    ($x:ident, $n:expr) => {{
        let mut i = 0u32;
        while i < $n {
            $x ^= $x << 13;
            $x ^= $x >> 7;
            $x ^= $x << 17;
            i += 1;
        }
    }};
}

/// Defines `fn $name(d: Duration)`, a leaf that burns CPU for `d`. Its inner loop makes no
/// calls even unoptimised, so it is the sampled pc.
#[macro_export]
macro_rules! leaf_fn {
    ($name:ident) => {
        #[inline(never)]
        fn $name(d: std::time::Duration) {
            let end = std::time::Instant::now() + d;
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            while std::time::Instant::now() < end {
                $crate::burn!(x, 20_000);
            }
            std::hint::black_box(x);
        }
    };
}

/// A walker walking on its own thread every `period` until [`Background::finish`].
pub struct Background<W> {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<(W, u64, usize)>,
}

impl<W: StackWalker> Background<W> {
    /// Starts walking `w` every `period`.
    pub fn start(mut w: W, period: Duration) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut sink = Collect::default();
            let (mut walks, mut samples) = (0u64, 0usize);
            loop {
                let last = flag.load(Ordering::Relaxed);
                w.walk(&mut sink);
                walks += 1;
                samples += sink.samples.len();
                sink.samples.clear();
                if last {
                    return (w, walks, samples);
                }
                std::thread::sleep(period);
            }
        });
        Self { stop, handle }
    }

    /// Walks once more, stops, and returns the walker, the walks and the samples reported.
    pub fn finish(self) -> (W, u64, usize) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}
