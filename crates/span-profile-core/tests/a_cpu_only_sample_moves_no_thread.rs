//! A CPU-only sample (a thread's CPU charged to the stack it last ran in, ADR 0019) takes no
//! position in the walk: the threads reported after it are counted again (`StackSink::repeat`,
//! ADR 0035) at every tick, whether or not a tick had such a sample, and every sample is
//! counted once, with its wall time and CPU where they belong.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use span_profile_core::internal::SamplerHarness;
use span_profile_core::{
    ActiveSpanRegistry, ExecutionKey, Frame, RawFrame, RawSample, SpanTable, StackSink, StackWalker,
};

const A: ExecutionKey = ExecutionKey::thread(1);
const B: ExecutionKey = ExecutionKey::thread(2);
const WAITS: [RawFrame; 2] = [RawFrame { id: 1, line: 7 }, RawFrame { id: 2, line: 3 }];
const RAN: [RawFrame; 2] = [RawFrame { id: 3, line: 9 }, RawFrame { id: 2, line: 3 }];
const CHARGE_NS: u64 = 2_000_000;

/// Two threads that wait, each counted again when the sink can; every third tick thread A's
/// sample comes with a CPU-only sample of the stack it last ran in, as the Python walker reports
/// a thread that used CPU since its last sample but is found waiting.
struct TwoWaiters {
    tick: u32,
    /// Whole samples handed, per thread.
    whole: [Arc<AtomicU32>; 2],
}

impl StackWalker for TwoWaiters {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        self.tick += 1;
        for (i, (key, name)) in [(A, "a"), (B, "b")].into_iter().enumerate() {
            if !sink.repeat(key, 1) {
                self.whole[i].fetch_add(1, Ordering::Relaxed);
                sink.sample(&RawSample::new(key, &WAITS, name));
            }
            if key == A && self.tick.is_multiple_of(3) {
                let charge = RawSample::new(A, &RAN, "a")
                    .with_cpu_ns(CHARGE_NS)
                    .with_weight(0);
                sink.sample(&charge);
            }
        }
    }

    fn symbolize(&mut self, raw: RawFrame) -> Frame {
        Frame::new(
            ["", "wait", "handle", "parse"][raw.id as usize],
            "w.py",
            raw.line,
        )
    }
}

#[test]
fn threads_after_a_cpu_only_sample_are_still_counted_again() {
    let whole = [Arc::default(), Arc::default()];
    let walker = TwoWaiters {
        tick: 0,
        whole: whole.clone(),
    };
    let spans = Arc::new(SpanTable::default());
    let mut h = SamplerHarness::new(walker, Arc::new(ActiveSpanRegistry::default()), spans, 100);
    const TICKS: u64 = 12;
    for _ in 0..TICKS {
        h.tick();
    }
    let built = whole.each_ref().map(|w| w.load(Ordering::Relaxed));
    assert_eq!(
        built,
        [1, 1],
        "each thread's sample is built once and counted again after (whole samples of a and b)"
    );
    let w = h.close_window().expect("a window");
    let by_thread = |thread: &str, cpu_only: bool| -> (u64, u64) {
        w.samples
            .iter()
            .filter(|s| &*s.thread_name == thread && (s.wall_samples == 0) == cpu_only)
            .fold((0, 0), |(wall, cpu), s| {
                (wall + s.wall_samples, cpu + s.cpu_ns)
            })
    };
    assert_eq!(by_thread("a", false).0, TICKS, "a's wall samples");
    assert_eq!(by_thread("b", false).0, TICKS, "b's wall samples");
    assert_eq!(
        by_thread("a", true),
        (0, TICKS / 3 * CHARGE_NS),
        "a's CPU, charged where it ran, with no wall time"
    );
}
