//! `span-profile top`: the samples of a span, a trace, a route or a service, each counted once
//! at its leaf frame and grouped by frame, module, package or line (or inclusive counts with
//! `--inclusive`), and a service's cost by route and by package.

use crate::text::Shown;
use serde::Serialize;
use span_profile_core::SpanRecord;
use span_profile_export::store::frames::{display_name, module_of, Grouping};
use span_profile_export::store::query::{
    self, CostAttribution, Coverage, FrameCost, Partition, Report,
};
use span_profile_export::store::summary::WindowSummary;
use span_profile_export::store::Store;

use crate::args::format_duration_ns;
use crate::select::{self, SelectorArgs};
use crate::{Empty, Usage};

/// How `top` groups samples (`--by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum By {
    /// By frame: `module:function` (function and file).
    #[default]
    Function,
    /// By module, derived from the file (`dateutil.parser._parser`).
    Module,
    /// By package, the module's first part (`dateutil`).
    Package,
    /// By function, file and line.
    Line,
}

impl From<By> for Grouping {
    fn from(b: By) -> Self {
        match b {
            By::Function => Grouping::Function,
            By::Module => Grouping::Module,
            By::Package => Grouping::Package,
            By::Line => Grouping::Line,
        }
    }
}

/// Arguments of `top`.
#[derive(Debug, clap::Args)]
pub(crate) struct TopArgs {
    #[command(flatten)]
    pub(crate) select: SelectorArgs,
    /// How many rows to show; the rest are summed into `<other>`.
    #[arg(long, default_value_t = 10)]
    pub(crate) limit: usize,
    /// Group the samples by frame (`module:function`), module, package or line.
    #[arg(long, value_enum, default_value_t = By::Function)]
    pub(crate) by: By,
    /// Show `file:line`: the same as `--by line`.
    #[arg(long, conflicts_with = "by")]
    pub(crate) lines: bool,
    /// Count each frame on every sample whose stack it is on (inclusive), not only at the
    /// leaf; the frames every stack of the selection enters through are left out. By
    /// function or line only.
    #[arg(long)]
    pub(crate) inclusive: bool,
}

impl TopArgs {
    /// The grouping asked for.
    pub(crate) fn grouping(&self) -> Grouping {
        if self.lines {
            Grouping::Line
        } else {
            self.by.into()
        }
    }
}

