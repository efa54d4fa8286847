//! Window summaries: what the route, service, version and time questions need from a window,
//! counted once when the window is written, so that a query over a day of windows need not
//! walk a day of stacks.
//!
//! A [`WindowSummary`] keeps, per route, the wall and CPU samples, each frame's self and total
//! wall samples, each function's inclusive CPU samples and the CPU samples by outermost frame.
//! It answers [`report`](crate::store::query::report),
//! [`cpu_by_frame`](crate::store::diff::cpu_by_frame),
//! [`frame_cpu_by_route`](crate::store::query::frame_cpu_by_route) and
//! [`cpu_by_root_frame`](crate::store::query::cpu_by_root_frame) exactly as they answer from
//! the [`Profile`], for filters that
//! name no span and no trace (those need the samples' span ids; the summary methods return
//! `None` for them). The counting rules are shared with the queries, not copied.

use rustc_hash::{FxHashMap, FxHashSet};

use span_profile_core::{Profile, SpanId, SpanRecord, WindowInfo};

use crate::store::diff::{FrameTally, RouteCpu};
use crate::store::frames::{self, FrameId};
use crate::store::query::{
    distinct, spans_dropped, CostAttribution, Filter, FrameCosts, Report, Requests, Tally,
};
use crate::store::span_name::{named_ancestors, SpanNameTally};

/// One window, summarized by route. Strings are kept once in [`WindowSummary::strings`] and
/// referenced by index; [`WindowSummary::string`] reads an index as `""` when it is out of
/// range, so a summary built by hand or decoded from a damaged file cannot make a query panic.
///
/// ```
/// use span_profile_export::store::query::{report, Filter};
/// use span_profile_export::store::summary::WindowSummary;
/// # let p = span_profile_core::Profile::empty(Default::default(), 0, 60_000_000_000, 10_000_000);
/// let summary = WindowSummary::from_profile(&p);
/// let f = Filter::default().route("/checkout");
/// let r = summary.report(&f).expect("no span or trace in the filter");
/// assert_eq!(r.samples, report(std::slice::from_ref(&p), &f).samples);
/// assert!(summary.report(&f.trace("4bf92f3577b34da6a3ce929d0e0e4736".parse().unwrap())).is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowSummary {
    /// `service.name` of the window's resource.
    pub service: String,
    /// `service.version` of the window's resource.
    pub version: Option<String>,
    /// The window's environment and instance; `None` in a summary written before summaries
    /// recorded them, which then declines filters by environment or instance
    /// ([`WindowSummary::can_answer`]).
    pub deployment: Option<Deployment>,
    /// Window start, Unix nanoseconds.
    pub start_unix_ns: u64,
    /// Window length in nanoseconds.
    pub duration_ns: u64,
    /// Wall samples of the whole window.
    pub wall_samples: u64,
    /// CPU samples of the whole window.
    pub cpu_samples: u64,
    /// Route names, function names and file names, referenced by index.
    pub strings: Vec<String>,
    /// One entry per route label, sorted by route name.
    pub routes: Vec<RouteSummary>,
    /// All routes' counts added up (its `route` is unused), when the summary has them: they
    /// answer the questions that select no route without adding up every route.
    pub all_routes: Option<RouteSummary>,
    /// The window's sampling period in nanoseconds (0 in a summary of format 1).
    pub period_ns: u64,
    /// Spans of any name that the window left out for having no sample.
    pub unsampled_spans: u64,
    /// CPU time, requests and lost spans by route, and with them the self CPU by leaf frame
    /// of every route ([`RouteSummary::self_cpu`]). `None` in a summary of format 1, which
    /// then declines the questions that need them (its window is decoded).
    pub costs: Option<WindowCosts>,
    /// The window's samples by span name, one entry per name in its span table, sorted by
    /// name. `None` in a summary of format 1, and when a reader decoded no span names
    /// ([`SummaryScope`]).
    pub span_names: Option<Vec<SpanNameSummary>>,
    /// What of the summary was read ([`SummaryScope::Whole`] unless a reader decoded only the
    /// part a question needs).
    pub scope: SummaryScope,
}

/// Where a window ran, as its summary records it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployment {
    /// `deployment.environment` of the window's resource.
    pub environment: Option<String>,
    /// The instance label of the window's resource.
    pub instance: Option<String>,
}

