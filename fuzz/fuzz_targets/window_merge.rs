//! Window merge and compaction invariants.
//!
//! 1. `WindowMerger` (what `span-profile compact` and retention roll-ups use): merging windows
//!    keeps every row's totals, by stack (as frames), span, route, thread and task; merging in
//!    any grouping (merge groups, then merge the results) gives the same totals as merging all
//!    at once; per-span and per-route totals are the sum over the sources; drop counters are
//!    summed; the merged window covers the earliest start to the latest end.
//! 2. `WindowAggregator`: the same samples added in one window, or split over several windows
//!    that are then merged, give the same totals (but for `cpu_samples`, which each window
//!    rounds from its `cpu_ns` on its own: every row's count is its CPU time in periods rounded
//!    down or up, and a window's counts add up to its rounded total); and what a window keeps
//!    plus what it counts as dropped is what was added (a CPU-only sample, of weight 0, adds
//!    no wall sample but counts as one dropped sample when dropped).
#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use span_profile_core::labels::LabelValues;
use span_profile_core::internal::{Sample, WindowAggregator};
use span_profile_core::{
    merge_windows, AggregatorLimits, Frame, Profile, RawFrame, Resource, SpanTable, WindowMerger,
};
use span_profile_fuzz::{per_route, per_span, profile, span_context, tally, tally_into, Shape};

fn check_merger(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let shape = Shape {
        small_counts: true,
        mergeable: true,
    };
    let n = u.int_in_range(1..=6)?;
    let mut windows = Vec::with_capacity(n);
    for _ in 0..n {
        windows.push(profile(u, shape)?);
    }
    let keep_spans: bool = u.arbitrary()?;
    let merged = merge_windows(&windows, keep_spans)
        .expect("windows of one resource and period merge")
        .expect("at least one window");

    let mut expected = BTreeMap::new();
    for w in &windows {
        tally_into(w, keep_spans, &mut expected);
    }
    assert_eq!(
        tally(&merged, keep_spans),
        expected,
        "merge lost or invented samples"
    );
    if keep_spans {
        let mut spans = BTreeMap::new();
        for w in &windows {
            for (k, v) in per_span(w) {
                *spans.entry(k).or_default() += v;
            }
        }
        assert_eq!(per_span(&merged), spans);
    } else {
        assert!(merged.samples.iter().all(|s| s.span.is_none()) && merged.spans.is_empty());
    }
    let mut routes = BTreeMap::new();
    for w in &windows {
        for (k, v) in per_route(w) {
            *routes.entry(k).or_default() += v;
        }
    }
    assert_eq!(per_route(&merged), routes);
    let start = windows.iter().map(|w| w.start_unix_ns).min().unwrap_or(0);
    let end = windows
        .iter()
        .map(|w| w.start_unix_ns + w.duration_ns)
        .max()
        .unwrap_or(0);
    assert_eq!(
        (merged.start_unix_ns, merged.duration_ns),
        (start, end - start)
    );
    let sum = |f: fn(&Profile) -> u64| windows.iter().map(f).sum::<u64>();
    assert_eq!(merged.stats.ticks, sum(|w| w.stats.ticks));
    assert_eq!(
        merged.stats.dropped_samples,
        sum(|w| w.stats.dropped_samples)
    );
    assert_eq!(
        merged.stats.dropped_windows,
        sum(|w| w.stats.dropped_windows)
    );
    assert_eq!(merged.stats.walk_errors, sum(|w| w.stats.walk_errors));
    assert_eq!(merged.stats.export_errors, sum(|w| w.stats.export_errors));
    assert_eq!(merged.stats.label_overflow, sum(|w| w.stats.label_overflow));
    assert_eq!(merged.stats.dropped_spans, sum(|w| w.stats.dropped_spans));
    // Every sample's stack index is valid or the out-of-range marker; span records unique.
    for s in &merged.samples {
        assert!((s.stack as usize) < merged.stacks.len() || s.stack == u32::MAX);
    }
    let mut ids: Vec<_> = merged.spans.iter().map(|r| r.span_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), merged.spans.len());

    // Any grouping: merge consecutive groups, then the group results, in a shuffled order.
    let mut groups: Vec<Profile> = Vec::new();
    let mut m = WindowMerger::new(keep_spans);
    let mut open = false;
    for w in &windows {
        m.add(w).expect("same resource");
        open = true;
        if u.arbitrary()? {
            groups.push(
                std::mem::replace(&mut m, WindowMerger::new(keep_spans))
                    .finish()
                    .expect("non-empty"),
            );
            open = false;
        }
    }
    if open {
        groups.push(m.finish().expect("non-empty"));
    }
    if u.arbitrary()? {
        groups.reverse();
    }
    let regrouped = merge_windows(&groups, keep_spans)
        .expect("same resource")
        .expect("non-empty");
    assert_eq!(
        tally(&regrouped, keep_spans),
        expected,
        "grouping changed the totals"
    );
    assert_eq!(regrouped.stats.ticks, merged.stats.ticks);
    assert_eq!(
        (regrouped.start_unix_ns, regrouped.duration_ns),
        (merged.start_unix_ns, merged.duration_ns)
    );

    // Windows of different resources are refused, not mixed.
    let mut other = windows[0].clone();
    other.resource = Resource::default();
    assert!(merge_windows(&[windows[0].clone(), other], keep_spans).is_err());
    Ok(())
}

