//! Every span of one name, in aggregate: how many, how long, and how many samples they got
//! against what their durations predict. The answer for spans shorter than the sampling
//! interval (a 2 ms `cache.get` at 100 Hz), which one by one mostly get no sample.
//!
//! Which samples belong to the spans is [`Filter::span_name`]'s rule in
//! [`query`](crate::store::query) (also what [`report`](crate::store::query::report)
//! partitions); this module counts the spans themselves. A [`SpanNameTally`] is made window by
//! window and merged.
//!
//! A window keeps the records of sampled spans only (ADR 0010): a span that got no sample is
//! not stored, only counted among the window's [`unsampled_spans`]. So the spans counted here
//! are those with a record, and [`SpanNameStats::unsampled_spans`] says how many spans of any
//! name the windows left out.
//!
//! [`unsampled_spans`]: span_profile_core::WindowStats::unsampled_spans
//!
//! ```
//! use span_profile_export::store::query::Filter;
//! use span_profile_export::store::span_name::SpanNameTally;
//! # let (a, b): (Vec<span_profile_core::Profile>, Vec<span_profile_core::Profile>) = (vec![], vec![]);
//! let f = Filter::default().span_name("cache.get", true);
//! let mut t = SpanNameTally::default();
//! t.add(&a, &f);
//! t.add(&b, &f);
//! let stats = t.finish();
//! assert_eq!(stats.spans, 0);
//! ```

use std::collections::HashMap;

use serde::Serialize;
use span_profile_core::{Profile, SpanId, SpanRecord};

use crate::store::query::{for_each_sample, span_index, Filter};

/// One span of the name, as far as the windows read know it.
#[derive(Debug, Clone, Copy, Default)]
struct Named {
    start_unix_ns: u64,
    end_unix_ns: Option<u64>,
    /// The sampling period of a window that holds the span's record.
    period_ns: u64,
    /// Selected samples whose nearest span of the name (itself or an ancestor) is this one.
    samples: u64,
}

/// The spans of [`Filter::span_name`] in some windows, with their samples: the mergeable form
/// of [`SpanNameStats`]. Tallies of disjoint windows made with the same filter merge into the
/// tally of all of them.
#[derive(Debug, Clone, Default)]
pub struct SpanNameTally {
    spans: HashMap<SpanId, Named>,
    /// Selected samples (also those of no span record of the name, e.g. a descendant whose
    /// named ancestor's record was lost).
    samples: u64,
    unsampled_spans: u64,
    windows: usize,
}

impl SpanNameTally {
    /// Adds the windows of `profiles` that pass `filter`'s window test: the records of the
    /// spans named `filter.span_name` (of `filter.trace_id`, if set) and the samples `filter`
    /// selects. Without a span name, adds nothing.
    pub fn add(&mut self, profiles: &[Profile], filter: &Filter) {
        let Some(name) = filter.span_name.as_deref() else {
            return;
        };
        for p in profiles.iter().filter(|p| filter.matches_window(p)) {
            self.windows += 1;
            self.unsampled_spans += p.stats.unsampled_spans;
            let window = std::slice::from_ref(p);
            let index = span_index(window);
            for r in index
                .values()
                .filter(|r| &*r.name == name && filter.trace_id.is_none_or(|t| r.trace_id == t))
            {
                let e = self.spans.entry(r.span_id).or_default();
                if e.end_unix_ns.is_none() {
                    e.start_unix_ns = r.start_unix_ns;
                    e.end_unix_ns = r.end_unix_ns;
                    e.period_ns = p.period_ns;
                }
            }
            // The nearest span of the name at or above each span id, found once per id.
            let mut owner: HashMap<SpanId, Option<SpanId>> = HashMap::new();
            for_each_sample(window, filter, |_, s| {
                self.samples += s.wall_samples;
                let Some(c) = s.span else { return };
                let o = *owner.entry(c.span_id).or_insert_with(|| {
                    let mut found = None;
                    named_ancestors(
                        |id| index.get(&id),
                        index.len(),
                        c.span_id,
                        |n, id, _| {
                            if n == name && found.is_none() {
                                found = Some(id);
                            }
                        },
                    );
                    found
                });
                if let Some(o) = o.and_then(|o| self.spans.get_mut(&o)) {
                    o.samples += s.wall_samples;
                }
            });
        }
    }

    /// Adds one window's part as its summary holds it: the window's unsampled spans, the
    /// selected samples, and each span of the name with its samples (those whose nearest
    /// span of the name, itself or an ancestor, it is). What [`SpanNameTally::add`] adds for
    /// that window.
    pub(crate) fn add_window(
        &mut self,
        unsampled_spans: u64,
        samples: u64,
        period_ns: u64,
        spans: impl IntoIterator<Item = (SpanId, u64, Option<u64>, u64)>,
    ) {
        self.windows += 1;
        self.unsampled_spans += unsampled_spans;
        self.samples += samples;
        for (id, start_unix_ns, end_unix_ns, samples) in spans {
            let e = self.spans.entry(id).or_default();
            if e.end_unix_ns.is_none() {
                e.start_unix_ns = start_unix_ns;
                e.end_unix_ns = end_unix_ns;
                e.period_ns = period_ns;
            }
            e.samples += samples;
        }
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: SpanNameTally) {
        self.samples += other.samples;
        self.unsampled_spans += other.unsampled_spans;
        self.windows += other.windows;
        for (id, n) in other.spans {
            let e = self.spans.entry(id).or_default();
            e.samples += n.samples;
            if e.end_unix_ns.is_none() {
                e.start_unix_ns = n.start_unix_ns;
                e.end_unix_ns = n.end_unix_ns;
                e.period_ns = n.period_ns;
            }
        }
    }

