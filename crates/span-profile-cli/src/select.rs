//! Selectors shared by `top` and `flame`, and their filters. How a selection is read is the
//! store's ([`span_profile_export::store::select`]): window by window, or in two passes for a
//! span or a trace.

use span_profile_core::{Profile, SpanId, TraceId};
use span_profile_export::store::query::Filter;
use span_profile_export::store::summary::WindowSummary;
use span_profile_export::store::{self, QueryError, Store};

use crate::args::{parse_span_id, parse_time, parse_trace_id};
use crate::{suggest, Empty};

/// Which windows: service, version, environment, instance and time range.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WindowArgs {
    /// Only windows of this service (`service.name`).
    #[arg(long)]
    pub(crate) service: Option<String>,
    /// Only windows of this `service.version`.
    #[arg(long)]
    pub(crate) version: Option<String>,
    /// Only windows of this `deployment.environment` (e.g. prod).
    #[arg(long)]
    pub(crate) environment: Option<String>,
    /// Only windows of this instance (`service.instance.id`, or the host; `span-profile ls`
    /// lists them).
    #[arg(long)]
    pub(crate) instance: Option<String>,
    /// Only windows that end after this time: RFC 3339, `now`, or relative (`-2h`).
    #[arg(long, value_parser = parse_time, value_name = "TIME", allow_hyphen_values = true)]
    pub(crate) since: Option<u64>,
    /// Only windows that start before this time: RFC 3339, `now`, or relative (`-30m`).
    #[arg(long, value_parser = parse_time, value_name = "TIME", allow_hyphen_values = true)]
    pub(crate) until: Option<u64>,
}

impl WindowArgs {
    pub(crate) fn filter(&self) -> Filter {
        let mut f = Filter::default().between(self.since, self.until);
        f.service = self.service.clone();
        f.version = self.version.clone();
        f.environment = self.environment.clone();
        f.instance = self.instance.clone();
        f
    }
}

/// Which samples. Selectors combine (AND).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SelectorArgs {
    /// Samples of this span (16 hex digits).
    #[arg(long, value_parser = parse_span_id, value_name = "ID")]
    pub(crate) span_id: Option<SpanId>,
    /// Samples of the slowest ended span with this name.
    #[arg(long, value_name = "NAME", conflicts_with = "span_id")]
    pub(crate) slowest: Option<String>,
    /// Samples of every span with this name in the selection (short spans in aggregate); with
    /// `top`, their count, durations and samples against what the durations predict.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["span_id", "slowest"])]
    pub(crate) span_name: Option<String>,
    /// With --span-id, --slowest or --span-name: only the spans' own samples, those taken while it was the
    /// innermost current span. By default a span's samples include its descendants', so a
    /// root span's report is its whole request.
    #[arg(long)]
    pub(crate) exclusive: bool,
    /// Descendants are included by default; accepted so that older scripts keep working.
    #[arg(long, hide = true, conflicts_with = "exclusive")]
    pub(crate) with_children: bool,
    /// Samples of this trace (32 hex digits).
    #[arg(long, value_parser = parse_trace_id, value_name = "ID")]
    pub(crate) trace_id: Option<TraceId>,
    /// Samples with this route label (`http.route` of the local root, e.g. /checkout).
    #[arg(long)]
    pub(crate) route: Option<String>,
    #[command(flatten)]
    pub(crate) windows: WindowArgs,
}

impl SelectorArgs {
    /// The filter, before `--slowest` is resolved to a span id.
    pub(crate) fn filter(&self) -> Filter {
        let mut f = self.windows.filter();
        f.span_id = self.span_id;
        f.span_name = self.span_name.clone();
        f.with_children = !self.exclusive;
        f.trace_id = self.trace_id;
        f.route = self.route.clone();
        f
    }

    /// Whether the selection names a span or a trace (read in two passes).
    pub(crate) fn is_span_selection(&self) -> bool {
        self.span_id.is_some() || self.slowest.is_some() || self.trace_id.is_some()
    }

    /// A short description: `route /checkout, service checkout`.
    pub(crate) fn describe(&self, filter: &Filter) -> String {
        let mut parts = Vec::new();
        if let Some(n) = &filter.span_name {
            parts.push(format!("spans {n}"));
        }
        if let Some(t) = filter.trace_id {
            parts.push(format!("trace {t}"));
        }
        if let Some(r) = &filter.route {
            parts.push(format!("route {r}"));
        }
        if let Some(s) = &filter.service {
            parts.push(format!("service {s}"));
        }
        if let Some(v) = &filter.version {
            parts.push(format!("version {v}"));
        }
        if let Some(e) = &filter.environment {
            parts.push(format!("environment {e}"));
        }
        if let Some(i) = &filter.instance {
            parts.push(format!("instance {i}"));
        }
        if parts.is_empty() {
            parts.push("all windows".into());
        }
        parts.join(", ")
    }
}

/// Answers `q` over the selection and returns it with the resolved filter (`--slowest` turned
/// into a span id); see [`store::select`].
pub(crate) fn query<A: Send + Default>(
    store: &Store,
    sel: &SelectorArgs,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    merge: impl Fn(&mut A, A) + Sync,
) -> anyhow::Result<(Filter, A)> {
    answered(store::select(
        store,
        sel.filter(),
        sel.slowest.as_deref(),
        q,
        merge,
    ))
}

/// [`query()`] for a question that window summaries also answer: `qs` is `q` on a window's
/// summary (see [`store::select_summarized`]).
pub(crate) fn query_summarized<A: Send + Default>(
    store: &Store,
    sel: &SelectorArgs,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    qs: impl Fn(&WindowSummary, &Filter) -> Option<A> + Sync,
    merge: impl Fn(&mut A, A) + Sync,
) -> anyhow::Result<(Filter, A)> {
    answered(store::select_summarized(
        store,
        sel.filter(),
        sel.slowest.as_deref(),
        q,
        qs,
        merge,
    ))
}

/// A span name that matches no span is an empty selection (exit 3), told with the span
/// names that exist nearest it.
fn answered<T>(r: Result<T, QueryError>) -> anyhow::Result<T> {
    r.map_err(|e| match &e {
        QueryError::NoSpanNamed { name, known, .. } => {
            let names = known.iter().map(String::as_str);
            Empty(format!(
                "{e}; {}",
                suggest::listed("span names in those windows", name, names)
            ))
            .into()
        }
        QueryError::NoSpan { .. } => Empty(e.to_string()).into(),
        _ => e.into(),
    })
}
