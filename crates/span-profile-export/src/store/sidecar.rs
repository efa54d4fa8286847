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
//! The message also records the length of the pprof file it summarizes, so that a reader can
//! tell a summary from the window next to it apart from a stale one.

use crate::store::summary::{Deployment, FrameSummary, RouteSummary, SummaryScope, WindowSummary};
use prost::bytes::Bytes;
use prost::Message;

/// Version of the summary layout; a decoder refuses newer ones.
const FORMAT: u32 = 1;

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
        "summary format {found} is not {FORMAT}; it was written by another span-profile version"
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

#[derive(Clone, PartialEq, prost::Message)]
struct SummaryMsg {
    #[prost(uint32, tag = "1")]
    format: u32,
    #[prost(uint64, tag = "2")]
    pprof_len: u64,
    #[prost(string, tag = "3")]
    service: String,
    #[prost(string, optional, tag = "4")]
    version: Option<String>,
    #[prost(uint64, tag = "5")]
    start_unix_ns: u64,
    #[prost(uint64, tag = "6")]
    duration_ns: u64,
    #[prost(uint64, tag = "7")]
    wall_samples: u64,
    #[prost(uint64, tag = "8")]
    cpu_samples: u64,
    #[prost(string, repeated, tag = "9")]
    strings: Vec<String>,
    /// Each a [`RouteMsg`], kept as bytes so that routes are decoded only when wanted.
    #[prost(bytes = "bytes", repeated, tag = "10")]
    routes: Vec<Bytes>,
    /// All routes added up (a [`RouteMsg`] whose `route` is unused); absent in a summary
    /// without it.
    #[prost(bytes = "bytes", optional, tag = "11")]
    all_routes: Option<Bytes>,
    /// `deployment.environment`.
    #[prost(string, optional, tag = "12")]
    environment: Option<String>,
    /// The instance label.
    #[prost(string, optional, tag = "13")]
    instance: Option<String>,
    /// True when tags 12 and 13 were written (their absence then means unset); false in a
    /// summary from before they were.
    #[prost(bool, tag = "14")]
    deployment: bool,
    /// Always true, and the last field written (prost writes fields by tag): a summary cut
    /// anywhere lacks it.
    #[prost(bool, tag = "15")]
    complete: bool,
}

/// The first fields of a [`RouteMsg`]: decoding a route's bytes as this skips its columns.
#[derive(Clone, PartialEq, prost::Message)]
struct RouteHead {
    #[prost(uint32, tag = "1")]
    route: u32,
    #[prost(uint64, tag = "2")]
    wall_samples: u64,
    #[prost(uint64, tag = "3")]
    cpu_samples: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RouteMsg {
    #[prost(uint32, tag = "1")]
    route: u32,
    #[prost(uint64, tag = "2")]
    wall_samples: u64,
    #[prost(uint64, tag = "3")]
    cpu_samples: u64,
    #[prost(uint32, repeated, tag = "4")]
    frame_function: Vec<u32>,
    #[prost(uint32, repeated, tag = "5")]
    frame_file: Vec<u32>,
    #[prost(uint64, repeated, tag = "6")]
    frame_self_wall: Vec<u64>,
    #[prost(uint64, repeated, tag = "7")]
    frame_total_wall: Vec<u64>,
    #[prost(uint32, repeated, tag = "8")]
    cpu_function: Vec<u32>,
    #[prost(uint64, repeated, tag = "9")]
    cpu_samples_by_function: Vec<u64>,
    #[prost(uint32, repeated, tag = "10")]
    root_function: Vec<u32>,
    #[prost(uint64, repeated, tag = "11")]
    root_cpu: Vec<u64>,
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
        };
        Bytes::from(msg.encode_to_vec())
    };
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