/// What of a [`WindowSummary`] is there: all of it, or only what one kind of question needs
/// (a reader that decodes less is faster). A summary asked a question its scope cannot answer
/// returns `None`, never a wrong answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SummaryScope {
    /// Every route, the total of all routes if the summary has one, and every span name.
    #[default]
    Whole,
    /// Every route, without the span names: what questions by route need.
    Routes,
    /// This span name's entry alone (none if the window has no span of it): answers filters
    /// that select spans by this name and no route.
    SpanName(String),
    /// This route's entry alone (none if the window has no samples of it): answers filters
    /// that select this route.
    Route(String),
    /// The total of all routes alone: answers filters that select no route, except questions
    /// by route ([`WindowSummary::frame_cpu_by_route`]).
    AllRoutes,
    /// Every route's name and sample counts, without their frames: what lists a store's
    /// contents ([`crate::store::inventory`]) needs. Answers no question about frames.
    RouteNames,
}

impl SummaryScope {
    /// The least a summary must hold to answer `filter`, `by_route` for questions that break
    /// CPU down by route.
    pub fn needed(filter: &Filter, by_route: bool) -> Self {
        if let Some(name) = &filter.span_name {
            return SummaryScope::SpanName(name.clone());
        }
        match &filter.route {
            Some(r) => SummaryScope::Route(r.clone()),
            None if by_route => SummaryScope::Routes,
            None => SummaryScope::AllRoutes,
        }
    }

    /// Whether every route's entry is read.
    fn has_every_route(&self) -> bool {
        matches!(self, SummaryScope::Whole | SummaryScope::Routes)
    }
}

/// One route's samples in a window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteSummary {
    /// The route label (index into [`WindowSummary::strings`]).
    pub route: u32,
    /// Wall samples with this route.
    pub wall_samples: u64,
    /// CPU samples with this route.
    pub cpu_samples: u64,
    /// Every frame (function and file) on a stack of the route, with its wall samples.
    pub frames: Vec<FrameSummary>,
    /// CPU samples by function, inclusive: counted once per sample wherever the function is on
    /// the stack. Functions without CPU samples are left out.
    pub function_cpu: Vec<(u32, u64)>,
    /// CPU samples by the function of the outermost frame (`""` for an empty stack).
    pub root_cpu: Vec<(u32, u64)>,
    /// CPU samples by leaf frame (self CPU), as [`leaf_frame`](frames::leaf_frame) finds
    /// it; a stack without a frame has no entry, so these add up to at most `cpu_samples`.
    /// Empty in a summary of format 1 (see [`WindowSummary::costs`]).
    pub self_cpu: Vec<LeafCpu>,
}

/// A leaf frame's CPU samples in one route of a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeafCpu {
    /// Function name (index into [`WindowSummary::strings`]).
    pub function: u32,
    /// File name (index into [`WindowSummary::strings`]).
    pub file: u32,
    /// CPU samples where it is the leaf.
    pub cpu_samples: u64,
}

/// A window's CPU time and requests by route: what CPU per request and a service's cost
/// attribution need beyond sample counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowCosts {
    /// One entry per route label with samples, sorted by route name.
    pub routes: Vec<RouteCosts>,
    /// The requests of a window that did not count them: (route label, local-root span id)
    /// of every local-root span record with a route, sorted, each pair once. Empty when
    /// `counted` is set.
    pub requests: Vec<(u32, SpanId)>,
    /// The window's request counts (route label, requests), sorted ([`Profile::requests`],
    /// ADR 0032); `None` when the window did not count them, or the summary is older.
    pub counted: Option<Vec<(u32, u64)>>,
}

/// One route's CPU in a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteCosts {
    /// The route label (index into [`WindowSummary::strings`]).
    pub route: u32,
    /// CPU samples with this route.
    pub cpu_samples: u64,
    /// CPU time of those samples, nanoseconds.
    pub cpu_ns: u64,
    /// Some of its samples on CPU lost their spans (a roll-up keeps no span tables), so its requests
    /// cannot be counted.
    pub requests_unknown: bool,
}

/// The samples of one span name in a window, as [`Filter::span_name`] selects them, with the
/// spans of that name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpanNameSummary {
    /// The span name (index into [`WindowSummary::strings`]).
    pub name: u32,
    /// Every span of the name in the window's span table, by span id.
    pub spans: Vec<NamedSpan>,
    /// The samples of the spans and of every span below one.
    pub with_descendants: SelectionSummary,
    /// The samples taken while a span of the name was the innermost span.
    pub own: SelectionSummary,
}

