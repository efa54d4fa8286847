//! One span against its peers: the span (with its descendants) against every other ended span
//! of the same name in the selection (each with its descendants), frame by frame, by the wall
//! samples at each leaf frame. What the slow one did that the typical ones did not.

use std::collections::HashMap;

use serde::Serialize;
use span_profile_core::{Profile, SpanId, SpanRecord};

use crate::store::fold::{QueryError, Store};
use crate::store::frames::{leaf_frame, FrameId};
use crate::store::query::{self, Filter};

/// Deepest parent chain followed from a sample's span up to its group's span.
const MAX_DEPTH: usize = 256;

/// A frame in a [`PeerComparison`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerFrame {
    /// The frame.
    #[serde(flatten)]
    pub frame: FrameId,
    /// Wall samples at this leaf in the span.
    pub samples: u64,
    /// Wall samples at this leaf per peer span, on average.
    pub peer_mean: f64,
    /// Peers with at least one sample at this leaf.
    pub peers_with: usize,
}

impl PeerFrame {
    /// Samples the span has here beyond a typical peer: `samples - peer_mean`.
    pub fn excess(&self) -> f64 {
        self.samples as f64 - self.peer_mean
    }
}

/// The answer of [`span_vs_peers`].
#[derive(Debug, Clone, Serialize)]
pub struct PeerComparison {
    /// The span.
    pub span: SpanRecord,
    /// Its wall samples, descendants included.
    pub samples: u64,
    /// Ended spans of the same name in the selection, the span left out.
    pub peers: usize,
    /// Wall samples per peer (descendants included), on average.
    pub peer_samples_mean: f64,
    /// The peers' median duration.
    pub peer_duration_p50_ns: Option<u64>,
    /// Every frame of the span or its peers, most excess first.
    pub frames: Vec<PeerFrame>,
}

/// Wall samples by leaf frame of each group span (the span and its peers): the mergeable part
/// of [`span_vs_peers`].
#[derive(Debug, Clone, Default)]
pub struct PeerTally {
    by_span: HashMap<SpanId, (u64, HashMap<FrameId, u64>)>,
}

impl PeerTally {
    /// Counts the samples of `profiles` whose span is in `owners`' keys, under its owner.
    pub fn add(&mut self, profiles: &[Profile], filter: &Filter, owners: &HashMap<SpanId, SpanId>) {
        query::for_each_sample(profiles, filter, |p, s| {
            let Some(owner) = s.span.and_then(|c| owners.get(&c.span_id)) else {
                return;
            };
            let e = self.by_span.entry(*owner).or_default();
            e.0 += s.wall_samples;
            if let Some((function, file)) = leaf_frame(p, s.stack) {
                let key = FrameId {
                    function: function.to_owned(),
                    file: file.to_owned(),
                };
                *e.1.entry(key).or_default() += s.wall_samples;
            }
        });
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: PeerTally) {
        for (id, (n, frames)) in other.by_span {
            let e = self.by_span.entry(id).or_default();
            e.0 += n;
            for (k, c) in frames {
                *e.1.entry(k).or_default() += c;
            }
        }
    }
}

/// Each span of `index` under a span of the group (`name`'s ended spans): the group span it is
/// (or is a descendant of), the nearest when spans of that name nest.
pub fn group_owners(index: &HashMap<SpanId, SpanRecord>, name: &str) -> HashMap<SpanId, SpanId> {
    let is_group = |id: &SpanId| {
        index
            .get(id)
            .is_some_and(|r| &*r.name == name && r.end_unix_ns.is_some())
    };
    let mut out = HashMap::new();
    for &id in index.keys() {
        let mut at = Some(id);
        for _ in 0..MAX_DEPTH {
            let Some(cur) = at else { break };
            if is_group(&cur) {
                out.insert(id, cur);
                break;
            }
            at = index.get(&cur).and_then(|r| r.parent_span_id);
        }
    }
    out
}

