//! A window's summary (format 2) answers the deploy diff's questions (self CPU by leaf frame,
//! CPU and requests by route), a service's cost attribution and the span-name questions
//! (`top --span-name`: the report and the spans' tally) exactly as the decoded window does:
//! over generated windows with span tables whose parent links are missing, cyclic or repeat
//! a name, spans without records, lost span tables, empty and out-of-range stacks; one
//! window at a time, through the sidecar's bytes (whole and decoded by part), and merged
//! over windows.

mod common;

use std::sync::Arc;

use span_profile_core::{
    Frame, Profile, ProfileSample, RouteRequests, SpanContext, SpanId, SpanRecord, Stack, TraceId,
};
use span_profile_export::store::diff;
use span_profile_export::store::frames::Grouping;
use span_profile_export::store::query::{self, CostAttribution, Filter, Report};
use span_profile_export::store::span_name::SpanNameTally;
use span_profile_export::store::summary::{SummaryScope, WindowSummary};
use span_profile_export::store::{decode_summary_scoped, encode_summary};
use span_profile_test::XorShift as Rng;

const FUNCTIONS: [&str; 5] = ["main", "handle", "parse_date", "render", ""];
const FILES: [&str; 3] = ["app.py", "lib.py", ""];
const ROUTES: [&str; 3] = ["/orders/{id}", "/checkout", "background"];
const NAMES: [&str; 3] = ["GET /orders", "cache.get", "db.query"];
const MINUTE: u64 = 60_000_000_000;

fn id(n: u64) -> SpanId {
    SpanId::from_u64(n).unwrap()
}

fn window(rng: &mut Rng, i: u64) -> Profile {
    let resource = common::random_resource(rng);
    let period = if rng.below(2) == 0 {
        10_000_000
    } else {
        5_000_000
    };
    let mut p = Profile::empty(resource, i * MINUTE, MINUTE, period);
    p.stats.unsampled_spans = rng.below(4);
    let n_frames = rng.below(10);
    p.frames = (0..n_frames)
        .map(|_| Frame::new(rng.pick(&FUNCTIONS), rng.pick(&FILES), rng.below(3) as u32))
        .collect();
    p.stacks = (0..rng.below(8))
        .map(|_| Stack {
            frames: (0..rng.below(6))
                .map(|_| rng.below(n_frames + 2) as u32)
                .collect(),
            truncated: false,
        })
        .collect();
    // Span ids 1..=8 (ids also used across windows, so that merges meet the same span);
    // parents anywhere in 0..=9 (0: none; 9: no record), cycles allowed; some spans of a
    // name below a span of the same name; a span table sometimes lost (a roll-up).
    let lost_table = rng.below(6) == 0;
    if !lost_table {
        for n in 1..=8u64 {
            if rng.below(4) == 0 {
                continue;
            }
            let parent = SpanId::from_u64(rng.below(10));
            let root = if rng.below(2) == 0 {
                n
            } else {
                1 + rng.below(8)
            };
            let start = i * MINUTE + rng.below(MINUTE);
            let end = (rng.below(4) > 0).then(|| start + rng.below(200_000_000));
            let route = (rng.below(3) > 0).then(|| Arc::from(rng.pick(&ROUTES)));
            p.spans.push(
                SpanRecord::new(
                    TraceId::from_u128(u128::from(root)).unwrap(),
                    id(n),
                    id(root),
                    Arc::from(rng.pick(&NAMES)),
                    start,
                )
                .with_parent_span_id(parent)
                .with_route(route)
                .with_end_unix_ns(end),
            );
        }
    }
    // Half the windows count their requests (ADR 0032), some of them on routes with no
    // sample; the others are as stores written before requests were counted.
    if rng.below(2) == 0 {
        let mut counts: Vec<RouteRequests> = Vec::new();
        for r in ROUTES {
            if rng.below(3) > 0 {
                counts.push(RouteRequests {
                    route: Arc::from(r),
                    requests: rng.below(1_000),
                });
            }
        }
        counts.sort_by(|a, b| a.route.cmp(&b.route));
        p.requests = Some(counts);
    }
    let n_stacks = p.stacks.len() as u64;
    p.samples = (0..rng.below(25))
        .map(|_| {
            let span = (rng.below(4) > 0).then(|| {
                let n = 1 + rng.below(9);
                SpanContext {
                    trace_id: TraceId::from_u128(u128::from(n)).unwrap(),
                    span_id: id(n),
                    local_root_span_id: id(n),
                }
            });
            let cpu = rng.below(4);
            let cpu_ns = if rng.below(5) == 0 {
                0
            } else {
                cpu * period + rng.below(1000)
            };
            ProfileSample::new(
                rng.below(n_stacks + 1) as u32,
                Arc::from(rng.pick(&ROUTES)),
                Arc::from("t"),
            )
            .with_span(span)
            .with_cpu(cpu, cpu_ns)
            .with_wall(rng.below(5), 0)
        })
        .collect();
    p
}

/// Window filters, with and without a route (the span-name questions decline a route).
fn filters() -> Vec<Filter> {
    common::window_filters(
        &[None, Some("/checkout"), Some("background"), Some("/none")],
        &[None, Some("checkout")],
        &[None, Some("1")],
        &[(None, None), (Some(3 * MINUTE), None)],
    )
}

fn span_filters() -> Vec<Filter> {
    let mut out = Vec::new();
    for f in filters().into_iter().filter(|f| f.route.is_none()) {
        for name in NAMES.iter().chain(&["absent"]) {
            for with_children in [true, false] {
                out.push(f.clone().span_name(*name, with_children));
            }
        }
    }
    out
}

