//! `span-profile top`: the samples and top frames of a span, a trace, a route or a service,
//! and a service's cost by top-level frame.

use crate::text::Shown;
use serde::Serialize;
use span_profile_core::SpanRecord;
use span_profile_export::store::query::{self, Coverage, FrameCost, Report, Tally};
use span_profile_export::store::summary::WindowSummary;
use span_profile_export::store::Store;

use crate::args::format_duration_ns;
use crate::select::{self, SelectorArgs};
use crate::Empty;

/// Arguments of `top`.
#[derive(Debug, clap::Args)]
pub(crate) struct TopArgs {
    #[command(flatten)]
    pub(crate) select: SelectorArgs,
    /// How many frames to show, by samples on whose stack they are. Frames on every sample
    /// of the selection's common entry path (the frames every stack starts with) are left out while others remain.
    #[arg(long, default_value_t = 10)]
    pub(crate) limit: usize,
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
    let (filter, r) = select::query_summarized(
        store,
        sel,
        query::report,
        WindowSummary::report,
        Report::merge,
    )?;
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
    let frames = shown_frames(&r, args.limit);
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
            frames: &frames,
            coverage: r.coverage,
        };
        outln!("{}", serde_json::to_string_pretty(&out)?);
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
    for f in &frames {
        outln!("{:>7}  {}", f.total_samples, Shown(&f.function));
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
    frames: &'a [&'a FrameCost],
    coverage: Option<Coverage>,
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

/// `top --service S` alone: the service's CPU by top-level frame.
fn attribution(store: &Store, args: &TopArgs, json: bool) -> anyhow::Result<()> {
    let (filter, t) = select::query_summarized(
        store,
        &args.select,
        query::cpu_by_root_frame,
        WindowSummary::cpu_by_root_frame,
        Tally::merge,
    )?;
    let what = args.select.describe(&filter);
    if t.total == 0 {
        return Err(Empty(format!("no CPU samples for {what}")).into());
    }
    let rows: Vec<(&str, u64)> = t.sorted().into_iter().take(args.limit).collect();
    if json {
        #[derive(Serialize)]
        struct Row<'a> {
            frame: &'a str,
            cpu_samples: u64,
            share: f64,
        }
        let rows: Vec<Row<'_>> = rows
            .iter()
            .map(|&(frame, n)| Row {
                frame,
                cpu_samples: n,
                share: t.share(frame),
            })
            .collect();
        let out = serde_json::json!({
            "selection": what,
            "cpu_samples": t.total,
            "by_top_level_frame": rows,
        });
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    outln!("{what}: {} CPU samples, by top-level frame", t.total);
    for (frame, n) in rows {
        outln!("{:>6.1}% {n:>9}  {}", 100.0 * t.share(frame), Shown(frame));
    }
    Ok(())
}
