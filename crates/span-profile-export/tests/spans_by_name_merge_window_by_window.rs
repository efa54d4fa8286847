//! Spans by name in aggregate (`store::span_name`) and the span listing's counts with
//! descendants (`query::spans`), over two windows that a span crosses: each window's answer
//! merges into the answer over both, and a span recorded twice is counted once.

use std::sync::Arc;

use span_profile_core::{
    Frame, Profile, ProfileSample, Resource, SpanContext, SpanId, SpanRecord, Stack, TraceId,
};
use span_profile_export::store::query::{self, Filter};
use span_profile_export::store::span_name::SpanNameTally;

const PERIOD: u64 = 10_000_000; // 100 Hz
const MS: u64 = 1_000_000;

fn sid(n: u64) -> SpanId {
    SpanId::from_u64(n).unwrap()
}

/// A span record of trace 0xc0 under local root 7.
fn rec(id: u64, parent: Option<u64>, name: &str, start: u64, end: Option<u64>) -> SpanRecord {
    SpanRecord::new(
        TraceId::from_u128(0xc0).unwrap(),
        sid(id),
        sid(7),
        name.into(),
        start,
    )
    .with_parent_span_id(parent.map(sid))
    .with_end_unix_ns(end)
}

/// A window at `start` with the records `spans` and `samples` (span, n), every sample on the
/// stack `lookup <- get`.
fn window(start: u64, spans: Vec<SpanRecord>, samples: &[(u64, u64)]) -> Profile {
    let mut p = Profile::empty(
        Resource {
            service: "cache".into(),
            ..Resource::default()
        },
        start,
        1_000 * MS,
        PERIOD,
    );
    p.frames = vec![
        Frame::new("get", "cache.py", 1),
        Frame::new("lookup", "cache.py", 2),
    ];
    p.stacks = vec![Stack {
        frames: vec![1, 0],
        truncated: false,
    }];
    p.samples = samples
        .iter()
        .map(|&(span, n)| {
            ProfileSample::new(0, Arc::from("/items"), Arc::from("worker"))
                .with_span(Some(SpanContext {
                    trace_id: TraceId::from_u128(0xc0).unwrap(),
                    span_id: sid(span),
                    local_root_span_id: sid(7),
                }))
                .with_wall(n, n * PERIOD)
        })
        .collect();
    p.spans = spans;
    p
}

/// Span 7 (`cache.get`, 30 ms) crosses from window A (open there) into window B, where it has
/// a `cache.get` child 8 (5 ms) with a `decode` child 10.
fn windows() -> [Profile; 2] {
    let a = window(
        0,
        vec![rec(7, None, "cache.get", 900 * MS, None)],
        &[(7, 2)],
    );
    let b = window(
        1_000 * MS,
        vec![
            rec(7, None, "cache.get", 900 * MS, Some(930 * MS)),
            rec(8, Some(7), "cache.get", 1_010 * MS, Some(1_015 * MS)),
            rec(10, Some(8), "decode", 1_011 * MS, Some(1_014 * MS)),
        ],
        &[(7, 1), (8, 1), (10, 3)],
    );
    [a, b]
}

#[test]
fn spans_of_a_name_are_counted_once_and_merge_window_by_window() {
    let [a, b] = windows();
    let f = Filter::default().span_name("cache.get", true);
    let mut merged = SpanNameTally::default();
    for w in [&a, &b] {
        let mut t = SpanNameTally::default();
        t.add(std::slice::from_ref(w), &f);
        merged.merge(t);
    }
    let mut at_once = SpanNameTally::default();
    at_once.add(&[a.clone(), b.clone()], &f);
    let s = merged.finish();
    assert_eq!(s, at_once.finish());

    // Two spans (7 is in both windows), every sample of the tree: 2 + 1 + 1 + 3.
    assert_eq!((s.spans, s.open_spans, s.samples), (2, 0, 7));
    assert_eq!(s.ended_span_samples, 7);
    assert_eq!(s.duration_p50_ns, Some(5 * MS));
    assert_eq!(s.duration_p95_ns, Some(30 * MS));
    assert_eq!(s.duration_max_ns, Some(30 * MS));
    assert!((s.expected_samples - 3.5).abs() < 1e-9, "{s:?}");
    assert!((s.samples_per_span - 3.5).abs() < 1e-9, "{s:?}");
    assert_eq!((s.period_ns, s.windows), (Some(PERIOD), 2));

    // Own samples only: decode's 3 are out.
    let own = Filter::default().span_name("cache.get", false);
    let mut t = SpanNameTally::default();
    t.add(&[a.clone(), b.clone()], &own);
    assert_eq!(t.finish().samples, 4);

    // The report partitions the same samples, window by window.
    let mut r = query::report(std::slice::from_ref(&a), &f);
    r.merge(query::report(std::slice::from_ref(&b), &f));
    assert_eq!(r.samples, 7);
    let lookup = r.frames.iter().find(|c| c.function == "lookup").unwrap();
    assert_eq!(lookup.self_samples, 7);

    // Window A alone sees span 7 open.
    let mut t = SpanNameTally::default();
    t.add(std::slice::from_ref(&a), &f);
    let s = t.finish();
    assert_eq!((s.spans, s.open_spans, s.samples), (0, 1, 2));
    assert_eq!(s.duration_p50_ns, None);
}

#[test]
fn the_span_listing_counts_descendants_across_windows() {
    let [a, b] = windows();
    let list = query::spans(&[a, b], &Filter::default());
    let counts: Vec<(u64, u64, u64)> = list
        .iter()
        .map(|s| (s.span.span_id.to_u64(), s.own_samples, s.samples))
        .collect();
    // Slowest first: 7 (30 ms: own 2 + 1, with 8's and 10's), 8 (5 ms), 10 (3 ms).
    assert_eq!(counts, [(7, 3, 7), (8, 1, 4), (10, 3, 3)]);
}