/// The comparison of `target` with its peers from a finished tally.
pub fn finish(
    index: &HashMap<SpanId, SpanRecord>,
    target: &SpanRecord,
    tally: PeerTally,
) -> PeerComparison {
    let mut peers: Vec<&SpanRecord> = index
        .values()
        .filter(|r| r.name == target.name && r.end_unix_ns.is_some() && r.span_id != target.span_id)
        .collect();
    peers.sort_by_key(|r| r.duration_ns());
    let n = peers.len();
    let mut by_span = tally.by_span;
    let (samples, own) = by_span.remove(&target.span_id).unwrap_or_default();
    let mut peer_total = 0u64;
    let mut frames: HashMap<FrameId, (u64, u64, usize)> =
        own.into_iter().map(|(k, c)| (k, (c, 0, 0))).collect();
    for p in &peers {
        let Some((s, fs)) = by_span.remove(&p.span_id) else {
            continue;
        };
        peer_total += s;
        for (k, c) in fs {
            let e = frames.entry(k).or_default();
            e.1 += c;
            if c > 0 {
                e.2 += 1;
            }
        }
    }
    let mean = |x: u64| if n == 0 { 0.0 } else { x as f64 / n as f64 };
    let mut frames: Vec<PeerFrame> = frames
        .into_iter()
        .map(|(frame, (s, p, with))| PeerFrame {
            frame,
            samples: s,
            peer_mean: mean(p),
            peers_with: with,
        })
        .collect();
    frames.sort_by(|a, b| {
        b.excess()
            .total_cmp(&a.excess())
            .then(a.frame.cmp(&b.frame))
    });
    PeerComparison {
        span: target.clone(),
        samples,
        peers: n,
        peer_samples_mean: mean(peer_total),
        peer_duration_p50_ns: (n > 0).then(|| peers[n / 2].duration_ns()).flatten(),
        frames,
    }
}

/// One span (`span_id`, or the slowest ended span named `slowest`) against every other ended
/// span of its name in the windows `filter` selects (its span and trace fields are ignored).
/// Reads the selection twice: span tables, then samples.
pub fn span_vs_peers(
    store: &Store,
    filter: &Filter,
    span_id: Option<SpanId>,
    slowest: Option<&str>,
) -> Result<PeerComparison, QueryError> {
    let windows = Filter {
        span_id: None,
        span_name: None,
        trace_id: None,
        with_children: false,
        ..filter.clone()
    };
    let files = store.list(&windows)?;
    let tables: Vec<Profile> = store
        .fold(&files, Vec::new, |acc, _, p| {
            if windows.matches_window(&p) {
                let mut t = Profile::empty(p.resource, p.start_unix_ns, p.duration_ns, p.period_ns);
                t.spans = p.spans;
                acc.push(t);
            }
        })
        .into_iter()
        .flatten()
        .collect();
    let index = query::span_index(&tables);
    let target = match (span_id, slowest) {
        (Some(id), _) => index
            .get(&id)
            .filter(|r| r.end_unix_ns.is_some())
            .cloned()
            .ok_or(QueryError::NoSpan {
                span_id: id,
                windows: tables.len(),
            })?,
        (None, name) => {
            let name = name.unwrap_or_default();
            let ended = query::spans(&tables, &Filter::default());
            match ended.iter().find(|s| &*s.span.name == name) {
                Some(s) => s.span.clone(),
                None => {
                    let mut known: Vec<String> =
                        ended.iter().map(|s| s.span.name.to_string()).collect();
                    known.sort_unstable();
                    known.dedup();
                    return Err(QueryError::NoSpanNamed {
                        name: name.to_owned(),
                        windows: tables.len(),
                        known,
                    });
                }
            }
        }
    };
    let owners = group_owners(&index, &target.name);
    let tally = store
        .fold(&files, PeerTally::default, |acc, _, p| {
            acc.add(std::slice::from_ref(&p), &windows, &owners);
        })
        .into_iter()
        .fold(PeerTally::default(), |mut a, b| {
            a.merge(b);
            a
        });
    Ok(finish(&index, &target, tally))
}
