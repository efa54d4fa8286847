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

use span_profile_core::{Profile, SpanId, WindowInfo};

use crate::store::query::Filter;

mod answer;
mod build;

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
    /// CPU samples by leaf frame (self CPU), as [`leaf_frame`](crate::store::frames::leaf_frame) finds
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

impl WindowSummary {
    /// Summarizes one window.
    pub fn from_profile(p: &Profile) -> Self {
        build::summarize(p)
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
