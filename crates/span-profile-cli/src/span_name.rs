//! `span-profile top --span-name NAME`: every span of that name in the selection, in
//! aggregate. How many spans, their durations (p50, p95, max), their samples per span against
//! what their durations predict at the sampling rate, and where their samples went (each
//! sample counted once, at its leaf frame). This is how spans shorter than the sampling
//! interval are read: one by one they mostly get no sample, together they get about
//! `count × duration / period`.
//!
//! The counting is the store's (`store::span_name`, `store::query`); this file prints.

use serde::Serialize;
use span_profile_core::Profile;
use span_profile_export::store::frames::Grouping;
use span_profile_export::store::query::{self, Filter, PartitionRow, Report};
use span_profile_export::store::span_name::{SpanNameStats, SpanNameTally};
use span_profile_export::store::Store;

use crate::args::format_duration_ns;
use crate::select;
use crate::text::Shown;
use crate::top::{partition_rows, print_partition, TopArgs};
use crate::Empty;

#[derive(Serialize)]
struct SpanNameJson<'a> {
    selection: &'a str,
    span_name: &'a str,
    with_descendants: bool,
    #[serde(flatten)]
    stats: &'a SpanNameStats,
    /// The costliest leaf frames (or modules, packages, lines: `--by`); with
    /// `other_samples`, they sum to `samples`.
    frames: &'a [PartitionRow],
    other_samples: u64,
}

pub(crate) fn run(store: &Store, args: &TopArgs, json: bool) -> anyhow::Result<()> {
    let sel = &args.select;
    let name = sel.span_name.as_deref().unwrap_or_default();
    let by = args.grouping();
    let q = |p: &[Profile], f: &Filter| {
        let mut t = SpanNameTally::default();
        t.add(p, f);
        let r = if by == Grouping::Line {
            query::report_with_lines(p, f)
        } else {
            query::report(p, f)
        };
        (r, t)
    };
    let merge = |a: &mut (Report, SpanNameTally), b: (Report, SpanNameTally)| {
        a.0.merge(b.0);
        a.1.merge(b.1);
    };
    // From the window summaries (which decline a route), except by line: they keep no lines.
    let (filter, (report, tally)) = if by == Grouping::Line {
        select::query(store, sel, q, merge)?
    } else {
        select::query_summarized(
            store,
            sel,
            q,
            |s, f| Some((s.span_name_report(f)?, s.span_name_tally(f)?)),
            merge,
        )?
    };
    let stats = tally.finish();
    let what = sel.describe(&filter);
    if stats.samples == 0 && stats.spans == 0 && stats.open_spans == 0 {
        return Err(Empty(format!(
            "no span named {name:?} in the {} window(s) read ({what}); `span-profile spans` lists the spans there are",
            stats.windows
        ))
        .into());
    }
    let partition = partition_rows(&report, by, args.limit)?;
    if json {
        let out = SpanNameJson {
            selection: &what,
            span_name: name,
            with_descendants: filter.with_children,
            stats: &stats,
            frames: &partition.rows,
            other_samples: partition.other_samples,
        };
        crate::json_out(store, &out)?;
        return Ok(());
    }
    let own = if filter.with_children {
        ""
    } else {
        " (own samples only)"
    };
    outln!(
        "{}: {} ended span(s){own} -> {} samples",
        Shown(&what),
        stats.spans,
        stats.samples
    );
    if let (Some(p50), Some(p95), Some(max)) = (
        stats.duration_p50_ns,
        stats.duration_p95_ns,
        stats.duration_max_ns,
    ) {
        outln!(
            "duration: p50 {}, p95 {}, max {}",
            format_duration_ns(p50),
            format_duration_ns(p95),
            format_duration_ns(max)
        );
        let rate = stats
            .period_ns
            .map_or_else(String::new, |p| format!(" at {}", hz(p)));
        outln!(
            "samples per span: {:.2} (expected{rate}: {:.2}; in all {} against {:.1} expected)",
            stats.samples_per_span,
            stats.expected_per_span,
            stats.ended_span_samples,
            stats.expected_samples
        );
    }
    if stats.open_spans > 0 {
        outln!(
            "{} span(s) still open in the last window read: their samples are counted, their durations are not",
            stats.open_spans
        );
    }
    if stats.unsampled_spans > 0 {
        outln!(
            "note: spans that got no sample are not stored; these windows left out {} such span(s) of any name, so the count and durations above are of the spans that were sampled",
            stats.unsampled_spans
        );
    }
    print_partition(&partition)?;
    Ok(())
}

/// `100 Hz` from a period in nanoseconds.
fn hz(period_ns: u64) -> String {
    let hz = 1e9 / period_ns as f64;
    if (hz - hz.round()).abs() < 0.05 {
        format!("{hz:.0} Hz")
    } else {
        format!("{hz:.1} Hz")
    }
}
