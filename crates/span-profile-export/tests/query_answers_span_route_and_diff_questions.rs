//! The query API over stored windows: a span's samples and top frames (with and without
//! children), coverage, the reverse route query and the deploy diff.

use std::sync::Arc;

use span_profile_core::{
    Frame, Profile, ProfileSample, Resource, SpanContext, SpanId, SpanRecord, Stack, TraceId,
};
use span_profile_export::store::diff;
use span_profile_export::store::query::{self, Filter};

const PERIOD: u64 = 10_000_000; // 100 Hz

fn sid(n: u64) -> SpanId {
    SpanId::from_u64(n).unwrap()
}

/// One window of the checkout scenario: request span 1 (`/checkout`) with child 2
/// (`pricing.calculate`, 720 ms) whose samples are mostly in `parse_date`, plus background.
fn checkout_window(version: &str, parse_date_samples: u64) -> Profile {
    let trace_id = TraceId::from_u128(0xfeed).unwrap();
    let mut p = Profile::empty(
        Resource {
            service: "checkout".into(),
            version: Some(version.into()),
            ..Resource::default()
        },
        1_000_000_000,
        60_000_000_000,
        PERIOD,
    );
    p.frames = vec![
        Frame::new("handle", "app.py", 10),
        Frame::new("calculate", "pricing.py", 20),
        Frame::new("parse_date", "pricing.py", 30),
        Frame::new("apply_discount", "pricing.py", 40),
        Frame::new("idle", "threading.py", 1),
    ];
    let stack = |f: &[u32]| Stack {
        frames: f.to_vec(),
        truncated: false,
    };
    p.stacks = vec![
        stack(&[2, 1, 0]),
        stack(&[3, 1, 0]),
        stack(&[1, 0]),
        stack(&[0]),
        stack(&[4]),
    ];
    let ctx = |s| SpanContext {
        trace_id,
        span_id: sid(s),
        local_root_span_id: sid(1),
    };
    let row = |stack, span: Option<SpanContext>, route: &str, n: u64| {
        ProfileSample::new(stack, Arc::from(route), Arc::from("worker"))
            .with_span(span)
            .with_cpu(n, n * PERIOD)
            .with_wall(n, n * PERIOD)
    };
    p.samples = vec![
        row(0, Some(ctx(2)), "/checkout", parse_date_samples),
        row(1, Some(ctx(2)), "/checkout", 9),
        row(2, Some(ctx(2)), "/checkout", 72 - 9 - parse_date_samples),
        row(3, Some(ctx(1)), "/checkout", 8),
        row(0, None, "background", 4),
        row(4, None, "background", 100),
    ];
    let span = |id: u64, parent: Option<u64>, name: &str, start, end| {
        SpanRecord::new(trace_id, sid(id), sid(1), name.into(), start)
            .with_parent_span_id(parent.map(sid))
            .with_route((id == 1).then(|| "/checkout".into()))
            .with_end_unix_ns(Some(end))
    };
    p.spans = vec![
        span(1, None, "POST /checkout", 1_000_000_000, 1_800_000_000),
        span(
            2,
            Some(1),
            "pricing.calculate",
            1_050_000_000,
            1_770_000_000,
        ),
    ];
    p
}

#[test]
fn a_spans_report_has_its_duration_samples_and_top_frames() {
    let profiles = vec![checkout_window("1.0", 56)];
    let slowest = query::slowest_span(&profiles, "pricing.calculate").unwrap();
    assert_eq!(slowest.duration_ns(), Some(720_000_000));
    let r = query::report(&profiles, &Filter::default().span(slowest.span_id, false));
    assert_eq!(r.samples, 72);
    let top: Vec<_> = r
        .top(4)
        .iter()
        .map(|f| (f.function.as_str(), f.total_samples, f.self_samples))
        .collect();
    // Ordered by total samples, ties by name: every sample is inside `handle` and `calculate`.
    assert_eq!(
        top,
        [
            ("calculate", 72, 7),
            ("handle", 72, 0),
            ("parse_date", 56, 56),
            ("apply_discount", 9, 9)
        ]
    );
    let c = r.coverage.unwrap();
    assert_eq!(c.expected_samples, 72.0);
    assert!(c.is_ok(), "{c:?}");
}

