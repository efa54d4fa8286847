//! The binary form of a [`WindowSummary`]: the file store's sidecar (ADR 0006).
//!
//! One protobuf message, written from hand-made prost types with field numbers of our own
//! (there is no `.proto` to stay compatible with). Strings are kept once in a string table;
//! per route, the frame, function and root counts are parallel columns of packed varints, which
//! prost decodes without a per-entry message. No gzip: a summary is much smaller than its
//! window's pprof and is read far more often than written.
//!
//! Each route, and the total of all routes, is an embedded message that the decoder first
//! takes as raw bytes, so that [`decode_summary_scoped`] decodes only what a question needs:
//! the one route it selects, or the total of all routes; of the others it reads only the name
//! and the sample counts (to check them).
//!
//! The environment and instance (tags 12 to 14) came later than the rest: a summary without
//! them decodes with no [`Deployment`], and declines filters by environment or instance.
//!
//! Format 2 adds what CPU per request, cost attribution, the deploy diff and span-name
//! questions need: the period and unsampled spans (16, 17), CPU time and requests by route
//! (18), self CPU by leaf frame in each route (route tags 12 to 14), one embedded message per
//! span name (19, decoded only for a question about that name), and a last field (20) that
//! marks a format 2 summary complete. A format 1 summary still decodes, without them: it
//! declines those questions, and their windows are decoded.
//!
//! Format 3 adds each route's request count (costs tags 7 to 9; ADR 0032): every request
//! that ended in the window, sampled or not, where formats 1 and 2 knew only the sampled ones
//! by span id. A format 2 summary still decodes, its requests uncounted; a reader of format 2
//! refuses format 3 and decodes the window, whose request counts it does not know, as before.
//!
//! The message also records the length of the pprof file it summarizes, so that a reader can
//! tell a summary from the window next to it apart from a stale one.

use crate::store::summary::{
    RouteSummary, SelectionSummary, SpanNameSummary, SummaryScope, WindowSummary,
};
use prost::bytes::Bytes;
use prost::Message;

mod decode;
mod msg;

pub(crate) use decode::decode;
use msg::{CostsMsg, RouteMsg, SelectionMsg, SpanNameMsg, SummaryMsg};

/// Version of the summary layout written; a decoder reads it, formats 1 and 2, and refuses
/// others.
const FORMAT: u32 = 3;

/// Format 2: as format 3, without request counts; still read.
const FORMAT_2: u32 = 2;

/// The first layout, without costs and span names: still read.
const FORMAT_1: u32 = 1;

/// The largest summary [`decode_summary`] accepts: 64 MiB.
pub const MAX_SUMMARY_LEN: u64 = 64 << 20;

/// Why bytes could not be decoded as a window summary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SummaryError {
    /// The bytes are not a summary message.
    #[error("not a span-profile window summary: protobuf decoding failed ({0}); the file is truncated or corrupt")]
    Protobuf(#[source] prost::DecodeError),
    /// The summary was written in a layout this version does not know.
    #[error(
        "summary format {found} is none of {FORMAT_1}, {FORMAT_2} and {FORMAT}; it was written by another span-profile version"
    )]
    Format {
        /// The format found.
        found: u32,
    },
    /// The summary is larger than [`MAX_SUMMARY_LEN`].
    #[error("the summary is {len} bytes, more than the {MAX_SUMMARY_LEN}-byte limit")]
    TooLarge {
        /// Its length.
        len: u64,
    },
    /// A field refers to a string past the end of the string table.
    #[error(
        "route {route}: {field} refers to string {index}, but the string table has {len} entries"
    )]
    StringIndex {
        /// The route's position in the summary.
        route: usize,
        /// The field.
        field: &'static str,
        /// The index found.
        index: u32,
        /// The string table's length.
        len: usize,
    },
    /// The summary lacks its last field: the file was cut short.
    #[error("the summary ends early; the file is truncated")]
    Incomplete,
    /// The routes' samples do not add up to the window's: a summary cut short.
    #[error(
        "the routes hold {routes} {what} samples, the window {window}; the summary is incomplete"
    )]
    Totals {
        /// `wall` or `CPU`.
        what: &'static str,
        /// The sum over the routes.
        routes: u64,
        /// The window's total.
        window: u64,
    },
    /// Counts contradict each other (a frame with more samples than its route, …).
    #[error("route {route}: {what}; the summary is corrupt")]
    Counts {
        /// The route's position in the summary.
        route: usize,
        /// What does not hold.
        what: &'static str,
    },
    /// Columns that must be as long as each other are not.
    #[error("route {route}: the {what} columns have different lengths")]
    Columns {
        /// The route's position in the summary.
        route: usize,
        /// Which columns.
        what: &'static str,
    },
}