/// A span of a [`SpanNameSummary`]'s name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedSpan {
    /// Its id.
    pub span_id: SpanId,
    /// Start, Unix nanoseconds.
    pub start_unix_ns: u64,
    /// End, Unix nanoseconds; `None` while open.
    pub end_unix_ns: Option<u64>,
    /// Wall samples whose nearest span of the name (itself or an ancestor) it is.
    pub samples: u64,
    /// Wall samples with this exact span id.
    pub own_samples: u64,
}

/// Some samples of a window, counted by frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectionSummary {
    /// Wall samples.
    pub wall_samples: u64,
    /// CPU samples.
    pub cpu_samples: u64,
    /// Every frame on their stacks, with its wall samples.
    pub frames: Vec<FrameSummary>,
}

/// A frame's wall samples in one route of a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameSummary {
    /// Function name (index into [`WindowSummary::strings`]).
    pub function: u32,
    /// File name (index into [`WindowSummary::strings`]).
    pub file: u32,
    /// Wall samples where it is the leaf.
    pub self_wall: u64,
    /// Wall samples where it is anywhere on the stack (counted once per sample).
    pub total_wall: u64,
}

/// Interns strings into a summary's string table.
#[derive(Default)]
struct Strings<'a> {
    index: FxHashMap<&'a str, u32>,
    table: Vec<String>,
}

impl<'a> Strings<'a> {
    fn intern(&mut self, s: &'a str) -> u32 {
        *self.index.entry(s).or_insert_with(|| {
            self.table.push(s.to_owned());
            (self.table.len() - 1) as u32
        })
    }
}

/// A route's counts while a window is summarized; keys are string indices.
#[derive(Default)]
struct RouteCounts {
    wall: u64,
    cpu: u64,
    cpu_ns: u64,
    requests_unknown: bool,
    frames: FrameCosts<(u32, u32)>,
    function_cpu: FxHashMap<u32, u64>,
    root_cpu: FxHashMap<u32, u64>,
    self_cpu: FxHashMap<(u32, u32), u64>,
}

impl RouteCounts {
    /// Adds another route's counts (for the total of all routes).
    fn add(&mut self, other: &RouteCounts) {
        self.wall += other.wall;
        self.cpu += other.cpu;
        self.cpu_ns += other.cpu_ns;
        for (key, self_wall, total_wall) in other.frames.iter() {
            self.frames.add(key, self_wall, total_wall);
        }
        for (&k, &n) in &other.self_cpu {
            *self.self_cpu.entry(k).or_default() += n;
        }
        for (into, from) in [
            (&mut self.function_cpu, &other.function_cpu),
            (&mut self.root_cpu, &other.root_cpu),
        ] {
            for (&k, &n) in from {
                *into.entry(k).or_default() += n;
            }
        }
    }

    /// The route's entry, in a stable order.
    fn finish(self, route: u32) -> RouteSummary {
        let mut self_cpu: Vec<LeafCpu> = self
            .self_cpu
            .into_iter()
            .map(|((function, file), cpu_samples)| LeafCpu {
                function,
                file,
                cpu_samples,
            })
            .collect();
        self_cpu.sort_unstable_by_key(|l| (l.function, l.file));
        RouteSummary {
            route,
            wall_samples: self.wall,
            cpu_samples: self.cpu,
            frames: frame_summaries(&self.frames),
            function_cpu: sorted(self.function_cpu),
            root_cpu: sorted(self.root_cpu),
            self_cpu,
        }
    }
}

/// Frame counts in a stable order.
fn frame_summaries(costs: &FrameCosts<(u32, u32)>) -> Vec<FrameSummary> {
    let mut frames: Vec<FrameSummary> = costs
        .iter()
        .map(|((function, file), self_wall, total_wall)| FrameSummary {
            function,
            file,
            self_wall,
            total_wall,
        })
        .collect();
    frames.sort_unstable_by_key(|f| (f.function, f.file));
    frames
}

/// One span name's counts while a window is summarized.
#[derive(Default)]
struct SelectionCounts {
    wall: u64,
    cpu: u64,
    frames: FrameCosts<(u32, u32)>,
}