pub(crate) fn run(store: &Store, args: &TopArgs, json: bool) -> anyhow::Result<()> {
    let sel = &args.select;
    if sel.span_name.is_some() {
        return crate::span_name::run(store, args, json);
    }
    let cost_attribution = sel.windows.service.is_some()
        && sel.windows.version.is_none()
        && sel.route.is_none()
        && !sel.is_span_selection();
    if cost_attribution {
        return attribution(store, args, json);
    }
    let by = args.grouping();
    if args.inclusive && matches!(by, Grouping::Module | Grouping::Package) {
        return Err(Usage(
            "--inclusive counts frames and lines, not modules or packages; drop --inclusive or use --by function or --by line".into(),
        )
        .into());
    }
    // Window summaries keep no lines: a report by line reads the windows.
    let (filter, r) = if by == Grouping::Line {
        select::query(store, sel, query::report_with_lines, Report::merge)?
    } else {
        select::query_summarized(
            store,
            sel,
            query::report,
            WindowSummary::report,
            Report::merge,
        )?
    };
    if r.samples == 0 {
        let what = match (&r.span, filter.span_id) {
            (Some(s), _) => format!("span {} ({})", s.name, s.span_id),
            (None, Some(id)) => format!("span {id}"),
            (None, None) => sel.describe(&filter),
        };
        // Coverage counts the span with its descendants, whatever --exclusive says.
        let hint = match r.coverage {
            Some(c) if !filter.with_children && c.actual_samples > 0 => format!(
                "; it has no samples of its own, its descendants have {}: drop --exclusive to see them",
                c.actual_samples
            ),
            _ => String::new(),
        };
        return Err(Empty(format!(
            "no samples for {what} in the {} window(s) read{hint}",
            r.windows
        ))
        .into());
    }
    let frames: Vec<FrameJson<'_>> = shown_frames(&r, args.limit)
        .into_iter()
        .map(FrameJson::from)
        .collect();
    let partition = partition_rows(&r, by, args.limit)?;
    let header = match (&r.span, filter.span_id) {
        (Some(span), _) => span_header(span, filter.with_children),
        (None, Some(id)) => format!("span {id} (no span record)"),
        (None, None) => sel.describe(&filter),
    };
    if json {
        let out = TopJson {
            selection: &header,
            span: r.span.as_ref(),
            with_children: filter.with_children,
            samples: r.samples,
            cpu_samples: r.cpu_samples,
            window_samples: r.window_samples,
            windows: r.windows,
            view: if args.inclusive { "inclusive" } else { "self" },
            partition: &partition,
            frames: &frames,
            lines: r.lines.as_deref().map(|l| &l[..args.limit.min(l.len())]),
            coverage: r.coverage,
        };
        crate::json_out(store, &out)?;
        return Ok(());
    }
    let share = if filter.span_id.is_none() && filter.trace_id.is_none() {
        format!(
            " ({:.1}% of the {} window(s)' samples)",
            100.0 * r.samples as f64 / r.window_samples.max(1) as f64,
            r.windows
        )
    } else {
        String::new()
    };
    outln!("{} -> {} samples{share}", Shown(&header), r.samples);
    if args.inclusive {
        print_inclusive(&r, by, args.limit)?;
    } else {
        print_partition(&partition)?;
    }
    if let (Some(c), Some(d)) = (
        r.coverage,
        r.span.as_ref().and_then(SpanRecord::duration_ns),
    ) {
        outln!("{}", coverage_line(&c, d, filter.with_children));
    }
    Ok(())
}

#[derive(Serialize)]
struct TopJson<'a> {
    selection: &'a str,
    span: Option<&'a SpanRecord>,
    with_children: bool,
    samples: u64,
    cpu_samples: u64,
    window_samples: u64,
    windows: usize,
    /// `self` (the partition is the report) or `inclusive`.
    view: &'static str,
    partition: &'a Partition,
    /// The frames by inclusive count, the entry path left out.
    frames: &'a [FrameJson<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    lines: Option<&'a [query::LineCost]>,
    coverage: Option<Coverage>,
}

/// A frame in `--json`: its identity, module and counts.
#[derive(Serialize)]
struct FrameJson<'a> {
    name: String,
    function: &'a str,
    file: &'a str,
    module: Option<String>,
    self_samples: u64,
    total_samples: u64,
}

impl<'a> From<&'a FrameCost> for FrameJson<'a> {
    fn from(f: &'a FrameCost) -> Self {
        FrameJson {
            name: display_name(&f.function, &f.file),
            function: &f.function,
            file: &f.file,
            module: module_of(&f.file),
            self_samples: f.self_samples,
            total_samples: f.total_samples,
        }
    }
}

/// A report's samples partitioned `by` into its `limit` largest rows and `<other>`
/// ([`Report::partition`]); an error only by line from a report without lines.
pub(crate) fn partition_rows(r: &Report, by: Grouping, limit: usize) -> anyhow::Result<Partition> {
    r.partition(by, limit).ok_or_else(|| {
        anyhow::anyhow!("this report was made without lines; make it with query::report_with_lines")
    })
}

/// The partition as a person reads it: samples, share of the selection, row; then `<other>`.
/// The rows and `<other>` add up to the selection's samples.
pub(crate) fn print_partition(p: &Partition) -> anyhow::Result<()> {
    let share = |n: u64| 100.0 * n as f64 / p.samples.max(1) as f64;
    for row in &p.rows {
        outln!(
            "{:>7} {:>5.1}%  {}",
            row.self_samples,
            share(row.self_samples),
            Shown(&row.name)
        );
    }
    if p.other_samples > 0 {
        outln!(
            "{:>7} {:>5.1}%  <other>",
            p.other_samples,
            share(p.other_samples)
        );
    }
    Ok(())
}