/// A decoded sidecar: the summary, and the length of the pprof file it was made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSummary {
    /// The window's summary.
    pub summary: WindowSummary,
    /// Length in bytes of the window's pprof file when the summary was written.
    pub pprof_len: u64,
}

/// Encodes a window's summary as the sidecar of a pprof file of `pprof_len` bytes.
///
/// ```
/// use span_profile_core::{Profile, Resource};
/// use span_profile_export::store::summary::WindowSummary;
/// use span_profile_export::store::{decode_summary, encode_summary};
///
/// let p = Profile::empty(Resource::default(), 0, 60_000_000_000, 10_000_000);
/// let s = WindowSummary::from_profile(&p);
/// let back = decode_summary(&encode_summary(&s, 1234)).unwrap();
/// assert_eq!((back.summary, back.pprof_len), (s, 1234));
/// assert!(decode_summary(b"\xff\xff").is_err());
/// ```
pub fn encode_summary(s: &WindowSummary, pprof_len: u64) -> Vec<u8> {
    let route_msg = |r: &RouteSummary| {
        let (cpu_function, cpu_samples_by_function) = r.function_cpu.iter().copied().unzip();
        let (root_function, root_cpu) = r.root_cpu.iter().copied().unzip();
        let msg = RouteMsg {
            route: r.route,
            wall_samples: r.wall_samples,
            cpu_samples: r.cpu_samples,
            frame_function: r.frames.iter().map(|f| f.function).collect(),
            frame_file: r.frames.iter().map(|f| f.file).collect(),
            frame_self_wall: r.frames.iter().map(|f| f.self_wall).collect(),
            frame_total_wall: r.frames.iter().map(|f| f.total_wall).collect(),
            cpu_function,
            cpu_samples_by_function,
            root_function,
            root_cpu,
            self_function: r.self_cpu.iter().map(|l| l.function).collect(),
            self_file: r.self_cpu.iter().map(|l| l.file).collect(),
            self_cpu: r.self_cpu.iter().map(|l| l.cpu_samples).collect(),
        };
        Bytes::from(msg.encode_to_vec())
    };
    let selection_msg = |s: &SelectionSummary| SelectionMsg {
        wall_samples: s.wall_samples,
        cpu_samples: s.cpu_samples,
        frame_function: s.frames.iter().map(|f| f.function).collect(),
        frame_file: s.frames.iter().map(|f| f.file).collect(),
        frame_self_wall: s.frames.iter().map(|f| f.self_wall).collect(),
        frame_total_wall: s.frames.iter().map(|f| f.total_wall).collect(),
    };
    let span_name_msg = |n: &SpanNameSummary| {
        let msg = SpanNameMsg {
            name: n.name,
            span_id: n.spans.iter().map(|s| s.span_id.to_u64()).collect(),
            start_unix_ns: n.spans.iter().map(|s| s.start_unix_ns).collect(),
            end_unix_ns: n.spans.iter().map(|s| s.end_unix_ns.unwrap_or(0)).collect(),
            ended: n.spans.iter().map(|s| s.end_unix_ns.is_some()).collect(),
            samples: n.spans.iter().map(|s| s.samples).collect(),
            own_samples: n.spans.iter().map(|s| s.own_samples).collect(),
            with_descendants: Some(selection_msg(&n.with_descendants)),
            own: Some(selection_msg(&n.own)),
        };
        Bytes::from(msg.encode_to_vec())
    };
    let costs = s.costs.as_ref().map(|c| CostsMsg {
        route: c.routes.iter().map(|r| r.route).collect(),
        cpu_samples: c.routes.iter().map(|r| r.cpu_samples).collect(),
        cpu_ns: c.routes.iter().map(|r| r.cpu_ns).collect(),
        requests_unknown: c.routes.iter().map(|r| r.requests_unknown).collect(),
        request_route: c.requests.iter().map(|&(r, _)| r).collect(),
        request_span: c.requests.iter().map(|&(_, id)| id.to_u64()).collect(),
        counted: c.counted.is_some(),
        counted_route: c.counted.iter().flatten().map(|&(r, _)| r).collect(),
        counted_requests: c.counted.iter().flatten().map(|&(_, n)| n).collect(),
    });
    SummaryMsg {
        format: FORMAT,
        pprof_len,
        service: s.service.clone(),
        version: s.version.clone(),
        start_unix_ns: s.start_unix_ns,
        duration_ns: s.duration_ns,
        wall_samples: s.wall_samples,
        cpu_samples: s.cpu_samples,
        strings: s.strings.clone(),
        routes: s.routes.iter().map(route_msg).collect(),
        all_routes: s.all_routes.as_ref().map(route_msg),
        environment: s.deployment.as_ref().and_then(|d| d.environment.clone()),
        instance: s.deployment.as_ref().and_then(|d| d.instance.clone()),
        deployment: s.deployment.is_some(),
        complete: true,
        period_ns: s.period_ns,
        unsampled_spans: s.unsampled_spans,
        costs,
        span_names: s.span_names.iter().flatten().map(span_name_msg).collect(),
        has_span_names: s.span_names.is_some(),
        complete_2: true,
    }
    .encode_to_vec()
}

