//! Decoding a sidecar: every index, column and total checked, never a panic.

use super::msg::{
    CostsMsg, RouteHead, RouteMsg, SelectionMsg, SpanNameHead, SpanNameMsg, SummaryMsg,
};
use super::{StoredSummary, SummaryError, FORMAT, FORMAT_1, FORMAT_2, MAX_SUMMARY_LEN};
use crate::store::summary::{
    Deployment, FrameSummary, LeafCpu, NamedSpan, RouteCosts, RouteSummary, SelectionSummary,
    SpanNameSummary, SummaryScope, WindowCosts, WindowSummary,
};
use prost::bytes::Bytes;
use prost::Message;
use span_profile_core::SpanId;

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