#[test]
fn the_entry_path_is_the_common_start_of_the_stacks_not_every_frame_on_every_sample() {
    // pricing.calculate's samples all start handle -> calculate; parse_date is on every one of
    // them too, but reached from calculate and from apply_discount: it is the finding, not
    // part of the way in.
    let mut p = checkout_window("1.0", 56);
    p.stacks = vec![
        Stack {
            frames: vec![2, 1, 0],
            truncated: false,
        },
        Stack {
            frames: vec![2, 3, 1, 0],
            truncated: false,
        },
    ];
    p.samples
        .retain(|s| s.span.is_some_and(|c| c.span_id == sid(2)));
    p.samples.truncate(2);
    p.samples[1].stack = 1;
    let profiles = vec![p];
    let r = query::report(&profiles, &Filter::default().span(sid(2), false));
    let path = |r: &query::Report| {
        r.entry_path
            .as_ref()
            .unwrap()
            .iter()
            .map(|(f, _)| f.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(path(&r), ["handle", "calculate"]);
    let parse_date = r
        .frames
        .iter()
        .find(|f| f.function == "parse_date")
        .unwrap();
    assert_eq!(parse_date.total_samples, r.samples); // on every sample, yet not on the path
                                                     // Merging keeps the common part; an empty report changes nothing.
    let mut merged = query::Report::default();
    merged.merge(r.clone());
    merged.merge(query::Report::default());
    assert_eq!(path(&merged), ["handle", "calculate"]);
    let mut background = checkout_window("1.0", 56);
    background.samples.retain(|s| s.stack == 4);
    merged.merge(query::report(&[background], &Filter::default()));
    assert_eq!(path(&merged), Vec::<String>::new());
}

#[test]
fn with_children_a_span_includes_its_descendants() {
    let profiles = vec![checkout_window("1.0", 56)];
    let alone = query::report(&profiles, &Filter::default().span(sid(1), false));
    assert_eq!(alone.samples, 8);
    let all = query::report(&profiles, &Filter::default().span(sid(1), true));
    assert_eq!(all.samples, 80);
    // 800 ms at 100 Hz predicts 80 samples.
    assert!(all.coverage.unwrap().is_ok());
}

#[test]
fn trace_route_and_service_selections() {
    let profiles = vec![checkout_window("1.0", 56)];
    let trace = query::report(
        &profiles,
        &Filter::default().trace(TraceId::from_u128(0xfeed).unwrap()),
    );
    assert_eq!(trace.samples, 80);
    let bg = query::report(&profiles, &Filter::default().route("background"));
    assert_eq!(bg.samples, 104);
    let other = query::report(&profiles, &Filter::default().service("payments"));
    assert_eq!((other.samples, other.windows), (0, 0));
    let svc = query::report(&profiles, &Filter::default().service("checkout"));
    assert_eq!(svc.samples, 184);
}

#[test]
fn the_reverse_query_names_the_routes_behind_a_frame() {
    let profiles = vec![checkout_window("1.0", 56)];
    let (share, routes) = query::routes_for_frame(&profiles, &Filter::default(), "parse_date");
    assert!((share - 60.0 / 184.0).abs() < 1e-9);
    assert_eq!(routes[0].route, "/checkout");
    assert!((routes[0].share_of_frame - 56.0 / 60.0).abs() < 1e-9);
    assert_eq!(routes[1].route, "background");
}

#[test]
fn the_diff_flags_frames_whose_self_share_grew_significantly() {
    // Three windows per side, the window being the unit of the test (ADR 0023).
    let tallies = |version: &str, parse: [u64; 3]| -> Vec<diff::FrameTally> {
        parse
            .iter()
            .map(|&n| {
                let w = checkout_window(version, n);
                diff::self_cpu_by_frame(&[w], &Filter::default())
            })
            .collect()
    };
    let old = tallies("1.0", [9, 10, 11]);
    let new = tallies("2.0", [55, 56, 57]);
    let c = diff::compare(&old, &new, &diff::DiffOptions::default()).unwrap();
    let names = |v: &[diff::FrameChange]| -> Vec<(String, String)> {
        v.iter()
            .map(|c| (c.frame.function.clone(), c.frame.file.clone()))
            .collect()
    };
    // parse_date is the leaf of 10 + 4 of 184 CPU samples, then of 56 + 4; its caller
    // `calculate` lost that self time, and `handle` (on every stack) is not flagged.
    assert_eq!(
        names(&c.regressions),
        [("parse_date".into(), "pricing.py".into())]
    );
    assert_eq!(
        names(&c.improvements),
        [("calculate".into(), "pricing.py".into())]
    );
    let r = &c.regressions[0];
    assert_eq!((r.old_samples, r.new_samples), (42, 180));
    assert!((r.old_share - 42.0 / 552.0).abs() < 1e-12);
    assert!((r.new_share - 180.0 / 552.0).abs() < 1e-12);
    assert_eq!(c.frames_tested, 5);

    // The same windows on both sides: nothing.
    let same = diff::compare(&new, &new, &diff::DiffOptions::default()).unwrap();
    assert!(same.regressions.is_empty() && same.improvements.is_empty());

    // CPU per request: 80 CPU samples of /checkout per window, one request (span 1).
    let w = checkout_window("1.0", 10);
    let per = diff::route_cpu(&[w], &Filter::default()).per_request();
    assert_eq!(per, [("/checkout".to_owned(), 1, (80 * PERIOD) as f64)]);
}

#[test]
fn spans_are_listed_slowest_first_with_their_own_samples_and_their_descendants() {
    let profiles = vec![checkout_window("1.0", 56)];
    let list = query::spans(&profiles, &Filter::default());
    assert_eq!(&*list[0].span.name, "POST /checkout");
    assert_eq!((list[0].own_samples, list[0].samples), (8, 80));
    assert_eq!((list[1].own_samples, list[1].samples), (72, 72));
}