/// `--inclusive`: frames (or lines) by the samples on whose stack they are, without the
/// selection's entry path.
fn print_inclusive(r: &Report, by: Grouping, limit: usize) -> anyhow::Result<()> {
    if by == Grouping::Line {
        let on_entry = |function: &str, file: &str| {
            r.entry_path
                .as_ref()
                .is_some_and(|p| p.iter().any(|(f, fl)| f == function && fl == file))
        };
        let lines = r.lines.as_deref().unwrap_or(&[]);
        let mut shown: Vec<_> = lines
            .iter()
            .filter(|l| !on_entry(&l.function, &l.file))
            .take(limit)
            .collect();
        if shown.is_empty() {
            shown = lines.iter().take(limit).collect();
        }
        for l in shown {
            outln!(
                "{:>7}  {} ({}:{})",
                l.total_samples,
                Shown(&display_name(&l.function, &l.file)),
                Shown(&l.file),
                l.line
            );
        }
        return Ok(());
    }
    for f in shown_frames(r, limit) {
        outln!(
            "{:>7}  {}",
            f.total_samples,
            Shown(&display_name(&f.function, &f.file))
        );
    }
    Ok(())
}

fn span_header(span: &SpanRecord, with_children: bool) -> String {
    let dur = span
        .duration_ns()
        .map_or_else(|| "(still open)".to_string(), format_duration_ns);
    let exclusive = if with_children {
        ""
    } else {
        " (own samples only)"
    };
    format!("span {} {dur}{exclusive}", span.name)
}

/// The frames to list: by total samples, leaving out the selection's common entry path
/// ([`Report::entry_path`]: `main`, the request handler, the span's own function), which says
/// nothing about where the time went inside the selection. A frame that is on every sample
/// but reached by different paths (the hot helper) stays. Without an entry path (a report
/// from window summaries), the frames on every sample are left out. If that would leave
/// nothing (one stack), they are kept.
fn shown_frames(r: &Report, limit: usize) -> Vec<&FrameCost> {
    let on_entry_path = |f: &FrameCost| match &r.entry_path {
        Some(path) => path
            .iter()
            .any(|(function, file)| *function == f.function && *file == f.file),
        None => f.total_samples >= r.samples,
    };
    let differing: Vec<&FrameCost> = r
        .frames
        .iter()
        .filter(|f| !on_entry_path(f))
        .take(limit)
        .collect();
    if differing.is_empty() {
        r.top(limit).iter().collect()
    } else {
        differing
    }
}

/// `coverage: 72 samples for 720 ms at 100 Hz (expected 72, 100%): ok`. Coverage is always
/// about the span with its descendants, whose samples fall inside its duration; a span's own
/// samples have no duration to be held against (its children took part of it). With
/// `--exclusive` (`with_children` false) the line says so.
fn coverage_line(c: &Coverage, duration_ns: u64, with_children: bool) -> String {
    let hz = if duration_ns == 0 {
        0.0
    } else {
        c.expected_samples / (duration_ns as f64 / 1e9)
    };
    let hz = if (hz - hz.round()).abs() < 0.05 {
        format!("{hz:.0}")
    } else {
        format!("{hz:.1}")
    };
    let verdict = if c.is_ok() {
        "ok"
    } else if c.ratio < 1.0 {
        "low (the sampler missed ticks, or the span waited off the sampled threads)"
    } else {
        "high (the span ran on several threads or tasks at once)"
    };
    let of = if with_children {
        ""
    } else {
        " (the span with its descendants)"
    };
    format!(
        "coverage{of}: {} samples for {} at {hz} Hz (expected {:.0}, {:.0}%): {verdict}",
        c.actual_samples,
        format_duration_ns(duration_ns),
        c.expected_samples,
        c.ratio * 100.0
    )
}