/// Decodes a sidecar written by [`encode_summary`]. Never panics, whatever the bytes: the
/// last field must be there (a cut file is refused), every string index is checked, parallel
/// columns must have equal lengths, and the routes' samples must add up to the window's.
pub fn decode_summary(data: &[u8]) -> Result<StoredSummary, SummaryError> {
    decode(Bytes::copy_from_slice(data), &SummaryScope::Whole)
}

/// [`decode_summary`], decoding only what `scope` needs: one route, or the total of all
/// routes (the whole summary if it has no total). The summary's
/// [`scope`](WindowSummary::scope) says what it holds; it answers nothing it does not hold.
/// Every route's name and sample counts are still read and checked.
///
/// ```
/// use span_profile_export::store::query::Filter;
/// use span_profile_export::store::summary::{SummaryScope, WindowSummary};
/// use span_profile_export::store::{decode_summary_scoped, encode_summary};
/// # let p = span_profile_core::Profile::empty(Default::default(), 0, 60_000_000_000, 10_000_000);
/// let bytes = encode_summary(&WindowSummary::from_profile(&p), 0);
/// let route = SummaryScope::Route("/checkout".into());
/// let s = decode_summary_scoped(bytes, &route).unwrap().summary;
/// assert!(s.report(&Filter::default().route("/checkout")).is_some());
/// assert!(s.report(&Filter::default()).is_none(), "not every route was decoded");
/// ```
pub fn decode_summary_scoped(
    data: impl Into<Bytes>,
    scope: &SummaryScope,
) -> Result<StoredSummary, SummaryError> {
    decode(data.into(), scope)
}

#[cfg(test)]
mod tests {
    use super::*;
    use span_profile_core::{Frame, Profile, ProfileSample, Resource, Stack};
    use std::sync::Arc;

    fn summary() -> WindowSummary {
        let mut p = Profile::empty(
            Resource {
                service: "checkout".into(),
                version: Some("1.4.2".into()),
                environment: Some("prod".into()),
                instance: Some("web-1".into()),
                ..Resource::default()
            },
            1_700_000_000_000_000_000,
            60_000_000_000,
            10_000_000,
        );
        p.frames = vec![
            Frame::new("serve", "app.py", 1),
            Frame::new("parse_date", "dates.py", 7),
            Frame::new("idle", "threading.py", 3),
        ];
        p.stacks = vec![
            Stack {
                frames: vec![1, 0],
                truncated: false,
            },
            Stack {
                frames: vec![2],
                truncated: false,
            },
        ];
        for (stack, route, n) in [
            (0, "/orders", 7),
            (1, "background", 300),
            (0, "/checkout", 2),
        ] {
            p.samples.push(
                ProfileSample::new(stack, Arc::from(route), Arc::from("w"))
                    .with_cpu(n / 2, 0)
                    .with_wall(n, 0),
            );
        }
        WindowSummary::from_profile(&p)
    }

