//! `span-profile spans`: ended spans, slowest first, with their durations and sample counts:
//! with their descendants (`samples`) and their own (`own`, JSON `own_samples`).

use crate::text::Shown;
use span_profile_core::TraceId;
use span_profile_export::store::query::{SpanSummary, SpanTally};
use span_profile_export::store::{format_rfc3339, Store};

use crate::args::{format_duration_ns, parse_trace_id};
use crate::select::WindowArgs;
use crate::{suggest, Empty};

/// Arguments of `spans`.
#[derive(Debug, clap::Args)]
pub(crate) struct SpansArgs {
    #[command(flatten)]
    pub(crate) windows: WindowArgs,
    /// Only spans of this trace (32 hex digits).
    #[arg(long, value_parser = parse_trace_id, value_name = "ID")]
    pub(crate) trace_id: Option<TraceId>,
    /// Only spans with this name.
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Only spans that took at least this many milliseconds.
    #[arg(long, value_name = "N")]
    pub(crate) min_ms: Option<u64>,
    /// How many spans to list.
    #[arg(long, default_value_t = 20)]
    pub(crate) limit: usize,
}

pub(crate) fn run(store: &Store, args: &SpansArgs, json: bool) -> anyhow::Result<()> {
    let mut filter = args.windows.filter();
    filter.trace_id = args.trace_id;
    let tally = store.stream(
        &filter,
        |p, f| {
            let mut t = SpanTally::default();
            t.add(p, f);
            t
        },
        SpanTally::merge,
    )?;
    let min_ns = args.min_ms.map_or(0, |m| m.saturating_mul(1_000_000));
    let all = tally.finish();
    if let Some(name) = args.name.as_deref() {
        if !all.iter().any(|s| &*s.span.name == name) {
            let names = all.iter().map(|s| &*s.span.name);
            return Err(Empty(format!(
                "no ended span named \"{}\" in the selection; {}",
                Shown(name),
                suggest::listed("span names there", name, names)
            ))
            .into());
        }
    }
    let list: Vec<SpanSummary> = all
        .into_iter()
        .filter(|s| s.span.duration_ns().unwrap_or(0) >= min_ns)
        .filter(|s| args.name.as_ref().is_none_or(|n| *s.span.name == **n))
        .take(args.limit)
        .collect();
    if list.is_empty() {
        return Err(Empty("no ended spans match the selection".into()).into());
    }
    if json {
        crate::json_out(store, &list)?;
        return Ok(());
    }
    outln!(
        "{:>10} {:>8} {:>8}  {:<16}  {:<32}  {:<24}  name",
        "duration",
        "samples",
        "own",
        "span_id",
        "trace_id",
        "start"
    );
    for s in &list {
        outln!(
            "{:>10} {:>8} {:>8}  {}  {}  {:<24}  {}",
            format_duration_ns(s.span.duration_ns().unwrap_or(0)),
            s.samples,
            s.own_samples,
            s.span.span_id,
            s.span.trace_id,
            format_rfc3339(s.span.start_unix_ns),
            Shown(&s.span.name)
        );
    }
    Ok(())
}
