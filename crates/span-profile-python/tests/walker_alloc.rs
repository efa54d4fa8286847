//! After warm-up, a walk allocates nothing (pprof-rs style counting allocator), on every
//! version's memory layout.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use span_profile::walker::testing::{FakeFrame, ImageBuilder};
use span_profile::walker::{CpuTimeSource, PythonVersion, PythonWalker, WalkerConfig};
use span_profile_core::{RawSample, StackSink, StackWalker, WalkError};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Only the measuring thread counts; the test harness's own threads may allocate freely.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: (1) Every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is `System`'s. (2) The counter and the thread-local flag do not
// allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: (1) Forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: (1) `ptr` came from `System.alloc` with this `layout` (every allocation goes
        // through `alloc`/`realloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: (1) Forwarded unchanged; `ptr`/`layout` come from this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Counts without allocating.
#[derive(Default)]
struct CountingSink {
    samples: usize,
    frames: usize,
    errors: usize,
}

impl StackSink for CountingSink {
    fn sample(&mut self, s: &RawSample<'_>) {
        self.samples += 1;
        self.frames += s.frames.len();
    }
    fn error(&mut self, _: WalkError) {
        self.errors += 1;
    }
}

#[test]
fn steady_state_walk_does_not_allocate() {
    for minor in 9..=13 {
        let v = PythonVersion::new(3, minor);
        let mut b = ImageBuilder::new(v).expect("layout");
        for t in 0..8u64 {
            let frames: Vec<FakeFrame> = (0..(20 + t as i32 * 30))
                .map(|i| FakeFrame::new(&format!("f{}", i % 17), "/app/x.py", i + 1, i + 3))
                .collect();
            let leaf = b.stack(&frames);
            b.thread(1000 + t, 0, leaf);
        }
        let config = WalkerConfig::default().with_cpu_time(CpuTimeSource::Disabled);
        let mut walker = PythonWalker::new(b.mem.clone(), b.target(), config).expect("walker");
        walker.registry().set_thread_name(1001, "named");
        // Warm-up: code objects are resolved and cached here.
        for _ in 0..2 {
            walker.walk(&mut CountingSink::default());
        }
        let mut sink = CountingSink::default();
        ALLOCATIONS.store(0, Ordering::Relaxed);
        COUNTING.with(|c| c.set(true));
        for _ in 0..50 {
            walker.walk(&mut sink);
        }
        COUNTING.with(|c| c.set(false));
        assert_eq!(
            ALLOCATIONS.load(Ordering::Relaxed),
            0,
            "{v}: allocated on a warm walk"
        );
        assert_eq!(sink.samples, 50 * 8, "{v}");
        assert_eq!(sink.errors, 0, "{v}");
        assert!(sink.frames > 50 * 8 * 20);
    }
}