impl SelectionCounts {
    fn add(&mut self, stack: impl IntoIterator<Item = (u32, u32)>, wall: u64, cpu: u64) {
        self.wall += wall;
        self.cpu += cpu;
        self.frames.add_stack(stack, wall);
    }

    fn finish(&self) -> SelectionSummary {
        SelectionSummary {
            wall_samples: self.wall,
            cpu_samples: self.cpu,
            frames: frame_summaries(&self.frames),
        }
    }
}

impl WindowSummary {
    /// Summarizes one window.
    pub fn from_profile(p: &Profile) -> Self {
        let mut strings = Strings::default();
        // Each frame's (function, file) as string indices: frames that differ only in the
        // line share a key, as they share a row of a report.
        let keys: Vec<(u32, u32)> = p
            .frames
            .iter()
            .map(|f| (strings.intern(&f.function), strings.intern(&f.file)))
            .collect();
        let empty = strings.intern("");
        // The window's span records by id, an ended record winning over an open one (as
        // `query::span_index` has them), borrowed: a busy window has thousands.
        let mut index: FxHashMap<SpanId, &SpanRecord> = FxHashMap::default();
        for r in &p.spans {
            match index.get(&r.span_id) {
                Some(e) if e.end_unix_ns.is_some() => {}
                _ => {
                    index.insert(r.span_id, r);
                }
            }
        }
        let mut by_name: FxHashMap<&str, (SelectionCounts, SelectionCounts)> = FxHashMap::default();
        // (samples with descendants, own samples) by span id of a named span.
        let mut owned: FxHashMap<SpanId, (u64, u64)> = FxHashMap::default();
        let mut routes: FxHashMap<&str, RouteCounts> = FxHashMap::default();
        let mut seen = FxHashSet::default();
        for s in &p.samples {
            let r = routes.entry(&s.route).or_default();
            r.wall += s.wall_samples;
            r.cpu += s.cpu_samples;
            r.cpu_ns += s.cpu_ns;
            // A window that counts its requests knows them without its spans (ADR 0032).
            if p.requests.is_none() && (s.cpu_samples > 0 || s.cpu_ns > 0) && spans_dropped(p, s) {
                r.requests_unknown = true;
            }
            // `keys` has one entry per frame: an out-of-range index is skipped, as
            // `Profile::stack_frames` skips it.
            let stack = || {
                p.stacks
                    .get(s.stack as usize)
                    .map_or(&[][..], |st| st.frames.as_slice())
                    .iter()
                    .filter_map(|&f| keys.get(f as usize).copied())
            };
            r.frames.add_stack(stack(), s.wall_samples);
            if let Some(c) = s.span {
                // Each span name at or above the sample's span, with its nearest span of that
                // name and whether that is the span itself.
                let record = |id| index.get(&id).copied();
                named_ancestors(record, index.len(), c.span_id, |name, id, own| {
                    let (all, mine) = by_name.entry(name).or_default();
                    let o = owned.entry(id).or_default();
                    all.add(stack(), s.wall_samples, s.cpu_samples);
                    o.0 += s.wall_samples;
                    if own {
                        mine.add(stack(), s.wall_samples, s.cpu_samples);
                        o.1 += s.wall_samples;
                    }
                });
            }
            if s.cpu_samples == 0 {
                continue;
            }
            // The leaf is the first frame the stack resolves to (`frames::leaf_frame`).
            if let Some(leaf) = stack().next() {
                *r.self_cpu.entry(leaf).or_default() += s.cpu_samples;
            }
            distinct(&mut seen, stack().map(|(function, _)| function), |f| {
                *r.function_cpu.entry(f).or_default() += s.cpu_samples;
            });
            let root = stack().next_back().map_or(empty, |(function, _)| function);
            *r.root_cpu.entry(root).or_default() += s.cpu_samples;
        }
        let mut names: Vec<&str> = routes.keys().copied().collect();
        names.sort_unstable();
        let mut all = RouteCounts::default();
        let mut costs = WindowCosts::default();
        let routes: Vec<RouteSummary> = names
            .into_iter()
            .map(|name| {
                let c = routes.remove(name).unwrap_or_default();
                all.add(&c);
                let route = strings.intern(name);
                costs.routes.push(RouteCosts {
                    route,
                    cpu_samples: c.cpu,
                    cpu_ns: c.cpu_ns,
                    requests_unknown: c.requests_unknown,
                });
                c.finish(route)
            })
            .collect();
        match &p.requests {
            Some(counts) => {
                let mut counted: Vec<(u32, u64)> = counts
                    .iter()
                    .map(|c| (strings.intern(&c.route), c.requests))
                    .collect();
                counted.sort_unstable();
                costs.counted = Some(counted);
            }
            None => {
                for r in index.values() {
                    if let Some(route) = r.route.as_deref() {
                        if r.span_id == r.local_root_span_id {
                            costs.requests.push((strings.intern(route), r.span_id));
                        }
                    }
                }
                costs.requests.sort_unstable();
                costs.requests.dedup();
            }
        }
        // Every span name of the span table, with its spans, sorted by name.
        let mut named: FxHashMap<&str, Vec<NamedSpan>> = FxHashMap::default();
        for r in index.values() {
            let (samples, own_samples) = owned.get(&r.span_id).copied().unwrap_or_default();
            named.entry(&r.name).or_default().push(NamedSpan {
                span_id: r.span_id,
                start_unix_ns: r.start_unix_ns,
                end_unix_ns: r.end_unix_ns,
                samples,
                own_samples,
            });
        }
        let mut span_names: Vec<(&str, Vec<NamedSpan>)> = named.into_iter().collect();
        span_names.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let span_names = span_names
            .into_iter()
            .map(|(name, mut spans)| {
                spans.sort_unstable_by_key(|s| s.span_id);
                let (all, own) = by_name.remove(name).unwrap_or_default();
                SpanNameSummary {
                    name: strings.intern(name),
                    spans,
                    with_descendants: all.finish(),
                    own: own.finish(),
                }
            })
            .collect();
        WindowSummary {
            service: p.resource.service.clone(),
            version: p.resource.version.clone(),
            deployment: Some(Deployment {
                environment: p.resource.environment.clone(),
                instance: p.resource.instance.clone(),
            }),
            start_unix_ns: p.start_unix_ns,
            duration_ns: p.duration_ns,
            wall_samples: p.total_wall_samples(),
            cpu_samples: p.total_cpu_samples(),
            strings: strings.table,
            routes,
            all_routes: Some(all.finish(0)),
            period_ns: p.period_ns,
            unsampled_spans: p.stats.unsampled_spans,
            costs: Some(costs),
            span_names: Some(span_names),
            scope: SummaryScope::Whole,
        }
    }