    #[test]
    fn round_trips() {
        let s = summary();
        let bytes = encode_summary(&s, 99);
        let back = decode_summary(&bytes).unwrap();
        assert_eq!(back.summary, s);
        assert_eq!(back.pprof_len, 99);
        // Format 3; format 1's end marker; format 2's (tag 21: two bytes of key).
        assert_eq!(
            encode_summary(&WindowSummary::default(), 0),
            vec![8, 3, 15 << 3, 1, 0xa8, 0x01, 1]
        );
    }

    #[test]
    fn request_counts_round_trip_and_a_format_2_summary_has_none() {
        use crate::store::query::Filter;
        let mut counted = summary();
        let costs = counted.costs.as_mut().unwrap();
        let route = costs.routes[0].route;
        costs.requests.clear();
        costs.counted = Some(vec![(route, 1_234)]);
        let back = decode_summary(&encode_summary(&counted, 0))
            .unwrap()
            .summary;
        assert_eq!(back, counted);
        let name = back.string(route).to_owned();
        let a = back.cost_attribution(&Filter::default()).unwrap();
        assert_eq!(a.routes[&name].requests.count(), 1_234);
        assert!(!a.routes[&name].requests.sampled_only);

        // Written by a version that knew format 2 only: the same message without the counts.
        let mut old = SummaryMsg::decode(encode_summary(&counted, 0).as_slice()).unwrap();
        old.format = 2;
        let back = decode_summary(&old.encode_to_vec()).unwrap().summary;
        assert_eq!(back.costs.as_ref().unwrap().counted, None);
        let a = back.cost_attribution(&Filter::default()).unwrap();
        assert_eq!(a.routes[&name].requests.count(), 0);
        assert!(a.routes[&name].requests.sampled_only);

        // Counts without the flag, or columns of different lengths, are refused.
        let mut bad = SummaryMsg::decode(encode_summary(&counted, 0).as_slice()).unwrap();
        bad.costs.as_mut().unwrap().counted_requests.push(1);
        assert!(matches!(
            decode_summary(&bad.encode_to_vec()),
            Err(SummaryError::Columns {
                what: "request count",
                ..
            })
        ));
        let mut bad = SummaryMsg::decode(encode_summary(&counted, 0).as_slice()).unwrap();
        bad.costs.as_mut().unwrap().counted = false;
        assert!(matches!(
            decode_summary(&bad.encode_to_vec()),
            Err(SummaryError::Columns {
                what: "request count",
                ..
            })
        ));
    }

    #[test]
    fn a_format_1_summary_still_reads_and_declines_what_it_lacks() {
        use crate::store::query::Filter;
        let s = summary();
        let mut msg = SummaryMsg::decode(encode_summary(&s, 7).as_slice()).unwrap();
        msg.format = 1;
        let old = decode_summary(&msg.encode_to_vec()).unwrap().summary;
        assert!(old.costs.is_none() && old.span_names.is_none());
        assert!(old.routes.iter().all(|r| r.self_cpu.is_empty()));
        let f = Filter::default();
        // What format 1 holds is answered as before.
        assert_eq!(old.report(&f).unwrap().samples, 309);
        assert_eq!(old.cpu_by_frame(&f), s.cpu_by_frame(&f));
        // What it lacks is declined: the window is decoded.
        assert!(old.self_cpu_by_frame(&f).is_none());
        assert!(old.route_cpu(&f).is_none());
        assert!(old.cost_attribution(&f).is_none());
        let named = Filter::default().span_name("GET /orders", true);
        assert!(old.span_name_report(&named).is_none());
        assert!(old.span_name_tally(&named).is_none());
        // The same summary in format 2 answers all of them.
        let new = decode_summary(&encode_summary(&s, 7)).unwrap().summary;
        assert_eq!(new, s);
        assert_eq!(new.self_cpu_by_frame(&f).unwrap().total, 154);
        assert!(new.route_cpu(&f).is_some() && new.cost_attribution(&f).is_some());
        assert!(new.span_name_report(&named).is_some());
        // A format 2 summary without its end marker is cut short.
        let mut cut = SummaryMsg::decode(encode_summary(&s, 7).as_slice()).unwrap();
        cut.complete_2 = false;
        assert!(matches!(
            decode_summary(&cut.encode_to_vec()),
            Err(SummaryError::Incomplete)
        ));
    }

