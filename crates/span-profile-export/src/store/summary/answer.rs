//! What a [`WindowSummary`] answers, each as the query of the same name answers from the
//! window, or `None` when the summary cannot.

use rustc_hash::FxHashMap;

use super::{FrameSummary, RouteCosts, RouteSummary, SpanNameSummary, SummaryScope, WindowSummary};
use crate::store::diff::{FrameTally, RouteCpu};
use crate::store::frames::{self, FrameId};
use crate::store::query::{CostAttribution, Filter, FrameCosts, Report, Requests, Tally};
use crate::store::span_name::SpanNameTally;

impl WindowSummary {
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
