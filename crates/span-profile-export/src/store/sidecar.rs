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
    Deployment, FrameSummary, LeafCpu, NamedSpan, RouteCosts, RouteSummary, SelectionSummary,
    SpanNameSummary, SummaryScope, WindowCosts, WindowSummary,
};
use prost::bytes::Bytes;
use prost::Message;
use span_profile_core::SpanId;

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
    /// Always true; the last field of format 1 (prost writes fields by tag): a format 1
    /// summary cut anywhere lacks it.
    #[prost(bool, tag = "15")]
    complete: bool,
    /// The window's sampling period (format 2).
    #[prost(uint64, tag = "16")]
    period_ns: u64,
    /// Spans the window left out for having no sample (format 2).
    #[prost(uint64, tag = "17")]
    unsampled_spans: u64,
    /// CPU time and requests by route (format 2).
    #[prost(message, optional, tag = "18")]
    costs: Option<CostsMsg>,
    /// Each a [`SpanNameMsg`], kept as bytes so that only the name asked about is decoded
    /// (format 2).
    #[prost(bytes = "bytes", repeated, tag = "19")]
    span_names: Vec<Bytes>,
    /// True when tag 19 holds every span name of the window (its absence then means none).
    #[prost(bool, tag = "20")]
    has_span_names: bool,
    /// Always true in format 2, and its last field: a format 2 summary cut anywhere lacks it.
    #[prost(bool, tag = "21")]
    complete_2: bool,
}

/// [`WindowCosts`] as parallel columns.
#[derive(Clone, PartialEq, prost::Message)]
struct CostsMsg {
    #[prost(uint32, repeated, tag = "1")]
    route: Vec<u32>,
    #[prost(uint64, repeated, tag = "2")]
    cpu_samples: Vec<u64>,
    #[prost(uint64, repeated, tag = "3")]
    cpu_ns: Vec<u64>,
    #[prost(bool, repeated, tag = "4")]
    requests_unknown: Vec<bool>,
    #[prost(uint32, repeated, tag = "5")]
    request_route: Vec<u32>,
    #[prost(fixed64, repeated, tag = "6")]
    request_span: Vec<u64>,
    /// True when tags 8 and 9 hold the window's request counts (format 3).
    #[prost(bool, tag = "7")]
    counted: bool,
    #[prost(uint32, repeated, tag = "8")]
    counted_route: Vec<u32>,
    #[prost(uint64, repeated, tag = "9")]
    counted_requests: Vec<u64>,
}

/// The first field of a [`SpanNameMsg`]: decoding its bytes as this skips the rest.
#[derive(Clone, PartialEq, prost::Message)]
struct SpanNameHead {
    #[prost(uint32, tag = "1")]
    name: u32,
}

/// A [`SpanNameSummary`] as parallel columns.
#[derive(Clone, PartialEq, prost::Message)]
struct SpanNameMsg {
    #[prost(uint32, tag = "1")]
    name: u32,
    #[prost(fixed64, repeated, tag = "2")]
    span_id: Vec<u64>,
    #[prost(uint64, repeated, tag = "3")]
    start_unix_ns: Vec<u64>,
    #[prost(uint64, repeated, tag = "4")]
    end_unix_ns: Vec<u64>,
    #[prost(bool, repeated, tag = "5")]
    ended: Vec<bool>,
    #[prost(uint64, repeated, tag = "6")]
    samples: Vec<u64>,
    #[prost(uint64, repeated, tag = "7")]
    own_samples: Vec<u64>,
    #[prost(message, optional, tag = "8")]
    with_descendants: Option<SelectionMsg>,
    #[prost(message, optional, tag = "9")]
    own: Option<SelectionMsg>,
}