    #[test]
    fn the_environment_and_instance_round_trip_and_an_older_summary_declines_them() {
        use crate::store::query::Filter;
        let s = summary();
        let back = decode_summary(&encode_summary(&s, 3)).unwrap().summary;
        let d = back.deployment.as_ref().unwrap();
        assert_eq!(
            (d.environment.as_deref(), d.instance.as_deref()),
            (Some("prod"), Some("web-1"))
        );
        let prod = Filter::default().environment("prod");
        assert!(back.can_answer(&prod));
        assert_eq!(back.report(&prod).unwrap().samples, 309);
        assert_eq!(
            back.report(&prod.clone().instance("web-2"))
                .unwrap()
                .samples,
            0
        );
        // Written before summaries recorded them: no deployment, and filters by either are
        // declined (the window is decoded), while the rest is still answered.
        let mut old = s.clone();
        old.deployment = None;
        let back = decode_summary(&encode_summary(&old, 3)).unwrap().summary;
        assert_eq!(back.deployment, None);
        assert!(!back.can_answer(&prod) && back.report(&prod).is_none());
        assert!(back.report(&Filter::default().instance("web-1")).is_none());
        assert_eq!(back.report(&Filter::default()).unwrap().samples, 309);
    }

    #[test]
    fn route_names_alone_answer_no_question_about_frames() {
        use crate::store::query::Filter;
        let s = summary();
        let names =
            decode_summary_scoped(encode_summary(&s, 1), &SummaryScope::RouteNames).unwrap();
        let n = &names.summary;
        let listed: Vec<(&str, u64, u64)> = n
            .routes
            .iter()
            .map(|r| (n.string(r.route), r.wall_samples, r.cpu_samples))
            .collect();
        assert_eq!(
            listed,
            [
                ("/checkout", 2, 1),
                ("/orders", 7, 3),
                ("background", 300, 150)
            ]
        );
        assert!(n.routes.iter().all(|r| r.frames.is_empty()));
        assert!(n.report(&Filter::default()).is_none());
        assert!(n.report(&Filter::default().route("/orders")).is_none());
        assert!(n.cpu_by_frame(&Filter::default()).is_none());
        assert!(n.frame_cpu_by_route(&Filter::default(), "serve").is_none());
    }

    #[test]
    fn a_part_is_decoded_alone_and_answers_as_the_whole() {
        use crate::store::query::Filter;
        let s = summary();
        let bytes = encode_summary(&s, 5);
        let total = decode_summary_scoped(bytes.clone(), &SummaryScope::AllRoutes).unwrap();
        assert!(total.summary.routes.is_empty());
        assert_eq!(total.summary.all_routes, s.all_routes);
        let f = Filter::default();
        assert_eq!(total.summary.cpu_by_frame(&f), s.cpu_by_frame(&f));
        assert!(total.summary.frame_cpu_by_route(&f, "serve").is_none());
        // A summary without the total: all routes are decoded instead.
        let mut old = s.clone();
        old.all_routes = None;
        let whole = decode_summary_scoped(encode_summary(&old, 5), &SummaryScope::AllRoutes);
        assert_eq!(whole.unwrap().summary, old);
        for route in ["/orders", "background", "/nowhere"] {
            let scope = SummaryScope::Route(route.into());
            let one = decode_summary_scoped(bytes.clone(), &scope).unwrap();
            assert_eq!(one.pprof_len, 5);
            assert_eq!(one.summary.scope, scope);
            assert!(one.summary.routes.len() <= 1 && one.summary.all_routes.is_none());
            let f = Filter::default().route(route);
            let (a, b) = (one.summary.report(&f).unwrap(), s.report(&f).unwrap());
            assert_eq!(
                (a.samples, a.window_samples, a.frames),
                (b.samples, b.window_samples, b.frames)
            );
            assert!(one.summary.cpu_by_frame(&Filter::default()).is_none());
            assert!(one
                .summary
                .report(&Filter::default().route("/checkout"))
                .is_none());
        }
    }

