//! Where a selection's CPU goes: by route with CPU per request (ADR 0032), and by leaf frame.

use std::collections::{HashMap, HashSet};

use rustc_hash::FxHashMap;

use span_profile_core::{Profile, ProfileSample, SpanId};

use super::{for_each_sample, Filter};
use crate::store::frames::{display_name, group_key, Grouping};

/// One route's requests over some windows (ADR 0032): what CPU per request divides by.
///
/// A window written since requests are counted knows every request that ended in it, sampled
/// or not ([`Profile::requests`]). An older window knows only the local-root spans in its span
/// table, which holds the spans its samples need (ADR 0010): the requests a sample caught.
/// Those are kept by span id, so that a request whose record several windows hold counts once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    /// Requests that ended in windows that count them.
    pub counted: u64,
    /// Local-root span ids of the route from the span tables of windows that do not count
    /// requests, or of every window when a trace is selected (a count is not by trace).
    pub seen: HashSet<SpanId>,
    /// Some selected windows did not count requests: their requests are only those a sample
    /// caught, so a short route's count is low and its CPU per request high.
    pub sampled_only: bool,
}

impl Requests {
    /// How many requests.
    ///
    /// ```
    /// use span_profile_export::store::query::Requests;
    /// let mut r = Requests { counted: 90, ..Requests::default() };
    /// r.seen.insert(span_profile_core::SpanId::from_u64(7).unwrap());
    /// assert_eq!(r.count(), 91);
    /// ```
    pub fn count(&self) -> u64 {
        self.counted + self.seen.len() as u64
    }

    /// Adds the requests of other windows (a request seen in both counts once).
    pub fn merge(&mut self, other: Requests) {
        self.counted += other.counted;
        self.seen.extend(other.seen);
        self.sampled_only |= other.sampled_only;
    }
}

/// The requests of window `p` that `filter` selects, by route. The window must be one
/// `filter` selects.
pub(crate) fn window_requests<'p>(p: &'p Profile, filter: &Filter) -> FxHashMap<&'p str, Requests> {
    let mut by_route: FxHashMap<&str, Requests> = FxHashMap::default();
    let wanted = |r: &str| filter.route.as_deref().is_none_or(|want| want == r);
    match (&p.requests, filter.trace_id) {
        (Some(counts), None) => {
            for c in counts.iter().filter(|c| wanted(&c.route)) {
                by_route.entry(&c.route).or_default().counted += c.requests;
            }
        }
        (counts, trace) => {
            for r in &p.spans {
                let Some(name) = r.route.as_deref() else {
                    continue;
                };
                if r.span_id == r.local_root_span_id
                    && wanted(name)
                    && trace.is_none_or(|t| t == r.trace_id)
                {
                    let e = by_route.entry(name).or_default();
                    e.seen.insert(r.span_id);
                    e.sampled_only |= counts.is_none();
                }
            }
        }
    }
    by_route
}

/// A route's CPU and its requests, in a [`CostAttribution`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteCost {
    /// CPU samples with this route label.
    pub cpu_samples: u64,
    /// CPU time of those samples, nanoseconds.
    pub cpu_ns: u64,
    /// The route's requests.
    pub requests: Requests,
    /// Some of the route's samples are in windows that neither count requests nor keep the
    /// spans (roll-ups of such windows made by `compact`), so its requests cannot be counted.
    pub requests_unknown: bool,
}

impl RouteCost {
    /// How many requests, when they can be counted.
    pub fn request_count(&self) -> Option<u64> {
        (!self.requests_unknown).then_some(self.requests.count())
    }

    /// CPU time per request, nanoseconds (`None` without requests or when they cannot be
    /// counted).
    pub fn cpu_ns_per_request(&self) -> Option<u64> {
        let n = self.request_count()?;
        (n > 0).then(|| self.cpu_ns / n)
    }
}

