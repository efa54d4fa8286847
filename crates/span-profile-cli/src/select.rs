//! Selectors shared by `top` and `flame`, and how a selection is read from the store.
//!
//! Route, service, version and time selections are answered one window at a time: each
//! decoding thread folds per-window answers that merge exactly (see `Report::merge`), from the
//! window's summary where the query has a summary form, else from the decoded window. A span
//! or trace needs its span table first, so it is read in two passes: the span tables of every
//! window, then only the windows that overlap the span's (or trace's) time.

use std::collections::HashSet;

use span_profile_core::query::{self, Filter, WindowSummary};
use span_profile_core::{Profile, SpanId, TraceId};

use crate::args::{parse_span_id, parse_time, parse_trace_id};
use crate::store::{Store, Window};
use crate::Empty;

/// Slack around a span's time when choosing windows: span clocks and window clocks are read
/// at different moments.
const SLACK_NS: u64 = 1_000_000_000;

/// Which windows: service, version and time range.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WindowArgs {
    /// Only windows of this service (`service.name`).
    #[arg(long)]
    pub(crate) service: Option<String>,
    /// Only windows of this `service.version`.
    #[arg(long)]
    pub(crate) version: Option<String>,
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
    /// With --span-id or --slowest: include the span's descendants.
    #[arg(long)]
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
        f.with_children = self.with_children;
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
        if parts.is_empty() {
            parts.push("all windows".into());
        }
        parts.join(", ")
    }
}

/// Answers `q` over the selection and returns it with the resolved filter (`--slowest` turned
/// into a span id). `q` is called on the selected windows, one at a time for window-level
/// selections (its answers combined with `merge`), or once on all of a span's windows.
pub(crate) fn query<A: Send + Default>(
    store: &Store<'_>,
    sel: &SelectorArgs,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    merge: impl Fn(&mut A, A) + Sync,
) -> anyhow::Result<(Filter, A)> {
    query_with(
        store,
        sel,
        q,
        None::<(fn(&WindowSummary, &Filter) -> Option<A>, bool)>,
        merge,
    )
}

/// [`query()`] for a question that window summaries also answer: `qs` is `q` on a window's
/// summary (see [`stream_summarized`]; not a question by route).
pub(crate) fn query_summarized<A: Send + Default>(
    store: &Store<'_>,
    sel: &SelectorArgs,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    qs: impl Fn(&WindowSummary, &Filter) -> Option<A> + Sync,
    merge: impl Fn(&mut A, A) + Sync,
) -> anyhow::Result<(Filter, A)> {
    query_with(store, sel, q, Some((qs, false)), merge)
}

fn query_with<A: Send + Default>(
    store: &Store<'_>,
    sel: &SelectorArgs,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    qs: Option<(impl Fn(&WindowSummary, &Filter) -> Option<A> + Sync, bool)>,
    merge: impl Fn(&mut A, A) + Sync,
) -> anyhow::Result<(Filter, A)> {
    let mut filter = sel.filter();
    if sel.is_span_selection() {
        let profiles = load_span_windows(store, &mut filter, sel.slowest.as_deref())?;
        let answer = q(&profiles, &filter);
        return Ok((filter, answer));
    }
    let answer = stream_with(store, &filter, q, qs, merge)?;
    Ok((filter, answer))
}

/// Answers `q` window by window over the windows that pass `filter`, merging the answers.
pub(crate) fn stream<A: Send + Default>(
    store: &Store<'_>,
    filter: &Filter,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    merge: impl Fn(&mut A, A) + Sync,
) -> anyhow::Result<A> {
    stream_with(
        store,
        filter,
        q,
        None::<(fn(&WindowSummary, &Filter) -> Option<A>, bool)>,
        merge,
    )
}

/// [`stream`] for a question that window summaries also answer: a window is answered by `qs`
/// from its summary when it has a usable one, else by `q` from the decoded window. `qs` must
/// give what `q` gives on the same window (or `None` when it cannot); `by_route` for a
/// question by route (it needs every route of a summary).
pub(crate) fn stream_summarized<A: Send + Default>(
    store: &Store<'_>,
    filter: &Filter,
    by_route: bool,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    qs: impl Fn(&WindowSummary, &Filter) -> Option<A> + Sync,
    merge: impl Fn(&mut A, A) + Sync,
) -> anyhow::Result<A> {
    stream_with(store, filter, q, Some((qs, by_route)), merge)
}

