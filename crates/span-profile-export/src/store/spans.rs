//! Selections read in two passes: a span or a trace needs its span table first, so the span
//! tables of every selected window are read, then only the windows that overlap the span's
//! (or trace's) time. [`select`] answers any selection, this way when it names a span or a
//! trace, else window by window ([`Store::stream`]).

use std::collections::HashSet;

use span_profile_core::{Profile, SpanId};

use crate::store::fold::{QueryError, Store};
use crate::store::query::{self, Filter};
use crate::store::summary::WindowSummary;

/// Slack around a span's time when choosing windows: span clocks and window clocks are read
/// at different moments.
const SLACK_NS: u64 = 1_000_000_000;

/// Answers `q` over the selection of `filter` (and of `slowest`, the slowest ended span of
/// that name, if given) and returns it with the resolved filter (`slowest` turned into a span
/// id). `q` is called on the selected windows one at a time for window-level selections (its
/// answers combined with `merge`), or once on all of a span's or trace's windows.
pub fn select<A: Send + Default>(
    store: &Store,
    filter: Filter,
    slowest: Option<&str>,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    merge: impl Fn(&mut A, A) + Sync,
) -> Result<(Filter, A), QueryError> {
    select_with(
        store,
        filter,
        slowest,
        q,
        None::<(fn(&WindowSummary, &Filter) -> Option<A>, bool)>,
        merge,
    )
}

/// [`select`] for a question that window summaries also answer: `qs` is `q` on a window's
/// summary (see [`Store::stream_summarized`]; not a question by route).
pub fn select_summarized<A: Send + Default>(
    store: &Store,
    filter: Filter,
    slowest: Option<&str>,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    qs: impl Fn(&WindowSummary, &Filter) -> Option<A> + Sync,
    merge: impl Fn(&mut A, A) + Sync,
) -> Result<(Filter, A), QueryError> {
    select_with(store, filter, slowest, q, Some((qs, false)), merge)
}

fn select_with<A: Send + Default>(
    store: &Store,
    mut filter: Filter,
    slowest: Option<&str>,
    q: impl Fn(&[Profile], &Filter) -> A + Sync,
    qs: Option<(impl Fn(&WindowSummary, &Filter) -> Option<A> + Sync, bool)>,
    merge: impl Fn(&mut A, A) + Sync,
) -> Result<(Filter, A), QueryError> {
    if filter.span_id.is_some() || filter.trace_id.is_some() || slowest.is_some() {
        let profiles = span_windows(store, &mut filter, slowest)?;
        let answer = q(&profiles, &filter);
        return Ok((filter, answer));
    }
    let answer = store.stream_with(&filter, q, qs, merge)?;
    Ok((filter, answer))
}

/// The windows that can hold samples of the filter's span or trace, by start time. Resolves
/// `slowest` (the slowest ended span of that name, of the filter's trace if it names one) into
/// `filter.span_id`.
pub fn span_windows(
    store: &Store,
    filter: &mut Filter,
    slowest: Option<&str>,
) -> Result<Vec<Profile>, QueryError> {
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
        let f = Filter {
            trace_id: filter.trace_id,
            ..Filter::default()
        };
        let ended = query::spans(&tables, &f);
        let span = ended
            .iter()
            .find(|s| &*s.span.name == name)
            .ok_or_else(|| {
                let mut known: Vec<String> =
                    ended.iter().map(|s| s.span.name.to_string()).collect();
                known.sort_unstable();
                known.dedup();
                QueryError::NoSpanNamed {
                    name: name.to_owned(),
                    windows: tables.len(),
                    known,
                }
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
