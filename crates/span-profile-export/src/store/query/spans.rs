//! The spans of some windows, with their samples: listing, tallies, the slowest of a name.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use span_profile_core::{Profile, SpanId, SpanRecord};

use super::Filter;

/// A span with its samples: those of the span and its descendants, and its own.
#[derive(Debug, Clone, Serialize)]
pub struct SpanSummary {
    /// The span.
    pub span: SpanRecord,
    /// Wall samples of the span and every span below it (the span tree of the windows read):
    /// the request's samples, for a root span.
    pub samples: u64,
    /// Wall samples with this exact span id: taken while it was the innermost current span.
    pub own_samples: u64,
}

/// The span table and per-span sample counts of some windows: the mergeable form of
/// [`spans`]. Tallies of disjoint windows made with the same filter merge into the tally of
/// all of them, so windows can be read one at a time.
#[derive(Debug, Clone, Default)]
pub struct SpanTally {
    records: HashMap<SpanId, SpanRecord>,
    samples: HashMap<SpanId, u64>,
}

impl SpanTally {
    /// Adds the span records (of the trace, if the filter names one) and the span sample
    /// counts of the windows that pass `filter`'s window test.
    pub fn add(&mut self, profiles: &[Profile], filter: &Filter) {
        for p in profiles.iter().filter(|p| filter.matches_window(p)) {
            for s in &p.samples {
                if let Some(c) = s.span {
                    *self.samples.entry(c.span_id).or_default() += s.wall_samples;
                }
            }
            for r in p
                .spans
                .iter()
                .filter(|r| filter.trace_id.is_none_or(|t| r.trace_id == t))
            {
                self.add_record(r.clone());
            }
        }
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: SpanTally) {
        for (id, n) in other.samples {
            *self.samples.entry(id).or_default() += n;
        }
        for r in other.records.into_values() {
            self.add_record(r);
        }
    }

    /// An ended record wins over an open one.
    fn add_record(&mut self, r: SpanRecord) {
        match self.records.get(&r.span_id) {
            Some(existing) if existing.end_unix_ns.is_some() => {}
            _ => {
                self.records.insert(r.span_id, r);
            }
        }
    }

    /// Ended spans, slowest first (ties by span id), with their sample counts: their own, and
    /// with their descendants (by the parent links of every record added, whichever window it
    /// came from, so a request that crosses windows is counted whole).
    pub fn finish(self) -> Vec<SpanSummary> {
        let own = self.samples;
        let with_descendants = subtree_samples(&self.records, &own);
        let mut out: Vec<SpanSummary> = self
            .records
            .into_values()
            .filter(|s| s.end_unix_ns.is_some())
            .map(|span| SpanSummary {
                samples: with_descendants.get(&span.span_id).copied().unwrap_or(0),
                own_samples: own.get(&span.span_id).copied().unwrap_or(0),
                span,
            })
            .collect();
        out.sort_by(|a, b| {
            b.span
                .duration_ns()
                .cmp(&a.span.duration_ns())
                .then(a.span.span_id.cmp(&b.span.span_id))
        });
        out
    }
}

/// Each recorded span's own samples plus those of every span below it. Each span's own count
/// is added to itself and to each ancestor once (a cycle in corrupt parent links stops at the
/// first repeat). Samples of a span without a record count for no ancestor.
fn subtree_samples(
    records: &HashMap<SpanId, SpanRecord>,
    own: &HashMap<SpanId, u64>,
) -> HashMap<SpanId, u64> {
    let mut out: HashMap<SpanId, u64> = records.keys().map(|&id| (id, 0)).collect();
    let mut seen: HashSet<SpanId> = HashSet::new();
    for (&id, &n) in own {
        if n == 0 {
            continue;
        }
        seen.clear();
        let mut at = Some(id);
        while let Some(s) = at {
            if !seen.insert(s) {
                break;
            }
            let Some(r) = records.get(&s) else { break };
            *out.entry(s).or_default() += n;
            at = r.parent_span_id;
        }
    }
    out
}

/// Ended spans of the selected windows (and of the filter's trace, if it names one), slowest
/// first, with their sample counts (see [`SpanTally::finish`]).
pub fn spans(profiles: &[Profile], filter: &Filter) -> Vec<SpanSummary> {
    let mut t = SpanTally::default();
    t.add(profiles, filter);
    t.finish()
}

/// The slowest ended span with this name, if any.
pub fn slowest_span(profiles: &[Profile], name: &str) -> Option<SpanRecord> {
    spans(profiles, &Filter::default())
        .into_iter()
        .find(|s| &*s.span.name == name)
        .map(|s| s.span)
}
