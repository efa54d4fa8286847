//! Questions asked of stored windows: which samples a [`Filter`] selects, a span's samples and
//! top frames, the same for a trace, a route or a service, the routes that produce a frame,
//! the spans of some windows, and the counting rules every answer shares (also those of
//! [`WindowSummary`](crate::store::summary::WindowSummary) and
//! [`diff`](crate::store::diff)).
//!
//! Everything here works on a slice of [`Profile`]s, however they were loaded. This module
//! owns what every answer shares: the [`Filter`], the samples it selects, the span records and
//! their descendants. The answers live in submodules, re-exported here: reports of top frames
//! (`report`), share tallies and the routes behind a frame (`tally`), cost attribution and CPU
//! per request (`cost`), and the spans of some windows (`spans`).
//!
//! ```
//! use span_profile_export::store::query::{report, Filter};
//! # let profiles: Vec<span_profile_core::Profile> = vec![];
//! let r = report(&profiles, &Filter::default().route("/checkout"));
//! for f in r.top(10) {
//!     println!("{:>6} {}", f.total_samples, f.function);
//! }
//! ```

mod cost;
mod report;
mod spans;
mod tally;

pub use cost::{cost_attribution, CostAttribution, Requests, RouteCost};
pub(crate) use cost::{spans_dropped, window_requests};
pub(crate) use report::FrameCosts;
pub use report::{
    report, report_with_lines, Coverage, FrameCost, LineCost, Partition, PartitionRow, Report,
};
pub use spans::{slowest_span, spans, SpanSummary, SpanTally};
pub use tally::{
    cpu_by_root_frame, folded_stacks, frame_cpu_by_route, frames_named, route_shares,
    routes_for_frame, RouteShare, Tally,
};

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use rustc_hash::FxHashSet;

use span_profile_core::{Profile, ProfileSample, SpanId, SpanRecord, TraceId, WindowInfo};

/// Which samples to select. Set fields combine with AND.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Filter {
    /// Samples of this span (and, with `with_children`, of every span below it).
    pub span_id: Option<SpanId>,
    /// Include descendants of `span_id`.
    pub with_children: bool,
    /// Samples of every span with this name (and, with `with_children`, of every span below
    /// one), window by window: a window's samples are matched by the span records of that
    /// window, which hold every sampled span and its ancestors (ADR 0010).
    pub span_name: Option<String>,
    /// Samples of this trace.
    pub trace_id: Option<TraceId>,
    /// Samples with this route label.
    pub route: Option<String>,
    /// Windows of this service.
    pub service: Option<String>,
    /// Windows whose resource has `service.version` equal to this.
    pub version: Option<String>,
    /// Windows whose resource has `deployment.environment` equal to this.
    pub environment: Option<String>,
    /// Windows whose resource has this instance label (`service.instance.id`, or the host).
    pub instance: Option<String>,
    /// Windows that end after this time (Unix ns).
    pub since_unix_ns: Option<u64>,
    /// Windows that start before this time (Unix ns).
    pub until_unix_ns: Option<u64>,
}

impl Filter {
    /// Selects one span's samples.
    pub fn span(mut self, id: SpanId, with_children: bool) -> Self {
        self.span_id = Some(id);
        self.with_children = with_children;
        self
    }
    /// Selects the samples of every span named `name`.
    pub fn span_name(mut self, name: impl Into<String>, with_children: bool) -> Self {
        self.span_name = Some(name.into());
        self.with_children = with_children;
        self
    }
    /// Selects one trace's samples.
    pub fn trace(mut self, id: TraceId) -> Self {
        self.trace_id = Some(id);
        self
    }
    /// Selects one route's samples.
    pub fn route(mut self, route: impl Into<String>) -> Self {
        self.route = Some(route.into());
        self
    }
    /// Selects one service's windows.
    pub fn service(mut self, service: impl Into<String>) -> Self {
        self.service = Some(service.into());
        self
    }
    /// Selects one version's windows.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }
    /// Selects one environment's windows (`deployment.environment`).
    pub fn environment(mut self, environment: impl Into<String>) -> Self {
        self.environment = Some(environment.into());
        self
    }
    /// Selects one instance's windows.
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }
    /// Selects windows overlapping `[since, until)`.
    pub fn between(mut self, since_unix_ns: Option<u64>, until_unix_ns: Option<u64>) -> Self {
        self.since_unix_ns = since_unix_ns;
        self.until_unix_ns = until_unix_ns;
        self
    }

    /// Whether a window's resource and time range can contain selected samples.
    pub fn matches_window(&self, p: &Profile) -> bool {
        self.matches(&p.info())
    }

    /// [`matches_window`](Filter::matches_window) from what a window is, whatever holds it (a
    /// [`Profile`] or a [`WindowSummary`](crate::store::summary::WindowSummary)).
    pub fn matches(&self, w: &WindowInfo<'_>) -> bool {
        self.service.as_deref().is_none_or(|s| w.service == s)
            && self.version.as_deref().is_none_or(|v| w.version == Some(v))
            && self
                .environment
                .as_deref()
                .is_none_or(|e| w.environment == Some(e))
            && self
                .instance
                .as_deref()
                .is_none_or(|i| w.instance == Some(i))
            && self
                .since_unix_ns
                .is_none_or(|t| w.start_unix_ns.saturating_add(w.duration_ns) > t)
            && self.until_unix_ns.is_none_or(|t| w.start_unix_ns < t)
    }
}

