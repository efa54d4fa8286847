//! Closing a window holds its samples once. A busy window has tens of thousands of rows
//! (nearly every sample of a traced service names a span of its own, so none fold); the close
//! turns them into the profile's samples, and the process's peak memory is set there. The rows
//! are drained in place, not copied, and the samples are allocated at their exact size. The
//! span records the window keeps are filtered in place, not copied either.

use std::mem::size_of;

use span_profile_core::internal::{Sample, WindowAggregator};
use span_profile_core::labels::LabelValues;
use span_profile_core::{
    AggregatorLimits, ProfileSample, RawFrame, Resource, SpanContext, SpanId, SpanRecord,
    SpanStart, SpanTable, TraceId,
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
    // Each sample falls in a span of its own, the child of a request's root span; both end,
    // and the window keeps both records (the root as the sample's local root and parent).
    for i in 1..=ROWS {
        let trace_id = TraceId::from_u128(u128::from(i)).unwrap();
        let root = SpanId::from_u64(2 * i).unwrap();
        let span_id = SpanId::from_u64(2 * i + 1).unwrap();
        for (id, parent, name) in [(root, None, "request"), (span_id, Some(root), "work")] {
            table.start(SpanStart {
                trace_id,
                span_id: id,
                parent_span_id: parent,
                parent_is_remote: false,
                name,
                route: None,
                start_unix_ns: i,
            });
        }
        let span = SpanContext {
            trace_id,
            span_id,
            local_root_span_id: root,
        };
        table.mark_sampled(&span);
        let sample = Sample {
            stack,
            span: Some(span),
            route: LabelValues::BACKGROUND,
            thread,
            task: None,
        };
        agg.add(sample, 10_000_000, 10_000_000, 1);
        table.end(span_id, i + 1, None);
        table.end(root, i + 2, None);
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
    assert_eq!(profile.spans.len() as u64, 2 * ROWS);
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
    assert!(spans.spans.is_empty() && spans.spans.capacity() >= 2 * ROWS as usize);
    let held = ROWS as usize * size_of::<ProfileSample>();
    let reserved = spans.spans.capacity() * size_of::<SpanRecord>();
    // Besides those, the close sorts the records' span ids with their positions (16 bytes a
    // record, two records a row) to find which to keep, with a flag each, and a few small
    // maps. A map of parents and a set of kept ids took about 37 bytes a record (10.32 MB at
    // the peak here, against a bound of 10.20 MB); a copy of the rows, of the span records,
    // or samples grown by doubling would each add most of the samples' size again.
    let allowed = held + reserved + ROWS as usize * 64 + 64 * 1024;
    assert!(
        peak as usize <= allowed,
        "the close held {peak} bytes at its peak for {ROWS} rows; its samples take {held} \
         bytes, the next window's span buffer {reserved}, and the bound is {allowed}"
    );
}

#[test]
fn samples_and_span_records_hold_no_padding() {
    // A trace id as one `u128` is aligned to 16 bytes, which padded every sample to 128
    // bytes. As two halves it is aligned to 8.
    assert_eq!(size_of::<TraceId>(), 16);
    assert_eq!(std::mem::align_of::<TraceId>(), 8);
    assert_eq!(
        size_of::<Option<SpanContext>>(),
        32,
        "the span id is the niche"
    );
    assert!(
        size_of::<ProfileSample>() <= 120,
        "a sample takes {} bytes",
        size_of::<ProfileSample>()
    );
    assert!(
        size_of::<SpanRecord>() <= 96,
        "a span record takes {} bytes",
        size_of::<SpanRecord>()
    );
}