    #[test]
    fn truncated_corrupt_and_garbage_input_is_an_error_not_a_panic() {
        let bytes = encode_summary(&summary(), 1);
        // Every truncation is refused: a cut file lacks the last field.
        for n in 0..bytes.len() {
            assert!(decode_summary(&bytes[..n]).is_err(), "cut at {n}");
        }
        for n in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            assert!(decode_summary(&bytes[..n]).is_err(), "cut at {n}");
        }
        // Every single-byte corruption.
        for i in 0..bytes.len() {
            for v in [0x00, 0x7f, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] = v;
                let _ = decode_summary(&b);
            }
        }
        // The same through the partial decoders.
        let route = SummaryScope::Route("/orders".into());
        for n in 0..bytes.len() {
            for scope in [&route, &SummaryScope::AllRoutes] {
                let cut = decode_summary_scoped(bytes[..n].to_vec(), scope);
                assert!(cut.is_err(), "cut at {n}");
            }
        }
        // Arbitrary bytes.
        let mut rng = span_profile_test::XorShift(0x9e37_79b9_7f4a_7c15);
        for len in 0..2_000 {
            let junk: Vec<u8> = (0..len % 300).map(|_| rng.next_u64() as u8).collect();
            let _ = decode_summary(&junk);
            let _ = decode_summary_scoped(junk.clone(), &SummaryScope::Route(String::new()));
            let _ = decode_summary_scoped(junk, &SummaryScope::AllRoutes);
        }
        assert!(matches!(
            decode_summary(b"\xff\xff\xff"),
            Err(SummaryError::Protobuf(_))
        ));
        // A pprof file is not a summary.
        assert!(decode_summary(&crate::encode_pprof(&Profile::empty(
            Resource::default(),
            0,
            1,
            1
        )))
        .is_err());
    }

    #[test]
    fn indices_and_columns_are_checked() {
        let mut s = summary();
        s.routes[0].frames[0].file = 1_000;
        let e = decode_summary(&encode_summary(&s, 0)).unwrap_err();
        assert!(
            matches!(e, SummaryError::StringIndex { index: 1_000, .. }),
            "{e}"
        );

        let mut msg = SummaryMsg::decode(encode_summary(&summary(), 0).as_slice()).unwrap();
        let mut route = RouteMsg::decode(msg.routes[0].clone()).unwrap();
        route.frame_total_wall.pop();
        msg.routes[0] = Bytes::from(route.encode_to_vec());
        let e = decode_summary(&msg.encode_to_vec()).unwrap_err();
        assert!(
            matches!(e, SummaryError::Columns { what: "frame", .. }),
            "{e}"
        );

        // Counts that contradict each other.
        let mut bad = summary();
        bad.routes[0].frames[0].total_wall = bad.routes[0].wall_samples + 1;
        let e = decode_summary(&encode_summary(&bad, 0)).unwrap_err();
        assert!(matches!(e, SummaryError::Counts { route: 0, .. }), "{e}");
        let mut bad = summary();
        bad.routes[1].root_cpu[0].1 += 1;
        let e = decode_summary(&encode_summary(&bad, 0)).unwrap_err();
        assert!(matches!(e, SummaryError::Counts { route: 1, .. }), "{e}");

        // A route missing (the end marker kept): the totals no longer add up.
        let mut cut = SummaryMsg::decode(encode_summary(&summary(), 0).as_slice()).unwrap();
        cut.routes.pop();
        let e = decode_summary(&cut.encode_to_vec()).unwrap_err();
        assert!(
            matches!(e, SummaryError::Totals { what: "wall", .. }),
            "{e}"
        );

        msg.format = 4;
        let e = decode_summary(&msg.encode_to_vec()).unwrap_err();
        assert!(
            e.to_string().contains("another span-profile version"),
            "{e}"
        );
    }
}