    /// The spans' counts, durations and samples.
    pub fn finish(self) -> SpanNameStats {
        // (duration, period) of each ended span, sorted, so that the float sum below is the
        // same whatever order the spans were tallied in.
        let mut ended: Vec<(u64, u64)> = Vec::with_capacity(self.spans.len());
        let mut ended_samples = 0;
        for n in self.spans.values() {
            if let Some(end) = n.end_unix_ns {
                ended.push((end.saturating_sub(n.start_unix_ns), n.period_ns));
                ended_samples += n.samples;
            }
        }
        ended.sort_unstable();
        let expected: f64 = ended
            .iter()
            .filter(|&&(_, p)| p > 0)
            .map(|&(d, p)| d as f64 / p as f64)
            .sum();
        let durations: Vec<u64> = ended.iter().map(|&(d, _)| d).collect();
        let mut periods = self.spans.values().map(|n| n.period_ns).filter(|&p| p > 0);
        let first = periods.next();
        let period_ns = first.filter(|&f| periods.all(|p| p == f));
        let spans = durations.len() as u64;
        let per_span = |x: f64| if spans == 0 { 0.0 } else { x / spans as f64 };
        SpanNameStats {
            spans,
            open_spans: self.spans.len() as u64 - spans,
            samples: self.samples,
            ended_span_samples: ended_samples,
            duration_p50_ns: nearest_rank(&durations, 50),
            duration_p95_ns: nearest_rank(&durations, 95),
            duration_max_ns: durations.last().copied(),
            samples_per_span: per_span(ended_samples as f64),
            expected_samples: expected,
            expected_per_span: per_span(expected),
            unsampled_spans: self.unsampled_spans,
            period_ns,
            windows: self.windows,
        }
    }
}

/// Walks up from `span_id` through the span records' parent links and calls `f(name, span,
/// own)` once per distinct span name on the way, with the nearest span of that name (`own`:
/// it is `span_id`'s own record). This is the rule for which span of a name a sample belongs
/// to: the nearest one at or above the sample's span. The walk is bounded by the records, so
/// corrupt parent links cannot loop forever; a span without a record ends it.
///
/// `record` finds a span's record among `records` records.
pub(crate) fn named_ancestors<'a>(
    record: impl Fn(SpanId) -> Option<&'a SpanRecord>,
    records: usize,
    span_id: SpanId,
    mut f: impl FnMut(&'a str, SpanId, bool),
) {
    let mut seen: Vec<&str> = Vec::new();
    let mut at = Some(span_id);
    for step in 0..=records {
        let Some(r) = at.and_then(&record) else {
            return;
        };
        if !seen.contains(&&*r.name) {
            seen.push(&r.name);
            f(&r.name, r.span_id, step == 0);
        }
        at = r.parent_span_id;
    }
}

/// The `p`th percentile of sorted values by the nearest-rank method: the smallest value with
/// at least `p`% of the values at or below it. `None` for no values.
fn nearest_rank(sorted: &[u64], p: u64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (sorted.len() as u64 * p).div_ceil(100).max(1);
    sorted.get(rank as usize - 1).copied()
}

/// Every span of one name in a selection, in aggregate.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SpanNameStats {
    /// Ended spans of the name with a record in the windows read (see the module's docs: a
    /// span with no sample has no record).
    pub spans: u64,
    /// Spans of the name still open at the last window read.
    pub open_spans: u64,
    /// Samples selected: of the spans (and, with descendants, of the spans below them).
    pub samples: u64,
    /// Of `samples`, those of the ended spans.
    pub ended_span_samples: u64,
    /// Median duration of the ended spans (nearest rank).
    pub duration_p50_ns: Option<u64>,
    /// 95th percentile duration (nearest rank).
    pub duration_p95_ns: Option<u64>,
    /// Longest duration.
    pub duration_max_ns: Option<u64>,
    /// `ended_span_samples / spans`.
    pub samples_per_span: f64,
    /// Samples the ended spans' durations predict at the sampling rate: the sum of
    /// `duration / period`.
    pub expected_samples: f64,
    /// `expected_samples / spans`.
    pub expected_per_span: f64,
    /// Spans of any name that the windows read left out for having no sample.
    pub unsampled_spans: u64,
    /// The sampling period of the windows that hold the spans, if they all had the same.
    pub period_ns: Option<u64>,
    /// Windows read.
    pub windows: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(nearest_rank(&[], 50), None);
        assert_eq!(nearest_rank(&[7], 95), Some(7));
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!(nearest_rank(&v, 50), Some(10));
        assert_eq!(nearest_rank(&v, 95), Some(19));
        assert_eq!(nearest_rank(&v, 100), Some(20));
    }
}