fn stream_with<A: Send + Default>(
    store: &Store<'_>,
    filter: &Filter,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    qs: Option<(impl Fn(&WindowSummary, &Filter) -> Option<A> + Sync, bool)>,
    merge: impl Fn(&mut A, A) + Sync,
) -> anyhow::Result<A> {
    let files = store.list(filter)?;
    let summaries = qs.as_ref().map(|&(_, by_route)| (filter, by_route));
    let parts = store.fold_windows(&files, summaries, A::default, |acc, _, w| {
        if !filter.matches(&w.info()) {
            return true;
        }
        let answer = match (&w, &qs) {
            (Window::Summary(s), Some((qs, _))) => qs(s, filter),
            (Window::Summary(_), None) => None,
            (Window::Profile(p), _) => Some(q(std::slice::from_ref(p), filter)),
        };
        match answer {
            Some(a) => {
                merge(acc, a);
                true
            }
            None => false,
        }
    });
    let mut answer = A::default();
    for part in parts {
        merge(&mut answer, part);
    }
    Ok(answer)
}

/// The windows that can hold samples of the filter's span or trace. Resolves `slowest` into
/// `filter.span_id`.
fn load_span_windows(
    store: &Store<'_>,
    filter: &mut Filter,
    slowest: Option<&str>,
) -> anyhow::Result<Vec<Profile>> {
    let files = store.list(filter)?;
    // Pass 1: every selected window's span table, without samples.
    let mut tables: Vec<(usize, Profile)> = store
        .fold(&files, Vec::new, |acc, i, p| {
            if filter.matches_window(&p) {
                let mut t = Profile::empty(p.resource, p.start_unix_ns, p.duration_ns, p.period_ns);
                t.spans = p.spans;
                acc.push((i, t));
            }
        })
        .into_iter()
        .flatten()
        .collect();
    tables.sort_by_key(|(i, _)| *i);
    let (indices, tables): (Vec<usize>, Vec<Profile>) = tables.into_iter().unzip();

    if let Some(name) = slowest {
        let mut f = Filter::default();
        f.trace_id = filter.trace_id;
        let span = query::spans(&tables, &f)
            .into_iter()
            .find(|s| &*s.span.name == name)
            .ok_or_else(|| {
                Empty(format!(
                    "no ended span named {name:?} in the selected windows ({} read)",
                    tables.len()
                ))
            })?;
        filter.span_id = Some(span.span.span_id);
    }

    let index = query::span_index(&tables);
    let ids: HashSet<SpanId> = match filter.span_id {
        Some(id) if filter.with_children => query::descendants(&index, id),
        Some(id) => HashSet::from([id]),
        None => HashSet::new(),
    };
    let records: Vec<_> = index
        .values()
        .filter(|r| {
            if filter.span_id.is_some() {
                ids.contains(&r.span_id)
            } else {
                filter.trace_id == Some(r.trace_id)
            }
        })
        .collect();
    let range = (!records.is_empty()).then(|| {
        let lo = records.iter().map(|r| r.start_unix_ns).min().unwrap_or(0);
        let hi = records
            .iter()
            .map(|r| r.end_unix_ns.unwrap_or(u64::MAX))
            .max()
            .unwrap_or(u64::MAX);
        (lo.saturating_sub(SLACK_NS), hi.saturating_add(SLACK_NS))
    });
    // Pass 2: the windows overlapping that time; without a span record (dropped by the span
    // table's cap), every window that has a sample of the span or trace.
    let wanted: Vec<_> = indices
        .iter()
        .zip(&tables)
        .filter(|(_, t)| {
            range.is_none_or(|(lo, hi)| {
                t.start_unix_ns <= hi && t.start_unix_ns + t.duration_ns >= lo
            })
        })
        .map(|(&i, _)| files[i].clone())
        .collect();
    let keep = |p: &Profile| {
        range.is_some()
            || p.samples.iter().any(|s| {
                s.span.is_some_and(|c| {
                    filter.span_id.is_none_or(|id| id == c.span_id)
                        && filter.trace_id.is_none_or(|t| t == c.trace_id)
                })
            })
    };
    let mut profiles: Vec<Profile> = store
        .fold(&wanted, Vec::new, |acc, _, p| {
            if keep(&p) {
                acc.push(p);
            }
        })
        .into_iter()
        .flatten()
        .collect();
    profiles.sort_by_key(|p| p.start_unix_ns);
    Ok(profiles)
}