/// Where a selection's CPU goes: by route, with each route's requests, and by leaf frame (self
/// CPU, so that thread and event-loop entry frames, which are never the leaf of a busy
/// stack, do not show). The mergeable answer of [`cost_attribution`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CostAttribution {
    /// CPU samples of the selection.
    pub cpu_samples: u64,
    /// CPU time of the selection, nanoseconds.
    pub cpu_ns: u64,
    /// By route label.
    pub routes: HashMap<String, RouteCost>,
    /// Self CPU samples by leaf frame, as (function, file).
    pub self_cpu: HashMap<(String, String), u64>,
}

impl CostAttribution {
    /// Adds the attribution of other windows (requests seen in both count once).
    pub fn merge(&mut self, other: CostAttribution) {
        self.cpu_samples += other.cpu_samples;
        self.cpu_ns += other.cpu_ns;
        for (route, c) in other.routes {
            let e = self.routes.entry(route).or_default();
            e.cpu_samples += c.cpu_samples;
            e.cpu_ns += c.cpu_ns;
            e.requests.merge(c.requests);
            e.requests_unknown |= c.requests_unknown;
        }
        for (k, n) in other.self_cpu {
            *self.self_cpu.entry(k).or_default() += n;
        }
    }

    /// Self CPU samples grouped `by` module or package ([`group_key`]); by function and line
    /// it is keyed by [`display_name`]. Largest first, ties by key.
    pub fn self_cpu_by(&self, by: Grouping) -> Vec<(String, u64)> {
        let mut m: HashMap<String, u64> = HashMap::new();
        for ((function, file), &n) in &self.self_cpu {
            let key = match by {
                Grouping::Module | Grouping::Package => group_key(by, file),
                _ => display_name(function, file),
            };
            *m.entry(key).or_default() += n;
        }
        let mut v: Vec<(String, u64)> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }
}

/// CPU by route (with the requests of each route, [`Requests`]) and self CPU by leaf
/// frame ([`leaf_frame`](crate::store::frames::leaf_frame); a stack without a frame counts
/// under an empty function and file), of the selected samples.
pub fn cost_attribution(profiles: &[Profile], filter: &Filter) -> CostAttribution {
    let mut a = CostAttribution::default();
    let mut self_cpu: FxHashMap<(&str, &str), u64> = FxHashMap::default();
    for_each_sample(profiles, filter, |p, s| {
        if s.cpu_samples == 0 && s.cpu_ns == 0 {
            return;
        }
        a.cpu_samples += s.cpu_samples;
        a.cpu_ns += s.cpu_ns;
        let r = match a.routes.get_mut(&*s.route) {
            Some(r) => r,
            None => a.routes.entry(s.route.to_string()).or_default(),
        };
        r.cpu_samples += s.cpu_samples;
        r.cpu_ns += s.cpu_ns;
        if p.requests.is_none() {
            r.requests_unknown |= spans_dropped(p, s);
            r.requests.sampled_only = true;
        }
        if s.cpu_samples > 0 {
            let leaf = crate::store::frames::leaf_frame(p, s.stack).unwrap_or(("", ""));
            *self_cpu.entry(leaf).or_default() += s.cpu_samples;
        }
    });
    for ((function, file), n) in self_cpu {
        *a.self_cpu
            .entry((function.to_owned(), file.to_owned()))
            .or_default() += n;
    }
    for p in profiles.iter().filter(|p| filter.matches_window(p)) {
        for (route, n) in window_requests(p, filter) {
            a.routes
                .entry(route.to_owned())
                .or_default()
                .requests
                .merge(n);
        }
    }
    a
}

/// Whether a sample lost its span, so that its route's requests cannot be counted from span
/// records: a span without the window's span table, or a request's route without its span (a
/// roll-up made by `compact` keeps no span ids and no span tables). Matters only for a window
/// that does not count its requests.
pub(crate) fn spans_dropped(p: &Profile, s: &ProfileSample) -> bool {
    match s.span {
        Some(_) => p.spans.is_empty(),
        None => &*s.route != span_profile_core::labels::BACKGROUND_ROUTE,
    }
}
