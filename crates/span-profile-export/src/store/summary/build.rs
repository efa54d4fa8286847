//! Building a [`WindowSummary`] from a window: every count once, with the queries' counting
//! rules.

use rustc_hash::{FxHashMap, FxHashSet};

use span_profile_core::{Profile, SpanId, SpanRecord};

use super::{
    Deployment, FrameSummary, LeafCpu, NamedSpan, RouteCosts, RouteSummary, SelectionSummary,
    SpanNameSummary, SummaryScope, WindowCosts, WindowSummary,
};
use crate::store::query::{distinct, spans_dropped, FrameCosts};
use crate::store::span_name::named_ancestors;

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

/// Summarizes one window: [`WindowSummary::from_profile`].
pub(super) fn summarize(p: &Profile) -> WindowSummary {
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

fn sorted(m: FxHashMap<u32, u64>) -> Vec<(u32, u64)> {
    let mut v: Vec<(u32, u64)> = m.into_iter().collect();
    v.sort_unstable();
    v
}