fn tally(p: &[Profile], f: &Filter) -> SpanNameTally {
    let mut t = SpanNameTally::default();
    t.add(p, f);
    t
}

/// The fields of a report a summary holds (it has no entry path).
fn assert_same_report(got: &Report, want: &Report, what: &str) {
    for by in [Grouping::Function, Grouping::Module, Grouping::Package] {
        assert_eq!(
            got.partition(by, 100),
            want.partition(by, 100),
            "partition by {by:?}: {what}"
        );
    }
    assert_eq!(
        (got.samples, got.cpu_samples, got.window_samples),
        (want.samples, want.cpu_samples, want.window_samples),
        "samples: {what}"
    );
    assert_eq!(
        (got.window_cpu_samples, got.windows),
        (want.window_cpu_samples, want.windows),
        "windows: {what}"
    );
    assert_eq!(got.frames, want.frames, "frames: {what}");
    assert_eq!(got.span, None, "{what}");
}

/// The summary as a reader gets it: through the sidecar's bytes, decoded whole or by the
/// part a question needs.
fn read_back(s: &WindowSummary, scope: &SummaryScope) -> WindowSummary {
    decode_summary_scoped(encode_summary(s, 1), scope)
        .unwrap()
        .summary
}

#[test]
fn one_window_answers_costs_and_span_names_as_the_window_does() {
    let (filters, span_filters) = (filters(), span_filters());
    let mut rng = Rng(0x5eed_cafe);
    let mut seen_named_samples = 0;
    let mut seen_unknown_requests = 0;
    for case in 0..400 {
        let p = window(&mut rng, case % 6);
        let one = std::slice::from_ref(&p);
        let built = WindowSummary::from_profile(&p);
        let whole = read_back(&built, &SummaryScope::Whole);
        assert_eq!(whole, built, "case {case}: the bytes round trip");
        for f in &filters {
            let what = format!("case {case}, {f:?}\n{p:#?}");
            let part = read_back(&built, &SummaryScope::needed(f, false));
            for s in [&built, &part] {
                assert_eq!(
                    s.self_cpu_by_frame(f).unwrap(),
                    diff::self_cpu_by_frame(one, f),
                    "self CPU: {what}"
                );
                assert_eq!(
                    s.route_cpu(f).unwrap(),
                    diff::route_cpu(one, f),
                    "route CPU: {what}"
                );
                let a = query::cost_attribution(one, f);
                seen_unknown_requests += a.routes.values().filter(|r| r.requests_unknown).count();
                assert_eq!(s.cost_attribution(f).unwrap(), a, "attribution: {what}");
                assert!(s.span_name_report(f).is_none(), "no span name: {what}");
            }
        }
        for f in &span_filters {
            let what = format!("case {case}, {f:?}\n{p:#?}");
            let part = read_back(&built, &SummaryScope::needed(f, false));
            assert!(part.routes.is_empty() && part.all_routes.is_none());
            for s in [&built, &part] {
                let want = query::report(one, f);
                seen_named_samples += want.samples;
                assert_same_report(&s.span_name_report(f).unwrap(), &want, &what);
                assert_eq!(
                    s.span_name_tally(f).unwrap().finish(),
                    tally(one, f).finish(),
                    "tally: {what}"
                );
                // The other questions decline a span name.
                assert!(s.report(f).is_none() && s.cost_attribution(f).is_none());
            }
            // A route with a span name is declined: the window is decoded.
            let routed = f.clone().route("/checkout");
            assert!(!WindowSummary::answers(&routed));
            assert!(built.span_name_report(&routed).is_none());
        }
    }
    // The cases reach what they are meant to test.
    assert!(seen_named_samples > 1_000, "{seen_named_samples}");
    assert!(seen_unknown_requests > 100, "{seen_unknown_requests}");
}

#[test]
fn summaries_merged_over_windows_answer_as_all_the_windows() {
    let (filters, span_filters) = (filters(), span_filters());
    let mut rng = Rng(99);
    for case in 0..40 {
        let windows: Vec<Profile> = (0..6).map(|i| window(&mut rng, i)).collect();
        let summaries: Vec<WindowSummary> =
            windows.iter().map(WindowSummary::from_profile).collect();
        for f in &filters {
            let what = format!("case {case}, {f:?}");
            let mut a = CostAttribution::default();
            let mut cpu = diff::FrameTally::default();
            let mut routes = diff::RouteCpu::default();
            for s in &summaries {
                a.merge(s.cost_attribution(f).unwrap());
                cpu.merge(s.self_cpu_by_frame(f).unwrap());
                routes.merge(s.route_cpu(f).unwrap());
            }
            assert_eq!(a, query::cost_attribution(&windows, f), "{what}");
            assert_eq!(cpu, diff::self_cpu_by_frame(&windows, f), "{what}");
            assert_eq!(routes, diff::route_cpu(&windows, f), "{what}");
        }
        for f in &span_filters {
            let what = format!("case {case}, {f:?}");
            let (mut r, mut t) = (Report::default(), SpanNameTally::default());
            let (mut want_r, mut want_t) = (Report::default(), SpanNameTally::default());
            for (s, p) in summaries.iter().zip(&windows) {
                r.merge(s.span_name_report(f).unwrap());
                t.merge(s.span_name_tally(f).unwrap());
                // The decoded path answers window by window too (`Store::stream`).
                want_r.merge(query::report(std::slice::from_ref(p), f));
                want_t.merge(tally(std::slice::from_ref(p), f));
            }
            assert_same_report(&r, &want_r, &what);
            assert_eq!(t.finish(), want_t.finish(), "{what}");
        }
    }
}
