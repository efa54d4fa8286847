//! `span-profile diff --old version=A --new version=B`: the post-deploy check (ADR 0023), and
//! `span-profile diff --span-id X | --slowest NAME`: one span against its peers.

use std::collections::BTreeSet;

use serde::Serialize;
use span_profile_core::SpanId;
use span_profile_export::store::diff::{
    self, compare, DiffOptions, FrameChange, FrameTally, RouteCpu,
};
use span_profile_export::store::peers::{span_vs_peers, PeerComparison};
use span_profile_export::store::{QueryError, Store, Window};

use crate::args::{
    format_duration_ns, parse_duration, parse_fraction, parse_span_id, parse_version_selector,
    VersionSelector,
};
use crate::select::WindowArgs;
use crate::text::Shown;
use crate::{Empty, Usage};

/// Arguments of `diff`.
#[derive(Debug, clap::Args)]
pub(crate) struct DiffArgs {
    /// The deploy before: version=VALUE (`service.version`).
    #[arg(long, value_parser = parse_version_selector, value_name = "version=A",
          required_unless_present_any = ["span_id", "slowest"], requires = "new")]
    pub(crate) old: Option<VersionSelector>,
    /// The deploy after: version=VALUE.
    #[arg(long, value_parser = parse_version_selector, value_name = "version=B", requires = "old")]
    pub(crate) new: Option<VersionSelector>,
    /// Growth of a frame's self share of CPU that counts as a regression (0.02 = two points).
    #[arg(long, default_value_t = 0.02, value_parser = parse_fraction)]
    pub(crate) threshold: f64,
    /// Family-wise significance level across all frames compared (Holm-corrected Welch's t-test
    /// over windows, ADR 0023).
    #[arg(long, default_value_t = 0.01, value_parser = parse_fraction)]
    pub(crate) alpha: f64,
    /// Compare only the last WINDOW of the old deploy with the first WINDOW of the new one
    /// (e.g. 30m); by default all of each.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) window: Option<u64>,
    /// Instead of two deploys: this span (16 hex digits, with its descendants) against every
    /// other span of its name in the selection.
    #[arg(long, value_parser = parse_span_id, value_name = "ID", conflicts_with_all = ["old", "new"])]
    pub(crate) span_id: Option<SpanId>,
    /// Instead of two deploys: the slowest ended span with this name against the others.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["old", "new", "span_id"])]
    pub(crate) slowest: Option<String>,
    #[command(flatten)]
    pub(crate) windows: WindowArgs,
}

/// How a frame is named in the output: function and file. The one place to change it.
pub(crate) fn frame_label(function: &str, file: &str) -> String {
    format!("{function} ({file})")
}

/// One window's CPU, and which sides it is on.
#[derive(Debug)]
struct Side {
    old: bool,
    new: bool,
    start: u64,
    end: u64,
    cpu: FrameTally,
    routes: RouteCpu,
}

#[derive(Debug, Default, Serialize)]
struct Summary {
    selector: String,
    windows: usize,
    cpu_samples: u64,
}

#[derive(Debug, Serialize)]
struct RouteRow {
    route: String,
    old_requests: u64,
    old_cpu_ms_per_request: f64,
    new_requests: u64,
    new_cpu_ms_per_request: f64,
    /// Some windows of either side did not count requests (a store written before they were
    /// counted): their requests are the sampled ones only, and CPU per request is high.
    requests_sampled_only: bool,
}