/// [`decode_summary_scoped`] without a copy.
pub(crate) fn decode(data: Bytes, scope: &SummaryScope) -> Result<StoredSummary, SummaryError> {
    if data.len() as u64 > MAX_SUMMARY_LEN {
        return Err(SummaryError::TooLarge {
            len: data.len() as u64,
        });
    }
    let msg = SummaryMsg::decode(data).map_err(SummaryError::Protobuf)?;
    if msg.format != FORMAT {
        return Err(SummaryError::Format { found: msg.format });
    }
    if !msg.complete {
        return Err(SummaryError::Incomplete);
    }
    let n = msg.strings.len();
    let check = |route, field, index: u32| {
        if (index as usize) < n {
            Ok(index)
        } else {
            Err(SummaryError::StringIndex {
                route,
                field,
                index,
                len: n,
            })
        }
    };
    // Without a total of all routes, a question about all routes needs every route.
    let scope = match (scope, &msg.all_routes) {
        (SummaryScope::AllRoutes, None) => &SummaryScope::Whole,
        _ => scope,
    };
    let all_routes = match (scope, &msg.all_routes) {
        (SummaryScope::Whole | SummaryScope::AllRoutes, Some(body)) => {
            // Reported as the route after the last one.
            let at = msg.routes.len();
            let r = RouteMsg::decode(body.clone()).map_err(SummaryError::Protobuf)?;
            let r = route_summary(at, r, |field, index| check(at, field, index))?;
            check_totals(&msg, r.wall_samples, r.cpu_samples)?;
            Some(r)
        }
        _ => None,
    };
    let mut routes = Vec::new();
    let (mut wall, mut cpu) = (Some(0u64), Some(0u64));
    for (i, body) in msg.routes.iter().enumerate() {
        let head = RouteHead::decode(body.clone()).map_err(SummaryError::Protobuf)?;
        let name = check(i, "route", head.route)?;
        wall = wall.and_then(|w| w.checked_add(head.wall_samples));
        cpu = cpu.and_then(|c| c.checked_add(head.cpu_samples));
        let wanted = match scope {
            SummaryScope::Whole => true,
            SummaryScope::Route(want) => msg.strings.get(name as usize) == Some(want),
            SummaryScope::RouteNames => {
                routes.push(RouteSummary {
                    route: name,
                    wall_samples: head.wall_samples,
                    cpu_samples: head.cpu_samples,
                    ..RouteSummary::default()
                });
                false
            }
            _ => false,
        };
        if wanted {
            let r = RouteMsg::decode(body.clone()).map_err(SummaryError::Protobuf)?;
            routes.push(route_summary(i, r, |field, index| check(i, field, index))?);
        }
    }
    let (Some(wall), Some(cpu)) = (wall, cpu) else {
        return Err(SummaryError::Totals {
            what: "wall or CPU",
            routes: u64::MAX,
            window: msg.wall_samples.max(msg.cpu_samples),
        });
    };
    check_totals(&msg, wall, cpu)?;
    Ok(StoredSummary {
        summary: WindowSummary {
            service: msg.service,
            version: msg.version,
            deployment: msg.deployment.then_some(Deployment {
                environment: msg.environment,
                instance: msg.instance,
            }),
            start_unix_ns: msg.start_unix_ns,
            duration_ns: msg.duration_ns,
            wall_samples: msg.wall_samples,
            cpu_samples: msg.cpu_samples,
            strings: msg.strings,
            routes,
            all_routes,
            scope: scope.clone(),
        },
        pprof_len: msg.pprof_len,
    })
}

/// Routes that hold `wall` and `cpu` samples must hold all the window's.
fn check_totals(msg: &SummaryMsg, wall: u64, cpu: u64) -> Result<(), SummaryError> {
    for (what, window, routes) in [
        ("wall", msg.wall_samples, wall),
        ("CPU", msg.cpu_samples, cpu),
    ] {
        if routes != window {
            return Err(SummaryError::Totals {
                what,
                routes,
                window,
            });
        }
    }
    Ok(())
}

/// One decoded route, its columns checked; `check` checks a string index.
fn route_summary(
    route: usize,
    r: RouteMsg,
    check: impl Fn(&'static str, u32) -> Result<u32, SummaryError>,
) -> Result<RouteSummary, SummaryError> {
    let columns = |what, ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(SummaryError::Columns { route, what })
        }
    };
    let f = r.frame_function.len();
    columns(
        "frame",
        r.frame_file.len() == f && r.frame_self_wall.len() == f && r.frame_total_wall.len() == f,
    )?;
    columns(
        "function CPU",
        r.cpu_function.len() == r.cpu_samples_by_function.len(),
    )?;
    columns("root CPU", r.root_function.len() == r.root_cpu.len())?;
    let mut frames = Vec::with_capacity(f);
    for (((&function, &file), &self_wall), &total_wall) in r
        .frame_function
        .iter()
        .zip(&r.frame_file)
        .zip(&r.frame_self_wall)
        .zip(&r.frame_total_wall)
    {
        frames.push(FrameSummary {
            function: check("frame function", function)?,
            file: check("frame file", file)?,
            self_wall,
            total_wall,
        });
    }
    let pairs = |names: &[u32], counts: &[u64], field| {
        names
            .iter()
            .zip(counts)
            .map(|(&name, &count)| Ok((check(field, name)?, count)))
            .collect::<Result<Vec<_>, SummaryError>>()
    };
    // What counting guarantees: a frame's self samples are among its total, which are among
    // the route's (each sample counts once); a function's CPU samples are among the route's;
    // every CPU sample has exactly one outermost frame. So no sum a query makes of one
    // summary's counts can overflow.
    let counts = |what, ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(SummaryError::Counts { route, what })
        }
    };
    counts(
        "a frame has more samples than its route",
        frames
            .iter()
            .all(|f| f.self_wall <= f.total_wall && f.total_wall <= r.wall_samples),
    )?;
    counts(
        "a function has more CPU samples than its route",
        r.cpu_samples_by_function
            .iter()
            .all(|&n| n <= r.cpu_samples),
    )?;
    let roots = r
        .root_cpu
        .iter()
        .try_fold(0u64, |sum, &n| sum.checked_add(n));
    counts(
        "the CPU samples by outermost frame do not add up to the route's",
        roots == Some(r.cpu_samples),
    )?;
    Ok(RouteSummary {
        route: check("route", r.route)?,
        wall_samples: r.wall_samples,
        cpu_samples: r.cpu_samples,
        frames,
        function_cpu: pairs(&r.cpu_function, &r.cpu_samples_by_function, "function")?,
        root_cpu: pairs(&r.root_function, &r.root_cpu, "root function")?,
    })
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
        assert_eq!(
            encode_summary(&WindowSummary::default(), 0),
            vec![8, 1, 15 << 3, 1]
        );
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

        msg.format = 2;
        let e = decode_summary(&msg.encode_to_vec()).unwrap_err();
        assert!(
            e.to_string().contains("another span-profile version"),
            "{e}"
        );
    }
}
