//! Aggregate answers do not depend on how windows are grouped: merged reports and tallies
//! equal the answer over all windows, and so do answers over windows merged into one.

use std::sync::Arc;

use span_profile_core::{
    merge_windows, Frame, MergeError, Profile, ProfileSample, Resource, SpanContext, SpanId,
    SpanRecord, Stack, TraceId,
};
use span_profile_export::store::diff;
use span_profile_export::store::query::{self, Filter, Report, SpanTally, Tally};

const PERIOD: u64 = 10_000_000;

/// Window `i` of a service: its own frame order (so frame indices differ between windows),
/// a request span `100 + i` on `/orders` with `parse_date` samples, background idle samples.
fn window(i: u64, parse: u64) -> Profile {
    let mut p = Profile::empty(
        Resource {
            service: "orders".into(),
            version: Some("3".into()),
            ..Resource::default()
        },
        i * 60_000_000_000,
        60_000_000_000,
        PERIOD,
    );
    let mut frames = vec![
        Frame::new("serve", "app.py", 1),
        Frame::new("parse_date", "dates.py", 7),
        Frame::new("idle", "threading.py", 3),
    ];
    if i % 2 == 1 {
        frames.reverse();
    }
    let at = |name: &str| frames.iter().position(|f| f.function == name).unwrap() as u32;
    p.stacks = vec![
        Stack {
            frames: vec![at("parse_date"), at("serve")],
            truncated: false,
        },
        Stack {
            frames: vec![at("idle")],
            truncated: false,
        },
    ];
    p.frames = frames;
    let trace_id = TraceId::from_u128(0xabc + u128::from(i)).unwrap();
    let span_id = SpanId::from_u64(100 + i).unwrap();
    let row = |stack, span, route: &str, n: u64| {
        ProfileSample::new(stack, Arc::from(route), Arc::from("w"))
            .with_span(span)
            .with_cpu(n, n * PERIOD)
            .with_wall(n, n * PERIOD)
    };
    let ctx = SpanContext {
        trace_id,
        span_id,
        local_root_span_id: span_id,
    };
    p.samples = vec![
        row(0, Some(ctx), "/orders", parse),
        row(1, None, "background", 50),
    ];
    p.spans = vec![SpanRecord::new(
        trace_id,
        span_id,
        span_id,
        "GET /orders".into(),
        p.start_unix_ns,
    )
    .with_route(Some("/orders".into()))
    .with_end_unix_ns(Some(p.start_unix_ns + parse * PERIOD))];
    p.stats.ticks = 100;
    p.stats.effective_rate_millihz = 100_000;
    p
}

fn windows() -> Vec<Profile> {
    (0..4).map(|i| window(i, 10 + i * 5)).collect()
}

fn frames(r: &Report) -> Vec<(String, u64, u64)> {
    r.frames
        .iter()
        .map(|f| (f.function.clone(), f.total_samples, f.self_samples))
        .collect()
}

#[test]
fn reports_and_tallies_of_single_windows_merge_into_the_whole() {
    let all = windows();
    let f = Filter::default().route("/orders");
    let whole = query::report(&all, &f);
    let mut merged = Report::default();
    let mut cpu = Tally::default();
    let mut spans = SpanTally::default();
    for w in &all {
        merged.merge(query::report(std::slice::from_ref(w), &f));
        cpu.merge(diff::cpu_by_frame(std::slice::from_ref(w), &f));
        spans.add(std::slice::from_ref(w), &Filter::default());
    }
    assert_eq!(
        (merged.samples, merged.windows, merged.window_samples),
        (whole.samples, whole.windows, whole.window_samples)
    );
    assert_eq!(frames(&merged), frames(&whole));
    assert_eq!(cpu, diff::cpu_by_frame(&all, &f));
    let listed: Vec<_> = spans
        .finish()
        .into_iter()
        .map(|s| (s.span.span_id, s.samples))
        .collect();
    let direct: Vec<_> = query::spans(&all, &Filter::default())
        .into_iter()
        .map(|s| (s.span.span_id, s.samples))
        .collect();
    assert_eq!(listed, direct);
}

#[test]
fn a_merged_window_answers_aggregate_questions_as_its_sources_did() {
    let all = windows();
    let rolled = merge_windows(&all, false).unwrap().unwrap();
    let one = std::slice::from_ref(&rolled);
    assert_eq!(rolled.start_unix_ns, 0);
    assert_eq!(rolled.duration_ns, 4 * 60_000_000_000);
    assert_eq!(
        rolled.samples.len(),
        2,
        "rows of different spans fold together"
    );
    assert!(rolled.spans.is_empty());
    assert_eq!(rolled.stats.ticks, 400);
    assert_eq!(rolled.stats.effective_rate_millihz, 100_000);
    for f in [
        Filter::default(),
        Filter::default().route("/orders"),
        Filter::default().service("orders").version("3"),
    ] {
        assert_eq!(
            frames(&query::report(one, &f)),
            frames(&query::report(&all, &f))
        );
        assert_eq!(
            query::report(one, &f).samples,
            query::report(&all, &f).samples
        );
        assert_eq!(
            query::routes_for_frame(one, &f, "parse_date"),
            query::routes_for_frame(&all, &f, "parse_date")
        );
        assert_eq!(
            query::cpu_by_root_frame(one, &f),
            query::cpu_by_root_frame(&all, &f)
        );
        assert_eq!(
            query::folded_stacks(one, &f),
            query::folded_stacks(&all, &f)
        );
    }
}

#[test]
fn keeping_spans_keeps_span_answers() {
    let all = windows();
    let kept = merge_windows(&all, true).unwrap().unwrap();
    let one = std::slice::from_ref(&kept);
    let f = Filter::default().span(SpanId::from_u64(102).unwrap(), true);
    let (a, b) = (query::report(one, &f), query::report(&all, &f));
    assert_eq!((a.samples, a.coverage), (b.samples, b.coverage));
    assert_eq!(kept.spans.len(), 4);
}

#[test]
fn windows_of_different_resources_are_not_merged() {
    let mut other = window(9, 1);
    other.resource.service = "payments".into();
    let err = merge_windows(&[window(0, 1), other], false).unwrap_err();
    assert!(matches!(err, MergeError::ResourceMismatch { .. }), "{err}");
    assert_eq!(merge_windows(&[], false), Ok(None));
}
