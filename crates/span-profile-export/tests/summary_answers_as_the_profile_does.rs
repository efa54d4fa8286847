//! A window's summary answers the route, service, version and time questions exactly as the
//! window does: over generated windows with several routes, odd stacks (empty, recursive,
//! out-of-range indices, one function in two files, lines that differ) and zero counts, for
//! every combination of route, service, version and time filters; and per-window answers
//! merged over several windows equal the answer over all of them.

mod common;

use std::sync::Arc;

use span_profile_core::{Frame, Profile, ProfileSample, Resource, Stack, TraceId};
use span_profile_export::store::frames::Grouping;
use span_profile_export::store::query::{self, Filter, Report, Tally};
use span_profile_export::store::{diff, summary::WindowSummary};
use span_profile_test::XorShift as Rng;

const FUNCTIONS: [&str; 6] = ["main", "handle", "parse_date", "render", "idle", ""];
const FILES: [&str; 3] = ["app.py", "lib.py", ""];
const ROUTES: [&str; 4] = ["/orders/{id}", "/checkout", "background", ""];
const MINUTE: u64 = 60_000_000_000;

fn window(rng: &mut Rng, i: u64) -> Profile {
    let resource = common::random_resource(rng);
    let mut p = Profile::empty(resource, i * MINUTE, MINUTE, 10_000_000);
    let n_frames = rng.below(12);
    p.frames = (0..n_frames)
        .map(|_| Frame::new(rng.pick(&FUNCTIONS), rng.pick(&FILES), rng.below(3) as u32))
        .collect();
    p.stacks = (0..rng.below(10))
        .map(|_| Stack {
            // Sometimes past the frame table: those indices are skipped.
            frames: (0..rng.below(7))
                .map(|_| rng.below(n_frames + 2) as u32)
                .collect(),
            truncated: rng.below(4) == 0,
        })
        .collect();
    let n_stacks = p.stacks.len() as u64;
    p.samples = (0..rng.below(30))
        .map(|_| {
            let stack = rng.below(n_stacks + 1) as u32;
            let route = Arc::from(rng.pick(&ROUTES));
            ProfileSample::new(stack, route, Arc::from("t"))
                .with_cpu(rng.below(4), 0)
                .with_wall(rng.below(5), 0)
        })
        .collect();
    p
}

fn filters() -> Vec<Filter> {
    common::window_filters(
        &[
            None,
            Some("/orders/{id}"),
            Some("background"),
            Some(""),
            Some("/none"),
        ],
        &[None, Some("checkout"), Some("nope")],
        &[None, Some("1"), Some("9")],
        &[
            (None, None),
            (Some(3 * MINUTE), None),
            (None, Some(3 * MINUTE)),
            (Some(2 * MINUTE + 1), Some(4 * MINUTE)),
        ],
    )
}

/// Every field of a report (`Report` has no `PartialEq`: its coverage holds floats).
fn assert_same(got: &Report, want: &Report, what: &str) {
    for by in [Grouping::Function, Grouping::Module, Grouping::Package] {
        for limit in [1, 3, 100] {
            assert_eq!(
                got.partition(by, limit),
                want.partition(by, limit),
                "partition by {by:?}, limit {limit}: {what}"
            );
        }
    }
    assert_eq!(got.samples, want.samples, "samples: {what}");
    assert_eq!(got.cpu_samples, want.cpu_samples, "cpu_samples: {what}");
    assert_eq!(
        got.window_samples, want.window_samples,
        "window_samples: {what}"
    );
    assert_eq!(
        got.window_cpu_samples, want.window_cpu_samples,
        "window_cpu_samples: {what}"
    );
    assert_eq!(got.windows, want.windows, "windows: {what}");
    assert_eq!(got.frames, want.frames, "frames: {what}");
    assert_eq!(got.span, want.span, "span: {what}");
    assert_eq!(got.coverage, want.coverage, "coverage: {what}");
}

fn assert_tallies(p: &[Profile], s: &WindowSummary, f: &Filter, what: &str) {
    assert_eq!(
        s.cpu_by_frame(f).unwrap(),
        diff::cpu_by_frame(p, f),
        "cpu_by_frame: {what}"
    );
    assert_eq!(
        s.cpu_by_root_frame(f).unwrap(),
        query::cpu_by_root_frame(p, f),
        "cpu_by_root_frame: {what}"
    );
    for function in FUNCTIONS.iter().chain(&["absent"]) {
        assert_eq!(
            s.frame_cpu_by_route(f, function).unwrap(),
            query::frame_cpu_by_route(p, f, function),
            "frame_cpu_by_route({function:?}): {what}"
        );
    }
    // A frame named with its module or file: the summary answers as the window does, or
    // declines when the function is in another file too (its CPU is kept by function alone).
    for name in [
        "app:parse_date",
        "lib:handle",
        "app.py:main",
        "lib.py:render",
    ] {
        if let Some(t) = s.frame_cpu_by_route(f, name) {
            assert_eq!(
                t,
                query::frame_cpu_by_route(p, f, name),
                "frame_cpu_by_route({name:?}): {what}"
            );
        }
    }
}