/// Every span recorded in `profiles`, one record per span id (an ended record wins over an
/// open one).
pub fn span_index(profiles: &[Profile]) -> HashMap<SpanId, SpanRecord> {
    let mut out: HashMap<SpanId, SpanRecord> = HashMap::new();
    for s in profiles.iter().flat_map(|p| &p.spans) {
        match out.get(&s.span_id) {
            Some(existing) if existing.end_unix_ns.is_some() => {}
            _ => {
                out.insert(s.span_id, s.clone());
            }
        }
    }
    out
}

/// `root` and every span below it in the span table.
pub fn descendants(spans: &HashMap<SpanId, SpanRecord>, root: SpanId) -> HashSet<SpanId> {
    descendants_of(spans, [root])
}

/// The `roots` and every span below one of them in the span table.
fn descendants_of(
    spans: &HashMap<SpanId, SpanRecord>,
    roots: impl IntoIterator<Item = SpanId>,
) -> HashSet<SpanId> {
    let mut children: HashMap<SpanId, Vec<SpanId>> = HashMap::new();
    for s in spans.values() {
        if let Some(p) = s.parent_span_id {
            children.entry(p).or_default().push(s.span_id);
        }
    }
    let mut out: HashSet<SpanId> = roots.into_iter().collect();
    let mut todo: Vec<SpanId> = out.iter().copied().collect();
    while let Some(s) = todo.pop() {
        for &c in children.get(&s).map(Vec::as_slice).unwrap_or(&[]) {
            if out.insert(c) {
                todo.push(c);
            }
        }
    }
    out
}

/// Calls `f` once for each distinct key of a stack: a function on a stack twice (recursion)
/// counts once for that sample.
pub(crate) fn distinct<K: Copy + Eq + Hash>(
    seen: &mut FxHashSet<K>,
    keys: impl IntoIterator<Item = K>,
    mut f: impl FnMut(K),
) {
    seen.clear();
    for k in keys {
        if seen.insert(k) {
            f(k);
        }
    }
}

/// `a / b`, 0 when `b` is 0.
pub(crate) fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Applies `filter` sample by sample, calling `f` for each selected sample of each window.
pub fn for_each_sample<'a>(
    profiles: &'a [Profile],
    filter: &Filter,
    mut f: impl FnMut(&'a Profile, &'a ProfileSample),
) {
    let spans = selected_spans(profiles, filter);
    for p in profiles.iter().filter(|p| filter.matches_window(p)) {
        for s in &p.samples {
            let span_ok = spans
                .as_ref()
                .is_none_or(|set| s.span.is_some_and(|c| set.contains(&c.span_id)));
            let trace_ok = filter
                .trace_id
                .is_none_or(|t| s.span.is_some_and(|c| c.trace_id == t));
            let route_ok = filter.route.as_ref().is_none_or(|r| &*s.route == r);
            if span_ok && trace_ok && route_ok {
                f(p, s);
            }
        }
    }
}

/// The span ids whose samples `filter` selects (`None`: it names no span). With both a span
/// id and a span name, the spans that both select.
fn selected_spans(profiles: &[Profile], filter: &Filter) -> Option<HashSet<SpanId>> {
    if filter.span_id.is_none() && filter.span_name.is_none() {
        return None;
    }
    let index = span_index(profiles);
    let by_id = filter.span_id.map(|id| match filter.with_children {
        true => descendants(&index, id),
        false => HashSet::from([id]),
    });
    let by_name = filter.span_name.as_deref().map(|name| {
        let named = index
            .values()
            .filter(|r| &*r.name == name)
            .map(|r| r.span_id);
        match filter.with_children {
            true => descendants_of(&index, named),
            false => named.collect(),
        }
    });
    match (by_id, by_name) {
        (Some(a), Some(b)) => Some(a.intersection(&b).copied().collect()),
        (a, b) => a.or(b),
    }
}