    /// The window's service, version, environment, instance and time range, as filters see
    /// them (a summary without its [`deployment`](WindowSummary::deployment) shows neither
    /// environment nor instance: ask [`WindowSummary::can_answer`] first).
    pub fn info(&self) -> WindowInfo<'_> {
        let deployment = self.deployment.as_ref();
        WindowInfo {
            service: &self.service,
            version: self.version.as_deref(),
            environment: deployment.and_then(|d| d.environment.as_deref()),
            instance: deployment.and_then(|d| d.instance.as_deref()),
            start_unix_ns: self.start_unix_ns,
            duration_ns: self.duration_ns,
        }
    }

    /// Whether summaries can answer `filter`: it names no span id and no trace, and no
    /// route if it names spans by name (a summary keeps a span name's samples for all
    /// routes together).
    pub fn answers(filter: &Filter) -> bool {
        filter.span_id.is_none()
            && filter.trace_id.is_none()
            && (filter.span_name.is_none() || filter.route.is_none())
    }

    /// Whether this summary can answer `filter`: summaries [`answer`](WindowSummary::answers)
    /// it, and it names no environment or instance unless this summary records them (an
    /// older summary does not; its window is then decoded).
    pub fn can_answer(&self, filter: &Filter) -> bool {
        Self::answers(filter)
            && (self.deployment.is_some()
                || (filter.environment.is_none() && filter.instance.is_none()))
    }

    /// The string at `index`, or `""` if there is none.
    pub fn string(&self, index: u32) -> &str {
        self.strings.get(index as usize).map_or("", String::as_str)
    }

    /// The route entries that hold `filter`'s samples (`by_route`: one entry per route, for
    /// questions by route), or `None` if this summary cannot answer it. No entry for a window
    /// the filter leaves out.
    fn selected<'a>(
        &'a self,
        filter: &'a Filter,
        by_route: bool,
    ) -> Option<impl Iterator<Item = &'a RouteSummary> + 'a> {
        // Span names are answered by `span_name_report` and `span_name_tally` alone.
        if !self.can_answer(filter) || filter.span_name.is_some() {
            return None;
        }
        let every_route = self.scope.has_every_route();
        let entries: &[RouteSummary] = match (&filter.route, &self.scope, &self.all_routes) {
            (Some(_), _, _) if every_route => &self.routes,
            (Some(want), SummaryScope::Route(read), _) if want == read => &self.routes,
            (Some(_), _, _) => return None,
            (None, _, Some(all)) if !by_route => std::slice::from_ref(all),
            (None, _, _) if every_route => &self.routes,
            (None, _, _) => return None,
        };
        let window = filter.matches(&self.info());
        Some(entries.iter().filter(move |r| {
            window
                && filter
                    .route
                    .as_deref()
                    .is_none_or(|want| self.string(r.route) == want)
        }))
    }

    /// [`crate::store::query::report`] of this window, or `None` for a filter with a span or a trace
    /// (or one that the summary's [`SummaryScope`] does not cover).
    pub fn report(&self, filter: &Filter) -> Option<Report> {
        let mut r = Report::default();
        let mut costs: FrameCosts<(&str, &str)> = FrameCosts::default();
        for route in self.selected(filter, false)? {
            r.samples += route.wall_samples;
            r.cpu_samples += route.cpu_samples;
            for f in &route.frames {
                let key = (self.string(f.function), self.string(f.file));
                costs.add(key, f.self_wall, f.total_wall);
            }
        }
        if filter.matches(&self.info()) {
            r.add_window(self.wall_samples, self.cpu_samples);
        }
        r.frames = costs.into_frames();
        Some(r)
    }

    /// [`crate::store::diff::cpu_by_frame`] of this window, or `None` for a filter with a span or a trace.
    pub fn cpu_by_frame(&self, filter: &Filter) -> Option<Tally> {
        self.tally(filter, false, |t, route| {
            for &(f, n) in &route.function_cpu {
                add_positive(t, self.string(f), n);
            }
        })
    }

    /// [`crate::store::query::frame_cpu_by_route`] of this window, or `None` for a filter with a span or a
    /// trace. The CPU by function is kept by function name alone, so a `name` that matches
    /// the function in one file while the window has the same function in another file
    /// (`module:function` for one of two `run`s) declines: the window is decoded instead.
    pub fn frame_cpu_by_route(&self, filter: &Filter, name: &str) -> Option<Tally> {
        let matches =
            |f: &FrameSummary| frames::matches(name, self.string(f.function), self.string(f.file));
        let frames = || {
            self.selected(filter, true)
                .into_iter()
                .flatten()
                .flat_map(|r| &r.frames)
        };
        // The function the name matches (one name, whatever the file).
        let mut function: Option<&str> = None;
        for f in frames().filter(|f| matches(f)) {
            let func = self.string(f.function);
            if function.is_some_and(|g| g != func) {
                return None;
            }
            function = Some(func);
        }
        if let Some(func) = function {
            if frames().any(|f| self.string(f.function) == func && !matches(f)) {
                return None;
            }
        }
        self.tally(filter, true, |t, route| {
            for &(f, n) in &route.function_cpu {
                if Some(self.string(f)) == function {
                    add_positive(t, self.string(route.route), n);
                }
            }
        })
    }

    /// [`crate::store::query::cpu_by_root_frame`] of this window, or `None` for a filter with a span or a
    /// trace.
    pub fn cpu_by_root_frame(&self, filter: &Filter) -> Option<Tally> {
        self.tally(filter, false, |t, route| {
            for &(f, n) in &route.root_cpu {
                add_positive(t, self.string(f), n);
            }
        })
    }

    /// [`crate::store::diff::self_cpu_by_frame`] of this window: self CPU by leaf frame, or
    /// `None` when the summary cannot answer (a span or trace filter, or a summary of format
    /// 1, which has no self CPU).
    pub fn self_cpu_by_frame(&self, filter: &Filter) -> Option<FrameTally> {
        self.costs.as_ref()?;
        let mut t = FrameTally::default();
        for route in self.selected(filter, false)? {
            t.total += route.cpu_samples;
            for l in &route.self_cpu {
                let key = FrameId::new(self.string(l.function), self.string(l.file));
                *t.counts.entry(key).or_default() += l.cpu_samples;
            }
        }
        Some(t)
    }

    /// The routes of [`WindowSummary::costs`] that `filter` selects, with their requests
    /// ([`crate::store::query::window_requests`] of the window), or `None` if the summary
    /// cannot answer it. Nothing for a window the filter leaves out.
    fn selected_costs<'a>(
        &'a self,
        filter: &'a Filter,
    ) -> Option<(
        impl Iterator<Item = &'a RouteCosts> + 'a,
        FxHashMap<&'a str, Requests>,
    )> {
        let costs = self.costs.as_ref()?;
        if !self.can_answer(filter) || filter.span_name.is_some() {
            return None;
        }
        let window = filter.matches(&self.info());
        let wanted = move |route: u32| {
            window
                && filter
                    .route
                    .as_deref()
                    .is_none_or(|want| self.string(route) == want)
        };
        let mut requests: FxHashMap<&str, Requests> = FxHashMap::default();
        match &costs.counted {
            Some(counted) => {
                for &(route, n) in counted.iter().filter(|(r, _)| wanted(*r)) {
                    requests.entry(self.string(route)).or_default().counted += n;
                }
            }
            None => {
                for &(route, id) in costs.requests.iter().filter(|(r, _)| wanted(*r)) {
                    let e = requests.entry(self.string(route)).or_default();
                    e.seen.insert(id);
                    e.sampled_only = true;
                }
                // A route with CPU here and no sampled request still counts only sampled ones.
                let on_cpu = |r: &&RouteCosts| r.cpu_samples > 0 || r.cpu_ns > 0;
                for r in costs.routes.iter().filter(|r| wanted(r.route) && on_cpu(r)) {
                    requests
                        .entry(self.string(r.route))
                        .or_default()
                        .sampled_only = true;
                }
            }
        }
        Some((
            costs.routes.iter().filter(move |r| wanted(r.route)),
            requests,
        ))
    }

    /// [`crate::store::diff::route_cpu`] of this window, or `None` when the summary cannot
    /// answer (as [`WindowSummary::self_cpu_by_frame`]).
    pub fn route_cpu(&self, filter: &Filter) -> Option<RouteCpu> {
        let (routes, requests) = self.selected_costs(filter)?;
        let mut t = RouteCpu::default();
        for r in routes.filter(|r| r.cpu_ns > 0) {
            *t.cpu_ns.entry(self.string(r.route).to_owned()).or_default() += r.cpu_ns;
        }
        for (route, n) in requests {
            t.requests.entry(route.to_owned()).or_default().merge(n);
        }
        Some(t)
    }

    /// [`crate::store::query::cost_attribution`] of this window, or `None` when the summary
    /// cannot answer (as [`WindowSummary::self_cpu_by_frame`]).
    pub fn cost_attribution(&self, filter: &Filter) -> Option<CostAttribution> {
        let mut a = CostAttribution::default();
        for route in self.selected(filter, false)? {
            let mut leaves = 0;
            for l in &route.self_cpu {
                let key = (
                    self.string(l.function).to_owned(),
                    self.string(l.file).to_owned(),
                );
                *a.self_cpu.entry(key).or_default() += l.cpu_samples;
                leaves += l.cpu_samples;
            }
            // CPU samples of stacks without a frame: the attribution counts them under no
            // function in no file.
            if route.cpu_samples > leaves {
                *a.self_cpu.entry(Default::default()).or_default() += route.cpu_samples - leaves;
            }
        }
        let (routes, requests) = self.selected_costs(filter)?;
        for r in routes.filter(|r| r.cpu_samples > 0 || r.cpu_ns > 0) {
            a.cpu_samples += r.cpu_samples;
            a.cpu_ns += r.cpu_ns;
            let e = a.routes.entry(self.string(r.route).to_owned()).or_default();
            e.cpu_samples += r.cpu_samples;
            e.cpu_ns += r.cpu_ns;
            e.requests_unknown |= r.requests_unknown;
        }
        for (route, n) in requests {
            a.routes
                .entry(route.to_owned())
                .or_default()
                .requests
                .merge(n);
        }
        Some(a)
    }

    /// The entry of `filter`'s span name (`Some(None)`: the window has no span of it), or
    /// `None` if this summary cannot answer `filter` by span name.
    fn span_name_entry(&self, filter: &Filter) -> Option<Option<&SpanNameSummary>> {
        let name = filter.span_name.as_deref()?;
        if !self.can_answer(filter) || filter.route.is_some() {
            return None;
        }
        match &self.scope {
            SummaryScope::Whole => {}
            SummaryScope::SpanName(read) if read == name => {}
            _ => return None,
        }
        let names = self.span_names.as_ref()?;
        Some(names.iter().find(|n| self.string(n.name) == name))
    }

    /// [`crate::store::query::report`] of this window for a filter by span name (and by
    /// service, version, environment, instance or time, but not by route), or `None` when
    /// the summary cannot answer it. Like [`WindowSummary::report`], it has no entry path.
    pub fn span_name_report(&self, filter: &Filter) -> Option<Report> {
        let entry = self.span_name_entry(filter)?;
        let mut r = Report::default();
        if !filter.matches(&self.info()) {
            return Some(r);
        }
        r.add_window(self.wall_samples, self.cpu_samples);
        if let Some(e) = entry {
            let sel = match filter.with_children {
                true => &e.with_descendants,
                false => &e.own,
            };
            r.samples = sel.wall_samples;
            r.cpu_samples = sel.cpu_samples;
            let mut costs: FrameCosts<(&str, &str)> = FrameCosts::default();
            for f in &sel.frames {
                let key = (self.string(f.function), self.string(f.file));
                costs.add(key, f.self_wall, f.total_wall);
            }
            r.frames = costs.into_frames();
        }
        Some(r)
    }

    /// What [`SpanNameTally::add`] adds for this window, or `None` when the summary cannot
    /// answer `filter` (as [`WindowSummary::span_name_report`]).
    pub fn span_name_tally(&self, filter: &Filter) -> Option<SpanNameTally> {
        let entry = self.span_name_entry(filter)?;
        let mut t = SpanNameTally::default();
        if !filter.matches(&self.info()) {
            return Some(t);
        }
        let with_children = filter.with_children;
        let samples = entry.map_or(0, |e| match with_children {
            true => e.with_descendants.wall_samples,
            false => e.own.wall_samples,
        });
        let spans = entry.into_iter().flat_map(|e| &e.spans).map(|s| {
            let n = if with_children {
                s.samples
            } else {
                s.own_samples
            };
            (s.span_id, s.start_unix_ns, s.end_unix_ns, n)
        });
        t.add_window(self.unsampled_spans, samples, self.period_ns, spans);
        Some(t)
    }

    /// A tally over the selected routes: their CPU samples as the total, keys from `add`.
    fn tally(
        &self,
        filter: &Filter,
        by_route: bool,
        mut add: impl FnMut(&mut Tally, &RouteSummary),
    ) -> Option<Tally> {
        let mut t = Tally::default();
        for route in self.selected(filter, by_route)? {
            t.total += route.cpu_samples;
            add(&mut t, route);
        }
        Some(t)
    }
}