/// A [`SelectionSummary`] as parallel columns.
#[derive(Clone, PartialEq, prost::Message)]
struct SelectionMsg {
    #[prost(uint64, tag = "1")]
    wall_samples: u64,
    #[prost(uint64, tag = "2")]
    cpu_samples: u64,
    #[prost(uint32, repeated, tag = "3")]
    frame_function: Vec<u32>,
    #[prost(uint32, repeated, tag = "4")]
    frame_file: Vec<u32>,
    #[prost(uint64, repeated, tag = "5")]
    frame_self_wall: Vec<u64>,
    #[prost(uint64, repeated, tag = "6")]
    frame_total_wall: Vec<u64>,
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
    #[prost(uint32, repeated, tag = "12")]
    self_function: Vec<u32>,
    #[prost(uint32, repeated, tag = "13")]
    self_file: Vec<u32>,
    #[prost(uint64, repeated, tag = "14")]
    self_cpu: Vec<u64>,
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

/// [`decode_summary_scoped`] without a copy.
pub(crate) fn decode(data: Bytes, scope: &SummaryScope) -> Result<StoredSummary, SummaryError> {
    if data.len() as u64 > MAX_SUMMARY_LEN {
        return Err(SummaryError::TooLarge {
            len: data.len() as u64,
        });
    }
    let mut msg = SummaryMsg::decode(data).map_err(SummaryError::Protobuf)?;
    match msg.format {
        FORMAT_1 => {
            // Whatever a format 1 file holds past its fields is not read.
            msg.costs = None;
            msg.span_names.clear();
            msg.has_span_names = false;
            msg.period_ns = 0;
            msg.unsampled_spans = 0;
        }
        FORMAT_2 | FORMAT if msg.complete_2 => {
            if msg.format == FORMAT_2 {
                if let Some(c) = &mut msg.costs {
                    c.counted = false;
                    c.counted_route.clear();
                    c.counted_requests.clear();
                }
            }
        }
        FORMAT_2 | FORMAT => return Err(SummaryError::Incomplete),
        found => return Err(SummaryError::Format { found }),
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
    let format_1 = msg.format == FORMAT_1;
    let all_routes = match (scope, &msg.all_routes) {
        (SummaryScope::Whole | SummaryScope::AllRoutes, Some(body)) => {
            // Reported as the route after the last one.
            let at = msg.routes.len();
            let r = RouteMsg::decode(body.clone()).map_err(SummaryError::Protobuf)?;
            let r = route_summary(at, r, format_1, |field, index| check(at, field, index))?;
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
            SummaryScope::Whole | SummaryScope::Routes => true,
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
            routes.push(route_summary(i, r, format_1, |field, index| {
                check(i, field, index)
            })?);
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
    let costs = match msg.costs.take() {
        Some(c) => Some(window_costs(&msg, c, |field, index| {
            check(usize::MAX, field, index)
        })?),
        None => None,
    };
    let span_names = match scope {
        _ if !msg.has_span_names => None,
        SummaryScope::Whole | SummaryScope::SpanName(_) => {
            let mut names = Vec::new();
            for body in &msg.span_names {
                let head = SpanNameHead::decode(body.clone()).map_err(SummaryError::Protobuf)?;
                let name = check(usize::MAX, "span name", head.name)?;
                if let SummaryScope::SpanName(want) = scope {
                    if msg.strings.get(name as usize) != Some(want) {
                        continue;
                    }
                }
                let n = SpanNameMsg::decode(body.clone()).map_err(SummaryError::Protobuf)?;
                names.push(span_name_summary(n, |field, index| {
                    check(usize::MAX, field, index)
                })?);
            }
            Some(names)
        }
        _ => None,
    };
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
            period_ns: msg.period_ns,
            unsampled_spans: msg.unsampled_spans,
            costs,
            span_names,
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
    format_1: bool,
    check: impl Fn(&'static str, u32) -> Result<u32, SummaryError>,
) -> Result<RouteSummary, SummaryError> {
    let columns = |what, ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(SummaryError::Columns { route, what })
        }
    };
    columns(
        "function CPU",
        r.cpu_function.len() == r.cpu_samples_by_function.len(),
    )?;
    columns("root CPU", r.root_function.len() == r.root_cpu.len())?;
    let n = r.self_cpu.len();
    columns(
        "self CPU",
        r.self_function.len() == n && r.self_file.len() == n,
    )?;
    let frames = frame_columns(
        route,
        r.wall_samples,
        [&r.frame_function, &r.frame_file],
        [&r.frame_self_wall, &r.frame_total_wall],
        &check,
    )?;
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
    let leaves = r
        .self_cpu
        .iter()
        .try_fold(0u64, |sum, &n| sum.checked_add(n));
    counts(
        "the self CPU samples add up to more than the route's",
        leaves.is_some_and(|n| n <= r.cpu_samples),
    )?;
    let mut self_cpu = Vec::with_capacity(if format_1 { 0 } else { n });
    for ((&function, &file), &cpu_samples) in r
        .self_function
        .iter()
        .zip(&r.self_file)
        .zip(&r.self_cpu)
        .take(if format_1 { 0 } else { n })
    {
        self_cpu.push(LeafCpu {
            function: check("self CPU function", function)?,
            file: check("self CPU file", file)?,
            cpu_samples,
        });
    }
    Ok(RouteSummary {
        route: check("route", r.route)?,
        wall_samples: r.wall_samples,
        cpu_samples: r.cpu_samples,
        frames,
        function_cpu: pairs(&r.cpu_function, &r.cpu_samples_by_function, "function")?,
        root_cpu: pairs(&r.root_function, &r.root_cpu, "root function")?,
        self_cpu,
    })
}

/// Frame columns (function and file; self and total samples) as frames, checked: equal
/// lengths, string indices, and each frame's self samples among its total, its total among the
/// `wall` samples of what it counts (a route or a span name; each sample counts once).
fn frame_columns(
    at: usize,
    wall: u64,
    [function, file]: [&[u32]; 2],
    [self_wall, total_wall]: [&[u64]; 2],
    check: &impl Fn(&'static str, u32) -> Result<u32, SummaryError>,
) -> Result<Vec<FrameSummary>, SummaryError> {
    let n = function.len();
    if file.len() != n || self_wall.len() != n || total_wall.len() != n {
        return Err(SummaryError::Columns {
            route: at,
            what: "frame",
        });
    }
    let mut frames = Vec::with_capacity(n);
    for (((&function, &file), &self_wall), &total_wall) in
        function.iter().zip(file).zip(self_wall).zip(total_wall)
    {
        if self_wall > total_wall || total_wall > wall {
            return Err(SummaryError::Counts {
                route: at,
                what: "a frame has more samples than its route or span name",
            });
        }
        frames.push(FrameSummary {
            function: check("frame function", function)?,
            file: check("frame file", file)?,
            self_wall,
            total_wall,
        });
    }
    Ok(frames)
}

/// The costs, checked: equal columns, string indices, CPU samples that add up to the
/// window's, and CPU time whose sum cannot overflow.
fn window_costs(
    msg: &SummaryMsg,
    c: CostsMsg,
    check: impl Fn(&'static str, u32) -> Result<u32, SummaryError>,
) -> Result<WindowCosts, SummaryError> {
    let at = usize::MAX;
    let n = c.route.len();
    if c.cpu_samples.len() != n || c.cpu_ns.len() != n || c.requests_unknown.len() != n {
        return Err(SummaryError::Columns {
            route: at,
            what: "route cost",
        });
    }
    if c.counted_route.len() != c.counted_requests.len()
        || (!c.counted && !c.counted_route.is_empty())
    {
        return Err(SummaryError::Columns {
            route: at,
            what: "request count",
        });
    }
    if c.request_route.len() != c.request_span.len() {
        return Err(SummaryError::Columns {
            route: at,
            what: "request",
        });
    }
    let cpu = c
        .cpu_samples
        .iter()
        .try_fold(0u64, |sum, &n| sum.checked_add(n));
    if cpu != Some(msg.cpu_samples) {
        return Err(SummaryError::Totals {
            what: "CPU",
            routes: cpu.unwrap_or(u64::MAX),
            window: msg.cpu_samples,
        });
    }
    if c.cpu_ns
        .iter()
        .try_fold(0u64, |sum, &n| sum.checked_add(n))
        .is_none()
    {
        return Err(SummaryError::Counts {
            route: at,
            what: "the routes' CPU time overflows",
        });
    }
    let mut routes = Vec::with_capacity(n);
    for (((&route, &cpu_samples), &cpu_ns), &requests_unknown) in c
        .route
        .iter()
        .zip(&c.cpu_samples)
        .zip(&c.cpu_ns)
        .zip(&c.requests_unknown)
    {
        routes.push(RouteCosts {
            route: check("route cost", route)?,
            cpu_samples,
            cpu_ns,
            requests_unknown,
        });
    }
    let mut requests = Vec::with_capacity(c.request_span.len());
    for (&route, &id) in c.request_route.iter().zip(&c.request_span) {
        let id = SpanId::from_u64(id).ok_or(SummaryError::Counts {
            route: at,
            what: "a request has span id 0",
        })?;
        requests.push((check("request route", route)?, id));
    }
    let counted = if c.counted {
        let mut v = Vec::with_capacity(c.counted_route.len());
        for (&route, &n) in c.counted_route.iter().zip(&c.counted_requests) {
            v.push((check("request count route", route)?, n));
        }
        if v.iter()
            .try_fold(0u64, |sum, &(_, n)| sum.checked_add(n))
            .is_none()
        {
            return Err(SummaryError::Counts {
                route: at,
                what: "the request counts overflow",
            });
        }
        Some(v)
    } else {
        None
    };
    Ok(WindowCosts {
        routes,
        requests,
        counted,
    })
}

/// One span name's entry, checked: equal columns, string indices, non-zero span ids, and
/// counts that contradict nothing (a span's samples among its selection's, a frame's among
/// its selection's), so that no sum a query makes of them can overflow.
fn span_name_summary(
    n: SpanNameMsg,
    check: impl Fn(&'static str, u32) -> Result<u32, SummaryError>,
) -> Result<SpanNameSummary, SummaryError> {
    let at = usize::MAX;
    let len = n.span_id.len();
    if [
        n.start_unix_ns.len(),
        n.end_unix_ns.len(),
        n.ended.len(),
        n.samples.len(),
        n.own_samples.len(),
    ]
    .iter()
    .any(|&l| l != len)
    {
        return Err(SummaryError::Columns {
            route: at,
            what: "span",
        });
    }
    let selection = |m: Option<SelectionMsg>| -> Result<SelectionSummary, SummaryError> {
        let m = m.unwrap_or_default();
        let frames = frame_columns(
            at,
            m.wall_samples,
            [&m.frame_function, &m.frame_file],
            [&m.frame_self_wall, &m.frame_total_wall],
            &check,
        )?;
        Ok(SelectionSummary {
            wall_samples: m.wall_samples,
            cpu_samples: m.cpu_samples,
            frames,
        })
    };
    let with_descendants = selection(n.with_descendants)?;
    let own = selection(n.own)?;
    let sum = |v: &[u64]| v.iter().try_fold(0u64, |s, &x| s.checked_add(x));
    if own.wall_samples > with_descendants.wall_samples
        || own.cpu_samples > with_descendants.cpu_samples
        || sum(&n.samples).is_none_or(|s| s > with_descendants.wall_samples)
        || sum(&n.own_samples).is_none_or(|s| s > own.wall_samples)
    {
        return Err(SummaryError::Counts {
            route: at,
            what: "the spans of a name have more samples than the name",
        });
    }
    let mut spans = Vec::with_capacity(len);
    for i in 0..len {
        let span_id = SpanId::from_u64(n.span_id[i]).ok_or(SummaryError::Counts {
            route: at,
            what: "a span has id 0",
        })?;
        spans.push(NamedSpan {
            span_id,
            start_unix_ns: n.start_unix_ns[i],
            end_unix_ns: n.ended[i].then_some(n.end_unix_ns[i]),
            samples: n.samples[i],
            own_samples: n.own_samples[i],
        });
    }
    Ok(SpanNameSummary {
        name: check("span name", n.name)?,
        spans,
        with_descendants,
        own,
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