#[test]
fn a_name_that_picks_one_of_two_files_is_declined_and_decoded() {
    // `run` in two files: stack 0 enters through asyncio's, stack 1 through uvicorn's.
    let mut p = Profile::empty(Resource::default(), 0, MINUTE, 10_000_000);
    p.frames = vec![
        Frame::new("work", "app.py", 1),
        Frame::new("run", "/usr/lib/python3.12/asyncio/runners.py", 2),
        Frame::new(
            "run",
            "/venv/lib/python3.12/site-packages/uvicorn/main.py",
            3,
        ),
    ];
    p.stacks = vec![
        Stack {
            frames: vec![0, 1],
            truncated: false,
        },
        Stack {
            frames: vec![0, 2],
            truncated: false,
        },
    ];
    p.samples = vec![
        ProfileSample::new(0, Arc::from("/a"), Arc::from("t"))
            .with_cpu(3, 0)
            .with_wall(3, 0),
        ProfileSample::new(1, Arc::from("/b"), Arc::from("t"))
            .with_cpu(5, 0)
            .with_wall(5, 0),
    ];
    let s = WindowSummary::from_profile(&p);
    let f = Filter::default();
    let one = std::slice::from_ref(&p);
    // The bare name is every `run`: the summary answers it (the CLI lists the two first).
    assert_eq!(
        s.frame_cpu_by_route(&f, "run"),
        Some(query::frame_cpu_by_route(one, &f, "run"))
    );
    assert_eq!(query::frame_cpu_by_route(one, &f, "run").counts.len(), 2);
    // One of the two: declined by the summary; the window answers with its own route only.
    for (name, route, n) in [
        ("asyncio.runners:run", "/a", 3),
        ("uvicorn.main:run", "/b", 5),
    ] {
        assert!(s.frame_cpu_by_route(&f, name).is_none(), "{name}");
        let t = query::frame_cpu_by_route(one, &f, name);
        assert_eq!(t.total, 8);
        assert_eq!(t.counts.len(), 1, "{name}");
        assert_eq!(t.counts[route], n, "{name}");
    }
    // A function defined once: answered by module too.
    assert_eq!(
        s.frame_cpu_by_route(&f, "app:work").unwrap().counts.len(),
        2
    );
}

#[test]
fn one_window_answers_the_same_from_its_summary() {
    let filters = filters();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..300 {
        let p = window(&mut rng, case % 6);
        let s = WindowSummary::from_profile(&p);
        assert!(s.all_routes.is_some());
        // Without the total of all routes, the routes are added up instead.
        let mut by_route = s.clone();
        by_route.all_routes = None;
        let one = std::slice::from_ref(&p);
        for f in &filters {
            for s in [&s, &by_route] {
                let what = format!(
                    "case {case}, {f:?}, {} total\n{p:#?}",
                    s.all_routes.is_some()
                );
                assert_same(&s.report(f).unwrap(), &query::report(one, f), &what);
                assert_tallies(one, s, f, &what);
            }
        }
    }
}

#[test]
fn summaries_merged_over_windows_answer_as_all_the_windows() {
    let filters = filters();
    let mut rng = Rng(42);
    for case in 0..40 {
        let windows: Vec<Profile> = (0..6).map(|i| window(&mut rng, i)).collect();
        let summaries: Vec<WindowSummary> =
            windows.iter().map(WindowSummary::from_profile).collect();
        for f in &filters {
            let what = format!("case {case}, {f:?}");
            let mut r = Report::default();
            let (mut cpu, mut roots) = (Tally::default(), Tally::default());
            for s in &summaries {
                r.merge(s.report(f).unwrap());
                cpu.merge(s.cpu_by_frame(f).unwrap());
                roots.merge(s.cpu_by_root_frame(f).unwrap());
            }
            assert_same(&r, &query::report(&windows, f), &what);
            assert_eq!(cpu, diff::cpu_by_frame(&windows, f), "{what}");
            assert_eq!(roots, query::cpu_by_root_frame(&windows, f), "{what}");
        }
    }
}

#[test]
fn span_and_trace_selections_are_not_answered() {
    let p = window(&mut Rng(7), 0);
    let s = WindowSummary::from_profile(&p);
    let trace = Filter::default().trace(TraceId::from_u128(1).unwrap());
    let span = Filter::default().span("00f067aa0ba902b7".parse().unwrap(), false);
    for f in [trace, span] {
        assert!(!WindowSummary::answers(&f));
        assert!(s.report(&f).is_none());
        assert!(s.cpu_by_frame(&f).is_none());
        assert!(s.cpu_by_root_frame(&f).is_none());
        assert!(s.frame_cpu_by_route(&f, "main").is_none());
    }
}
