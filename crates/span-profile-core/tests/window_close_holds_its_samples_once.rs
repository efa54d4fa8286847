//! Closing a window holds its samples once. A busy window has tens of thousands of rows
//! (nearly every sample of a traced service names a span of its own, so none fold); the close
//! turns them into the profile's samples, and the process's peak memory is set there. The rows
//! are drained in place, not copied, and the samples are allocated at their exact size. The
//! span records the window keeps are filtered in place, not copied either.

use std::mem::size_of;

use span_profile_core::labels::LabelValues;
use span_profile_core::{
    AggregatorLimits, ProfileSample, RawFrame, Resource, Sample, SpanContext, SpanId, SpanRecord,
    SpanStart, SpanTable, TraceId, WindowAggregator,
};
use span_profile_test::counting_allocator;

counting_allocator!(ALLOC);

const ROWS: u64 = 20_000;

#[test]
fn the_close_of_a_busy_window_holds_its_samples_once() {
    let mut agg = WindowAggregator::new(AggregatorLimits::default());
    let stack = agg.intern_stack(&[RawFrame { id: 1, line: 1 }], false);
    let thread = agg.intern_thread_name("worker");
    let table = SpanTable::default();
    // Each sample falls in a span of its own, which then ends: the window keeps its record.
    for i in 1..=ROWS {
        let trace_id = TraceId::from_u128(u128::from(i)).unwrap();
        let span_id = SpanId::from_u64(i).unwrap();
        table.start(SpanStart {
            trace_id,
            span_id,
            parent_span_id: None,
            parent_is_remote: false,
            name: "request",
            route: None,
            start_unix_ns: i,
        });
        let span = SpanContext {
            trace_id,
            span_id,
            local_root_span_id: span_id,
        };
        table.mark_sampled(&span);
        let sample = Sample {
            stack,
            span: Some(span),
            route: LabelValues::BACKGROUND,
            thread,
            task: None,
        };
        agg.add(sample, true, 10_000_000, 1);
        table.end(span_id, i + 1, None);
    }
    assert_eq!(agg.rows() as u64, ROWS, "every sample is a row of its own");
    let mut spans = table.drain_window();
    let records = spans.spans.as_ptr();

    let (profile, peak) = ALLOC.peak_bytes(|| {
        agg.finish(
            Resource::default(),
            0,
            60_000_000_000,
            10_000_000,
            &mut spans,
        )
    });

    assert_eq!(profile.samples.len() as u64, ROWS);
    assert_eq!(profile.spans.len() as u64, ROWS);
    // The span records stay where the span table drained them: the profile keeps them in
    // place, not copied.
    assert_eq!(
        profile.spans.as_ptr(),
        records,
        "the span records were copied"
    );
    // The close allocates the profile's samples, and the span table's buffer for the next
    // window, as large as this one's but empty: no page of it is touched (so none is
    // resident) until the next window's spans end, but an allocator counts it whole.
    assert!(spans.spans.is_empty() && spans.spans.capacity() >= ROWS as usize);
    let held = ROWS as usize * size_of::<ProfileSample>();
    let reserved = spans.spans.capacity() * size_of::<SpanRecord>();
    // Besides those, the close keeps a set of the span ids the samples name (8 bytes each in
    // a hash set at most 7/8 full and rounded up to a power of two: under 40 bytes a sample)
    // and a few small maps. A copy of the rows, of the span records, or samples grown by
    // doubling would each add most of the samples' size again.
    let allowed = held + reserved + ROWS as usize * 40 + 64 * 1024;
    assert!(
        peak as usize <= allowed,
        "the close held {peak} bytes at its peak for {ROWS} rows; its samples take {held} \
         bytes, the next window's span buffer {reserved}, and the bound is {allowed}"
    );
}
