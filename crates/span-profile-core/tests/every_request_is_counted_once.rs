//! Every request is counted once, sampled or not (ADR 0032). A window keeps only the span
//! records its samples need (ADR 0010), so at a sampling period of 10 ms most short requests
//! leave no record; CPU per request divided by the records would be off by the share of
//! requests no sample caught. So the span table counts every local-root span with a route as
//! it ends, and each window carries the counts of the requests that ended in it.
//!
//! Here four threads end requests of known routes while windows close under them; the
//! windows' counts add up to exactly the requests ended, route by route, and a merge of the
//! windows (a roll-up) holds the same sums.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use span_profile_core::internal::WindowAggregator;
use span_profile_core::{
    merge_windows, AggregatorLimits, Profile, Resource, SpanId, SpanStart, SpanTable,
    SpanTableLimits, TraceId,
};

const THREADS: u64 = 4;
const REQUESTS_PER_THREAD: u64 = 20_000;
const ROUTES: [&str; 3] = ["/orders/{id}", "/checkout", "/health"];

/// Ends one request on `route`: a local root with a child span (which is not a request), its
/// route set at start or, as some instrumentations do, only at its end.
fn request(table: &SpanTable, n: u64, route: &str) {
    let trace_id = TraceId::from_u128(u128::from(n)).unwrap();
    let root = SpanId::from_u64(2 * n).unwrap();
    let child = SpanId::from_u64(2 * n + 1).unwrap();
    let late = n.is_multiple_of(2);
    // Every third request continues a trace from another process: a remote parent still
    // makes the span a local root.
    let remote_parent = n
        .is_multiple_of(3)
        .then(|| SpanId::from_u64(u64::MAX - n).unwrap());
    table.start(SpanStart {
        trace_id,
        span_id: root,
        parent_span_id: remote_parent,
        parent_is_remote: remote_parent.is_some(),
        name: "GET",
        route: (!late).then_some(route),
        start_unix_ns: n,
    });
    table.start(SpanStart {
        trace_id,
        span_id: child,
        parent_span_id: Some(root),
        parent_is_remote: false,
        name: "db.query",
        route: None,
        start_unix_ns: n,
    });
    table.end(child, n + 1, None);
    table.end(root, n + 2, late.then_some(route));
}

fn close(agg: &mut WindowAggregator, table: &SpanTable, i: u64) -> Profile {
    let mut spans = table.drain_window();
    let p = agg.finish(Resource::default(), i, 1, 10_000_000, &mut spans);
    table.recycle(spans);
    p
}

fn sums(windows: &[Profile]) -> BTreeMap<String, u64> {
    let mut by_route = BTreeMap::new();
    for w in windows {
        for r in w
            .requests
            .as_ref()
            .expect("a window of the aggregator counts requests")
        {
            *by_route.entry(r.route.to_string()).or_default() += r.requests;
        }
    }
    by_route
}

#[test]
fn the_windows_count_every_request_that_ended_exactly_once() {
    let table = Arc::new(SpanTable::default());
    let done = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let table = table.clone();
            thread::spawn(move || {
                let mut ended = BTreeMap::<String, u64>::new();
                for i in 0..REQUESTS_PER_THREAD {
                    let n = 1 + t * REQUESTS_PER_THREAD + i;
                    // Routes in proportions 1:2:3, so that a swap between routes shows.
                    let route = ROUTES[[0, 1, 1, 2, 2, 2][(n % 6) as usize]];
                    request(&table, n, route);
                    *ended.entry(route.to_string()).or_default() += 1;
                }
                ended
            })
        })
        .collect();
    // Windows close while the requests end, as the sampler's do.
    let mut agg = WindowAggregator::new(AggregatorLimits::default());
    let mut windows = Vec::new();
    let closer = {
        let done = done.clone();
        let table = table.clone();
        thread::spawn(move || {
            let mut i = 0;
            while !done.load(Ordering::Relaxed) {
                windows.push(close(&mut agg, &table, i));
                i += 1;
                thread::yield_now();
            }
            windows.push(close(&mut agg, &table, i));
            windows
        })
    };
    let mut want = BTreeMap::<String, u64>::new();
    for w in workers {
        for (route, n) in w.join().unwrap() {
            *want.entry(route).or_default() += n;
        }
    }
    done.store(true, Ordering::Relaxed);
    let windows = closer.join().unwrap();

    assert!(windows.len() > 2, "the windows closed under load");
    assert_eq!(want.values().sum::<u64>(), THREADS * REQUESTS_PER_THREAD);
    assert_eq!(sums(&windows), want);
    // A roll-up sums the counts, with or without the span tables.
    for keep_spans in [false, true] {
        let merged = merge_windows(&windows, keep_spans).unwrap().unwrap();
        assert_eq!(sums(&[merged]), want);
    }
}

#[test]
fn a_window_that_did_not_count_leaves_a_merge_uncounted() {
    let table = SpanTable::default();
    request(&table, 1, "/checkout");
    let mut agg = WindowAggregator::new(AggregatorLimits::default());
    let counted = close(&mut agg, &table, 0);
    assert_eq!(sums(std::slice::from_ref(&counted))["/checkout"], 1);
    let old = Profile::empty(Resource::default(), 5, 1, 10_000_000);
    assert_eq!(old.requests, None, "as a window of an older store decodes");
    let merged = merge_windows(&[counted, old], false).unwrap().unwrap();
    assert_eq!(merged.requests, None);
}

#[test]
fn routes_past_the_cap_count_as_other_and_spans_without_a_route_are_not_requests() {
    let table = SpanTable::with_limits(SpanTableLimits {
        max_routes: 2,
        ..SpanTableLimits::default()
    });
    for (n, route) in ["/a", "/b", "/c", "/d", "/a"].into_iter().enumerate() {
        request(&table, n as u64 + 1, route);
    }
    // A local root without a route (a background job) is not a request of any route.
    table.start(SpanStart {
        trace_id: TraceId::from_u128(99).unwrap(),
        span_id: SpanId::from_u64(999).unwrap(),
        parent_span_id: None,
        parent_is_remote: false,
        name: "nightly-job",
        route: None,
        start_unix_ns: 0,
    });
    table.end(SpanId::from_u64(999).unwrap(), 1, None);
    let mut agg = WindowAggregator::new(AggregatorLimits::default());
    let w = close(&mut agg, &table, 0);
    let got = sums(&[w]);
    assert_eq!(got.get("/a"), Some(&2));
    assert_eq!(got.get("/b"), Some(&1));
    assert_eq!(got.get("_other"), Some(&2));
    assert_eq!(got.values().sum::<u64>(), 5);
}