/// Returns whether a regression was found.
pub(crate) fn run(store: &Store, args: &DiffArgs, json: bool) -> anyhow::Result<bool> {
    let (Some(old_sel), Some(new_sel)) = (&args.old, &args.new) else {
        return peers(store, args, json).map(|()| false);
    };
    if args.windows.version.is_some() {
        return Err(Usage(
            "diff takes versions from --old and --new, not --version (--version selects the windows of diff --span-id or --slowest)".into(),
        )
        .into());
    }
    let filter = args.windows.filter();
    let (old_v, new_v) = (&old_sel.0, &new_sel.0);
    let files = store.list(&filter)?;
    // Each window's self CPU by frame and CPU by route, from its summary when it has a usable
    // one (format 2), else from the decoded window.
    let parts = store.fold_windows(
        &files,
        Some((&filter, false)),
        || (Vec::new(), BTreeSet::new()),
        |(acc, versions), _, w| {
            let (cpu, routes) = match &w {
                Window::Summary(s) => match (s.self_cpu_by_frame(&filter), s.route_cpu(&filter)) {
                    (Some(cpu), Some(routes)) => (cpu, routes),
                    _ => return false,
                },
                Window::Profile(p) => {
                    let one = std::slice::from_ref(&**p);
                    (
                        diff::self_cpu_by_frame(one, &filter),
                        diff::route_cpu(one, &filter),
                    )
                }
            };
            let info = w.info();
            if !filter.matches(&info) {
                return true;
            }
            if let Some(v) = info.version {
                versions.insert(v.to_owned());
            }
            let old = info.version == Some(old_v.as_str());
            let new = info.version == Some(new_v.as_str());
            if !(old || new) {
                return true;
            }
            acc.push(Side {
                old,
                new,
                start: info.start_unix_ns,
                end: info.start_unix_ns.saturating_add(info.duration_ns),
                cpu,
                routes,
            });
            true
        },
    );
    let mut sides = Vec::new();
    let mut versions = BTreeSet::new();
    for (s, v) in parts {
        sides.extend(s);
        versions.extend(v);
    }
    for v in [old_v, new_v] {
        if !versions.contains(v) {
            let known = versions.iter().map(String::as_str);
            return Err(Empty(format!(
                "no windows of version={v} in {}{}; {}",
                store.dir().display(),
                if filter == Default::default() {
                    ""
                } else {
                    " (with the other filters)"
                },
                crate::suggest::listed("versions in the store", v, known)
            ))
            .into());
        }
    }
    let old_end = sides.iter().filter(|s| s.old).map(|s| s.end).max();
    let new_start = sides.iter().filter(|s| s.new).map(|s| s.start).min();
    let (mut old, mut new) = (Vec::new(), Vec::new());
    let (mut old_routes, mut new_routes) = (RouteCpu::default(), RouteCpu::default());
    let mut old_sum = summary(old_sel);
    let mut new_sum = summary(new_sel);
    for s in sides {
        // The last WINDOW of the old deploy, the first WINDOW of the new one.
        let in_old = s.old
            && args
                .window
                .is_none_or(|w| old_end.is_some_and(|e| s.end > e.saturating_sub(w)));
        let in_new = s.new
            && args
                .window
                .is_none_or(|w| new_start.is_some_and(|b| s.start < b.saturating_add(w)));
        for (on, t, r, sum) in [
            (in_old, &mut old, &mut old_routes, &mut old_sum),
            (in_new, &mut new, &mut new_routes, &mut new_sum),
        ] {
            if on {
                sum.windows += 1;
                sum.cpu_samples += s.cpu.total;
                t.push(s.cpu.clone());
                r.merge(s.routes.clone());
            }
        }
    }
    for sum in [&old_sum, &new_sum] {
        if sum.cpu_samples == 0 {
            return Err(Empty(format!(
                "no CPU samples for {} in the selected windows ({} window(s))",
                sum.selector, sum.windows
            ))
            .into());
        }
    }
    let opts = DiffOptions::default()
        .with_threshold(args.threshold)
        .with_alpha(args.alpha);
    let c = compare(&old, &new, &opts).map_err(|e| Usage(e.to_string()))?;
    let routes = route_rows(&old_routes, &new_routes);
    let grew = !c.regressions.is_empty();
    if json {
        let out = serde_json::json!({
            "old": old_sum,
            "new": new_sum,
            "threshold": args.threshold,
            "alpha": args.alpha,
            "test": "Welch's t-test on per-window self shares of CPU, Holm-corrected across frames (ADR 0023)",
            "frames_tested": c.frames_tested,
            "regressions": c.regressions,
            "improvements": c.improvements,
            "routes": routes,
        });
        crate::json_out(store, &out)?;
        return Ok(grew);
    }
    outln!(
        "old {}: {} window(s), {} CPU samples; new {}: {} window(s), {} CPU samples",
        old_sum.selector,
        old_sum.windows,
        old_sum.cpu_samples,
        new_sum.selector,
        new_sum.windows,
        new_sum.cpu_samples
    );
    outln!(
        "self share of CPU by frame; a change counts above {:.1} points when significant at {} across {} frames (Welch's t over windows, Holm)",
        args.threshold * 100.0,
        args.alpha,
        c.frames_tested
    );
    for (word, list) in [
        ("REGRESSION", &c.regressions),
        ("IMPROVEMENT", &c.improvements),
    ] {
        for ch in list {
            outln!("{word} {}", change_line(ch));
        }
    }
    if !grew {
        outln!(
            "no frame's self share of CPU grew significantly by more than {:.1} points",
            args.threshold * 100.0
        );
    }
    if !routes.is_empty() {
        outln!("CPU per request by route (requests: every request that ended in the windows):");
        for r in &routes {
            let change = if r.old_cpu_ms_per_request > 0.0 && r.new_requests > 0 {
                format!(
                    " ({:+.1}%)",
                    (r.new_cpu_ms_per_request / r.old_cpu_ms_per_request - 1.0) * 100.0
                )
            } else {
                String::new()
            };
            let note = if r.requests_sampled_only {
                " [sampled requests only: windows written before requests were counted]"
            } else {
                ""
            };
            outln!(
                "  {}: {:.2} ms over {} request(s) -> {:.2} ms over {}{change}{note}",
                Shown(&r.route),
                r.old_cpu_ms_per_request,
                r.old_requests,
                r.new_cpu_ms_per_request,
                r.new_requests,
            );
        }
    }
    Ok(grew)
}