/// `top --service S` alone: where the service's CPU goes, by route (with CPU per request)
/// and by package and module of the leaf frame (self CPU, so thread and loop entry frames,
/// which are never the leaf of a busy stack, do not show).
fn attribution(store: &Store, args: &TopArgs, json: bool) -> anyhow::Result<()> {
    let (filter, a) = select::query_summarized(
        store,
        &args.select,
        query::cost_attribution,
        WindowSummary::cost_attribution,
        CostAttribution::merge,
    )?;
    let what = args.select.describe(&filter);
    if a.cpu_samples == 0 {
        return Err(Empty(format!("no CPU samples for {what}")).into());
    }
    let share = |n: u64| n as f64 / a.cpu_samples as f64;
    let mut routes: Vec<(&str, &query::RouteCost)> =
        a.routes.iter().map(|(r, c)| (r.as_str(), c)).collect();
    routes.sort_by(|x, y| y.1.cpu_samples.cmp(&x.1.cpu_samples).then(x.0.cmp(y.0)));
    routes.truncate(args.limit);
    let packages = a.self_cpu_by(Grouping::Package);
    let modules = a.self_cpu_by(Grouping::Module);
    let top = |v: &[(String, u64)]| v[..args.limit.min(v.len())].to_vec();
    if json {
        #[derive(Serialize)]
        struct RouteRow<'a> {
            route: &'a str,
            cpu_samples: u64,
            share: f64,
            cpu_ns: u64,
            /// `None` when roll-ups of windows that did not count requests hold some of the
            /// route's samples.
            requests: Option<u64>,
            cpu_ns_per_request: Option<u64>,
            /// Some windows did not count requests (written before they were counted): theirs
            /// are the sampled requests only.
            requests_sampled_only: bool,
        }
        #[derive(Serialize)]
        struct Row {
            name: String,
            self_cpu_samples: u64,
            share: f64,
        }
        let rows = |v: Vec<(String, u64)>| -> Vec<Row> {
            v.into_iter()
                .map(|(name, n)| Row {
                    name,
                    self_cpu_samples: n,
                    share: share(n),
                })
                .collect()
        };
        let out = serde_json::json!({
            "selection": what,
            "cpu_samples": a.cpu_samples,
            "cpu_ns": a.cpu_ns,
            "by_route": routes.iter().map(|&(route, c)| RouteRow {
                route,
                cpu_samples: c.cpu_samples,
                share: share(c.cpu_samples),
                cpu_ns: c.cpu_ns,
                requests: c.request_count(),
                cpu_ns_per_request: c.cpu_ns_per_request(),
                requests_sampled_only: c.requests.sampled_only,
            }).collect::<Vec<_>>(),
            "by_package": rows(top(&packages)),
            "by_module": rows(top(&modules)),
        });
        crate::json_out(store, &out)?;
        return Ok(());
    }
    outln!(
        "{what}: {} CPU samples ({} of CPU)",
        a.cpu_samples,
        format_duration_ns(a.cpu_ns)
    );
    outln!();
    let mut notes = String::new();
    if routes.iter().any(|(_, c)| c.requests.sampled_only) {
        notes
            .push_str("; * only the sampled ones, in windows written before requests were counted");
    }
    if routes.iter().any(|(_, c)| c.request_count().is_none()) {
        notes.push_str("; ? unknown, in roll-ups of such windows");
    }
    outln!("CPU by route (requests: every request that ended in the windows{notes})");
    outln!(
        "{:>7}  {:>11}  {:>8}  {:>11}  route",
        "share",
        "CPU samples",
        "requests",
        "CPU/request"
    );
    for (route, c) in &routes {
        let per = c
            .cpu_ns_per_request()
            .map_or_else(|| "-".to_string(), format_duration_ns);
        let mark = if c.requests.sampled_only { "*" } else { "" };
        outln!(
            "{:>6.1}%  {:>11}  {:>8}  {:>11}  {}",
            100.0 * share(c.cpu_samples),
            c.cpu_samples,
            c.request_count()
                .map_or_else(|| "?".to_string(), |n| format!("{n}{mark}")),
            per,
            Shown(route)
        );
    }
    for (title, v) in [("package", &packages), ("module", &modules)] {
        outln!();
        outln!("CPU by {title} (self: the leaf frame's)");
        for (name, n) in top(v) {
            outln!("{:>6.1}%  {n:>11}  {}", 100.0 * share(n), Shown(&name));
        }
    }
    Ok(())
}
