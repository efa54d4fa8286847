//! Share tallies (CPU by entry frame, folded stacks, a frame's CPU by route) and the routes
//! behind a frame.

use std::collections::HashMap;

use serde::Serialize;

use span_profile_core::Profile;

use super::report::{FrameCost, Report};
use super::{for_each_sample, ratio, Filter};
use crate::store::frames::display_name;

/// Sample counts by key (a frame, a route, a folded stack) and the selection's total: the
/// mergeable form of the share questions below. Tallies of disjoint windows made with the
/// same filter [`merge`](Tally::merge) into the tally of all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Samples of the whole selection.
    pub total: u64,
    /// Samples by key.
    pub counts: HashMap<String, u64>,
}

impl Tally {
    /// Adds another tally.
    pub fn merge(&mut self, other: Tally) {
        self.total += other.total;
        if self.counts.is_empty() {
            self.counts = other.counts;
            return;
        }
        for (k, n) in other.counts {
            *self.counts.entry(k).or_default() += n;
        }
    }

    /// `key`'s share of the total (0 when the total is 0).
    pub fn share(&self, key: &str) -> f64 {
        ratio(self.counts.get(key).copied().unwrap_or(0), self.total)
    }

    /// Keys by count, largest first, ties by key.
    pub fn sorted(&self) -> Vec<(&str, u64)> {
        let mut v: Vec<(&str, u64)> = self.counts.iter().map(|(k, &n)| (k.as_str(), n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v
    }

    pub(crate) fn add(&mut self, key: &str, n: u64) {
        match self.counts.get_mut(key) {
            Some(c) => *c += n,
            None => {
                self.counts.insert(key.to_string(), n);
            }
        }
    }
}

/// CPU samples by outermost (top-level) frame of each stack: where a service's CPU goes, by
/// entry point. Stacks with no frames count under `""`.
pub fn cpu_by_root_frame(profiles: &[Profile], filter: &Filter) -> Tally {
    let mut t = Tally::default();
    for_each_sample(profiles, filter, |p, s| {
        if s.cpu_samples == 0 {
            return;
        }
        t.total += s.cpu_samples;
        let root = p.stack_frames(s.stack).last();
        t.add(root.map_or("", |f| f.function.as_str()), s.cpu_samples);
    });
    t
}

/// Wall samples by folded stack, `root;caller;leaf` (frames named `module:function` as
/// [`display_name`] names them, `;` in a name replaced by `:`), the input of a flame graph.
pub fn folded_stacks(profiles: &[Profile], filter: &Filter) -> Tally {
    let mut t = Tally::default();
    let mut line = String::new();
    // The display names of the current window's frames, made once per window.
    let mut shown: Vec<String> = Vec::new();
    let mut current: *const Profile = std::ptr::null();
    for_each_sample(profiles, filter, |p, s| {
        if s.wall_samples == 0 {
            return;
        }
        t.total += s.wall_samples;
        if !std::ptr::eq(current, p) {
            current = p;
            shown = p
                .frames
                .iter()
                .map(|f| display_name(&f.function, &f.file))
                .collect();
        }
        let stack = p
            .stacks
            .get(s.stack as usize)
            .map_or(&[][..], |st| st.frames.as_slice());
        line.clear();
        // Root first; an out-of-range frame index is skipped, as `Profile::stack_frames` does.
        for (i, n) in stack
            .iter()
            .rev()
            .filter_map(|&f| shown.get(f as usize))
            .enumerate()
        {
            if i > 0 {
                line.push(';');
            }
            line.extend(n.chars().map(|c| if c == ';' { ':' } else { c }));
        }
        t.add(&line, s.wall_samples);
    });
    t
}

/// One route's share of a frame's cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteShare {
    /// The route label.
    pub route: String,
    /// CPU samples of the frame under this route.
    pub cpu_samples: u64,
    /// Share of the frame's CPU samples (0..=1).
    pub share_of_frame: f64,
    /// Share of all CPU samples of the selection (0..=1).
    pub share_of_total: f64,
}

/// CPU samples of the frame `name` names (anywhere on the stack) by route, with the CPU
/// samples of the whole selection as the total: the mergeable form of [`routes_for_frame`].
/// `name` is `function` or `module:function` (see [`frames::matches`](crate::store::frames::matches)); a bare
/// function name matches it in every file, so resolve it to one frame first when several
/// files define it ([`frames_named`]).
pub fn frame_cpu_by_route(profiles: &[Profile], filter: &Filter, name: &str) -> Tally {
    let mut t = Tally::default();
    for_each_sample(profiles, filter, |p, s| {
        t.total += s.cpu_samples;
        if s.cpu_samples > 0
            && p.stack_frames(s.stack)
                .any(|f| crate::store::frames::matches(name, &f.function, &f.file))
        {
            t.add(&s.route, s.cpu_samples);
        }
    });
    t
}

/// The distinct frames of a report that `name` names, costliest first: more than one when
/// a bare function name is defined in several files.
pub fn frames_named<'a>(r: &'a Report, name: &str) -> Vec<&'a FrameCost> {
    r.frames
        .iter()
        .filter(|f| crate::store::frames::matches(name, &f.function, &f.file))
        .collect()
}

/// The reverse query: which routes produce the CPU samples of the frame `name` names
/// ([`frame_cpu_by_route`]). Returns the frame's share of all CPU samples and the per-route
/// breakdown, largest first.
pub fn routes_for_frame(
    profiles: &[Profile],
    filter: &Filter,
    name: &str,
) -> (f64, Vec<RouteShare>) {
    route_shares(&frame_cpu_by_route(profiles, filter, name))
}

/// [`routes_for_frame`]'s answer from a [`frame_cpu_by_route`] tally.
pub fn route_shares(t: &Tally) -> (f64, Vec<RouteShare>) {
    let frame_total: u64 = t.counts.values().sum();
    let out = t
        .sorted()
        .into_iter()
        .map(|(route, n)| RouteShare {
            route: route.to_string(),
            cpu_samples: n,
            share_of_frame: ratio(n, frame_total),
            share_of_total: ratio(n, t.total),
        })
        .collect();
    (ratio(frame_total, t.total), out)
}