fn change_line(c: &FrameChange) -> String {
    format!(
        "{}: {:.1}% -> {:.1}% ({:+.1} points, {} -> {} samples, p={:.2e})",
        Shown(&frame_label(&c.frame.function, &c.frame.file)),
        c.old_share * 100.0,
        c.new_share * 100.0,
        c.growth() * 100.0,
        c.old_samples,
        c.new_samples,
        c.p_value
    )
}

fn route_rows(old: &RouteCpu, new: &RouteCpu) -> Vec<RouteRow> {
    let sampled_only = |route: &str| {
        [old, new]
            .iter()
            .any(|side| side.requests.get(route).is_some_and(|r| r.sampled_only))
    };
    let new_by: std::collections::HashMap<String, (u64, f64)> = new
        .per_request()
        .into_iter()
        .map(|(r, n, c)| (r, (n, c)))
        .collect();
    let mut rows: Vec<RouteRow> = old
        .per_request()
        .into_iter()
        .map(|(route, n, cpu)| {
            let (nn, nc) = new_by.get(&route).copied().unwrap_or((0, 0.0));
            RouteRow {
                requests_sampled_only: sampled_only(&route),
                route,
                old_requests: n,
                old_cpu_ms_per_request: cpu / 1e6,
                new_requests: nn,
                new_cpu_ms_per_request: nc / 1e6,
            }
        })
        .collect();
    for (route, (n, cpu)) in new_by {
        if !rows.iter().any(|r| r.route == route) {
            rows.push(RouteRow {
                requests_sampled_only: sampled_only(&route),
                route,
                old_requests: 0,
                old_cpu_ms_per_request: 0.0,
                new_requests: n,
                new_cpu_ms_per_request: cpu / 1e6,
            });
        }
    }
    rows.sort_by(|a, b| a.route.cmp(&b.route));
    rows
}

fn summary(v: &VersionSelector) -> Summary {
    Summary {
        selector: format!("version={}", v.0),
        ..Summary::default()
    }
}

/// `diff --span-id X` / `--slowest NAME`.
fn peers(store: &Store, args: &DiffArgs, json: bool) -> anyhow::Result<()> {
    let filter = args.windows.filter();
    let c: PeerComparison = span_vs_peers(store, &filter, args.span_id, args.slowest.as_deref())
        .map_err(|e| match e {
            QueryError::NoSpan { .. } | QueryError::NoSpanNamed { .. } => {
                Empty(e.to_string()).into()
            }
            e => anyhow::Error::from(e),
        })?;
    if c.peers == 0 {
        return Err(Empty(format!(
            "span {} is the only ended span named {:?} in the selection; nothing to compare it with (widen --since/--until)",
            c.span.span_id, &*c.span.name
        ))
        .into());
    }
    if json {
        crate::json_out(store, &c)?;
        return Ok(());
    }
    outln!(
        "span {} {}: {}, {} samples; {} peer(s) of that name: median {}, {:.1} samples each",
        Shown(&c.span.name),
        c.span.span_id,
        c.span
            .duration_ns()
            .map_or_else(|| "open".to_owned(), format_duration_ns),
        c.samples,
        c.peers,
        c.peer_duration_p50_ns
            .map_or_else(|| "?".to_owned(), format_duration_ns),
        c.peer_samples_mean
    );
    outln!("what this span did that its peers did not (wall samples at the leaf frame; this span vs the mean peer):");
    let more: Vec<_> = c
        .frames
        .iter()
        .filter(|f| f.excess() > 0.0)
        .take(10)
        .collect();
    if more.is_empty() {
        outln!("  nothing: no frame has more samples here than in the mean peer");
    }
    for f in more {
        outln!(
            "  {:+7.1}  {}: {} vs {:.1} per peer (in {} of {} peers)",
            f.excess(),
            Shown(&frame_label(&f.frame.function, &f.frame.file)),
            f.samples,
            f.peer_mean,
            f.peers_with,
            c.peers
        );
    }
    Ok(())
}