/// The queries only count keys of samples on CPU, so a tally never holds a zero.
fn add_positive(t: &mut Tally, key: &str, n: u64) {
    if n > 0 {
        t.add(key, n);
    }
}

fn sorted(m: FxHashMap<u32, u64>) -> Vec<(u32, u64)> {
    let mut v: Vec<(u32, u64)> = m.into_iter().collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_indices_read_as_empty() {
        let s = WindowSummary {
            strings: vec!["a".into()],
            routes: vec![RouteSummary {
                route: 7,
                wall_samples: 2,
                cpu_samples: 1,
                frames: vec![FrameSummary {
                    function: 9,
                    file: 0,
                    self_wall: 2,
                    total_wall: 2,
                }],
                function_cpu: vec![(9, 1)],
                root_cpu: vec![(u32::MAX, 1)],
                self_cpu: Vec::new(),
            }],
            ..WindowSummary::default()
        };
        let f = Filter::default();
        let r = s.report(&f).unwrap();
        assert_eq!(
            (r.frames[0].function.as_str(), r.frames[0].file.as_str()),
            ("", "a")
        );
        assert_eq!(s.cpu_by_root_frame(&f).unwrap().counts[""], 1);
        assert_eq!(s.frame_cpu_by_route(&f, "").unwrap().counts[""], 1);
    }
}