#[derive(Arbitrary, Debug)]
struct AggSample {
    frames: Vec<u8>,
    truncated: bool,
    span: bool,
    route: u8,
    thread: u8,
    task: Option<u8>,
    cpu_ms: u8,
    weight: u8,
    /// Close the window after this sample.
    cut: bool,
}

fn symbol(r: RawFrame) -> Frame {
    // Two raw frames may resolve to the same frame, as two addresses of one line do.
    Frame::new(format!("f{}", r.id % 5), "x.py", r.line)
}

fn check_aggregator(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let samples: Vec<AggSample> = u.arbitrary()?;
    let max_rows = if u.arbitrary()? {
        200_000
    } else {
        u.int_in_range(1..=8)?
    };
    let max_stacks = u.int_in_range(1..=16)?;
    let limits = AggregatorLimits {
        max_rows,
        max_stacks,
        max_thread_names: 1_000,
        max_task_names: 200,
    };
    let ctx = span_context(u)?;
    let table = SpanTable::default();
    let routes: Vec<_> = ["/a", "/b/{id}", "/c"]
        .iter()
        .map(|r| table.intern_route(r))
        .collect();
    let interval = 10_000_000;

    // Everything in one window, and the same samples split where `cut` says.
    let run = |split: bool| {
        let mut agg = WindowAggregator::new(limits);
        let mut windows = Vec::new();
        // Wall samples added, and how many samples were CPU-only (weight 0: no wall sample,
        // but one dropped sample if dropped).
        let (mut added, mut cpu_only) = (0u64, 0u64);
        for s in samples.iter().take(256) {
            let raw: Vec<RawFrame> = s
                .frames
                .iter()
                .take(6)
                .map(|&f| RawFrame {
                    id: u64::from(f % 8),
                    line: u32::from(f / 8),
                })
                .collect();
            let stack = agg.intern_stack(&raw, s.truncated);
            let thread = agg.intern_thread_name(["main", "w1", "w2"][usize::from(s.thread % 3)]);
            let task = s
                .task
                .map(|t| agg.intern_task_name(["t1", "t2"][usize::from(t % 2)]));
            let route = if s.span {
                routes[usize::from(s.route) % routes.len()]
            } else {
                LabelValues::BACKGROUND
            };
            agg.add(
                Sample {
                    stack,
                    span: s.span.then_some(ctx),
                    route,
                    thread,
                    task,
                },
                u64::from(s.cpu_ms) * 1_000_000,
                interval,
                u32::from(s.weight),
            );
            added += u64::from(s.weight);
            cpu_only += u64::from(s.weight == 0);
            agg.resolve_frames(&mut symbol);
            if split && s.cut {
                windows.push(agg.finish(
                    Resource::default(),
                    0,
                    1,
                    interval,
                    &mut table.drain_window(),
                ));
            }
        }
        windows.push(agg.finish(
            Resource::default(),
            0,
            1,
            interval,
            &mut table.drain_window(),
        ));
        (windows, (added, cpu_only))
    };
    let (whole, (added, cpu_only)) = run(false);
    let (parts, _) = run(true);
    for (windows, what) in [(&whole, "one window"), (&parts, "split windows")] {
        let kept: u64 = windows.iter().map(Profile::total_wall_samples).sum();
        let dropped: u64 = windows.iter().map(|w| w.stats.dropped_samples).sum();
        assert!(
            (added..=added + cpu_only).contains(&(kept + dropped)),
            "{what}: kept + dropped != added"
        );
        for w in windows.iter() {
            let truncated = w
                .samples
                .iter()
                .filter(|s| w.stacks[s.stack as usize].truncated)
                .count();
            assert!(truncated as u64 <= w.stats.truncated_stacks || w.stats.dropped_samples > 0);
            // A window's cpu_samples are its CPU time in whole periods, rounded: each row's
            // count is its cpu_ns over the period, rounded down or up, and the rows add up to
            // the window's rounded total.
            let period = u128::from(interval);
            let cpu_ns: u128 = w.samples.iter().map(|s| u128::from(s.cpu_ns)).sum();
            let counted: u128 = w.samples.iter().map(|s| u128::from(s.cpu_samples)).sum();
            assert_eq!(
                counted,
                (cpu_ns + period / 2) / period,
                "{what}: cpu_samples total"
            );
            for s in &w.samples {
                let (ns, n) = (u128::from(s.cpu_ns), u128::from(s.cpu_samples));
                assert!(
                    n == ns / period || n == ns.div_ceil(period),
                    "{what}: row cpu_samples"
                );
            }
        }
    }
    let dropped: u64 = whole
        .iter()
        .chain(&parts)
        .map(|w| w.stats.dropped_samples)
        .sum();
    if dropped == 0 {
        let one = merge_windows(&whole, true)
            .expect("one resource")
            .expect("a window");
        let split = merge_windows(&parts, true)
            .expect("one resource")
            .expect("windows");
        // Everything but cpu_samples, which each window rounds on its own (checked above).
        let exact = |p: &Profile| {
            let mut t = tally(p, true);
            t.values_mut().for_each(|v| v[0] = 0);
            t
        };
        assert_eq!(exact(&one), exact(&split), "a split changed the totals");
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if u.arbitrary().unwrap_or(false) {
        let _ = check_merger(&mut u);
    } else {
        let _ = check_aggregator(&mut u);
    }
});
