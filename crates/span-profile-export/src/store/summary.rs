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

use span_profile_core::{Profile, WindowInfo};

use crate::store::frames;
use crate::store::query::{distinct, Filter, FrameCosts, Report, Tally};

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
    /// Every route, and the total of all routes if the summary has one.
    #[default]
    Whole,
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
        match &filter.route {
            Some(r) => SummaryScope::Route(r.clone()),
            None if by_route => SummaryScope::Whole,
            None => SummaryScope::AllRoutes,
        }
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
    frames: FrameCosts<(u32, u32)>,
    function_cpu: FxHashMap<u32, u64>,
    root_cpu: FxHashMap<u32, u64>,
}

impl RouteCounts {
    /// Adds another route's counts (for the total of all routes).
    fn add(&mut self, other: &RouteCounts) {
        self.wall += other.wall;
        self.cpu += other.cpu;
        for (key, self_wall, total_wall) in other.frames.iter() {
            self.frames.add(key, self_wall, total_wall);
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
        let mut frames: Vec<FrameSummary> = self
            .frames
            .iter()
            .map(|((function, file), self_wall, total_wall)| FrameSummary {
                function,
                file,
                self_wall,
                total_wall,
            })
            .collect();
        frames.sort_unstable_by_key(|f| (f.function, f.file));
        RouteSummary {
            route,
            wall_samples: self.wall,
            cpu_samples: self.cpu,
            frames,
            function_cpu: sorted(self.function_cpu),
            root_cpu: sorted(self.root_cpu),
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
        let mut routes: FxHashMap<&str, RouteCounts> = FxHashMap::default();
        let mut seen = FxHashSet::default();
        for s in &p.samples {
            let r = routes.entry(&s.route).or_default();
            r.wall += s.wall_samples;
            r.cpu += s.cpu_samples;
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
            if s.cpu_samples == 0 {
                continue;
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
        let routes: Vec<RouteSummary> = names
            .into_iter()
            .map(|name| {
                let c = routes.remove(name).unwrap_or_default();
                all.add(&c);
                c.finish(strings.intern(name))
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

    /// Whether summaries can answer `filter`: it names no span (by id or by name) and no
    /// trace.
    pub fn answers(filter: &Filter) -> bool {
        filter.span_id.is_none() && filter.span_name.is_none() && filter.trace_id.is_none()
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
        if !self.can_answer(filter) {
            return None;
        }
        let entries: &[RouteSummary] = match (&filter.route, &self.scope, &self.all_routes) {
            (Some(_), SummaryScope::Whole, _) => &self.routes,
            (Some(want), SummaryScope::Route(read), _) if want == read => &self.routes,
            (Some(_), _, _) => return None,
            (None, _, Some(all)) if !by_route => std::slice::from_ref(all),
            (None, SummaryScope::Whole, _) => &self.routes,
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
