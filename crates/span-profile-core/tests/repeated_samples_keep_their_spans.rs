//! A sample a walker counts again (`StackSink::repeat`, ADR 0035) stands for its span as the
//! whole sample did: a span that only one whole sample and then repeats named is kept when it
//! ends, whether it ends in the window it was sampled in or windows later, and every one of its
//! samples carries it. A span no sample named is not kept: the table tells them apart.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use span_profile_core::internal::SamplerHarness;
use span_profile_core::{
    ActiveSpan, ActiveSpanRegistry, ExecutionKey, Frame, RawFrame, RawSample, SpanEnd, SpanId,
    SpanSource, SpanStart, SpanTable, StackSink, StackWalker, TraceId,
};

/// One thread that waits in `span`: the first tick of each window hands its whole sample, every
/// later one asks to count it again, as the Python walker does for a thread that has not run.
struct Waiter {
    span: ActiveSpan,
    whole: Arc<AtomicU32>,
    repeated: Arc<AtomicU32>,
}

const KEY: ExecutionKey = ExecutionKey::thread(1);
const FRAMES: [RawFrame; 2] = [RawFrame { id: 1, line: 7 }, RawFrame { id: 2, line: 3 }];

impl StackWalker for Waiter {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        if sink.repeat(KEY, 1) {
            self.repeated.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.whole.fetch_add(1, Ordering::Relaxed);
        let sample =
            RawSample::new(KEY, &FRAMES, "waiter").with_span(SpanSource::Resolved(Some(self.span)));
        sink.sample(&sample);
    }

    fn symbolize(&mut self, raw: RawFrame) -> Frame {
        Frame::new(
            if raw.id == 1 { "wait" } else { "handle" },
            "waiter.py",
            raw.line,
        )
    }
}

fn start(spans: &SpanTable, id: u64, parent: Option<u64>) -> ActiveSpan {
    spans.start(SpanStart {
        trace_id: TraceId::from_u128(0xab).unwrap(),
        span_id: SpanId::from_u64(id).unwrap(),
        parent_span_id: parent.and_then(SpanId::from_u64),
        parent_is_remote: false,
        name: "io.wait",
        route: Some("/orders/{id}"),
        start_unix_ns: 1,
    })
}

/// A sampler over one waiting thread in a child span of a request, and the counts of its
/// whole and repeated samples.
fn waiting_in_a_span() -> (
    SamplerHarness,
    Arc<SpanTable>,
    Arc<AtomicU32>,
    Arc<AtomicU32>,
) {
    let spans = Arc::new(SpanTable::default());
    start(&spans, 10, None);
    let child = start(&spans, 11, Some(10));
    let (whole, repeated) = (Arc::default(), Arc::default());
    let walker = Waiter {
        span: child,
        whole: Arc::clone(&whole),
        repeated: Arc::clone(&repeated),
    };
    let registry = Arc::new(ActiveSpanRegistry::default());
    let h = SamplerHarness::new(walker, registry, Arc::clone(&spans), 100);
    (h, spans, whole, repeated)
}

#[test]
fn a_span_named_by_one_whole_sample_and_its_repeats_is_kept_when_it_ends_in_that_window() {
    let (mut h, spans, whole, repeated) = waiting_in_a_span();
    // Ended with no sample: the control. The table would not keep a span it was not told of.
    start(&spans, 20, None);
    assert_eq!(
        spans.end(SpanId::from_u64(20).unwrap(), 2, None),
        SpanEnd::Unsampled
    );
    for _ in 0..10 {
        h.tick();
    }
    assert_eq!(
        (
            whole.load(Ordering::Relaxed),
            repeated.load(Ordering::Relaxed)
        ),
        (1, 9),
        "one whole sample, then nine repeats"
    );
    let child = SpanId::from_u64(11).unwrap();
    assert_eq!(spans.end(child, 5, None), SpanEnd::Sampled);
    // Its parent, the request, ends after it: kept as the sampled span's parent.
    let root = SpanId::from_u64(10).unwrap();
    assert_eq!(spans.end(root, 6, None), SpanEnd::Sampled);

    let w = h.close_window().expect("a window");
    assert_eq!(w.samples.len(), 1);
    let s = &w.samples[0];
    assert_eq!(s.wall_samples, 10, "the repeats are counted");
    let ctx = s.span.expect("the samples carry the span");
    assert_eq!((ctx.span_id, ctx.local_root_span_id), (child, root));
    assert_eq!(&*s.route, "/orders/{id}");
    let ended: Vec<_> = w
        .spans
        .iter()
        .filter(|r| r.end_unix_ns.is_some())
        .map(|r| r.span_id.to_u64())
        .collect();
    assert!(
        ended.contains(&10) && ended.contains(&11),
        "both ended spans are in the window: {ended:?}"
    );
}

#[test]
fn a_span_named_by_repeats_across_window_closes_is_kept_when_it_ends_later() {
    let (mut h, spans, whole, repeated) = waiting_in_a_span();
    // Three windows of four ticks: a window's close forgets the marks of the one before last,
    // and the first tick of each window builds the sample whole again.
    for _ in 0..3 {
        for _ in 0..4 {
            h.tick();
        }
        let w = h.close_window().expect("a window");
        assert_eq!(w.total_wall_samples(), 4);
        assert!(w
            .samples
            .iter()
            .all(|s| s.span.is_some_and(|c| c.span_id.to_u64() == 11)));
    }
    // Windows closing with no tick in them (rotations with nothing marked in between).
    h.close_window();
    h.close_window();
    for _ in 0..3 {
        h.tick();
    }
    assert_eq!(
        (
            whole.load(Ordering::Relaxed),
            repeated.load(Ordering::Relaxed)
        ),
        (4, 11)
    );
    assert_eq!(
        spans.end(SpanId::from_u64(11).unwrap(), 9, None),
        SpanEnd::Sampled
    );
    let w = h.close_window().expect("a window");
    assert!(w
        .spans
        .iter()
        .any(|r| r.span_id.to_u64() == 11 && r.end_unix_ns == Some(9)));
}
