//! Deploy-to-deploy diffs (ADR 0023): each frame's self share of CPU (every CPU sample counted
//! once, at its leaf frame), window by window on each side; a frame is a regression when its
//! share grew by more than a threshold and Welch's t-test over the windows, Holm-corrected
//! across frames, says the growth is not noise. Improvements are the same test the other way.
//! Also CPU per request by route, from the local-root spans of each side.
//!
//! ```
//! use span_profile_export::store::diff::{compare, self_cpu_by_frame, DiffOptions};
//! use span_profile_export::store::query::Filter;
//! # let (old, new): (Vec<span_profile_core::Profile>, Vec<span_profile_core::Profile>) = (vec![], vec![]);
//! // One tally per window: the window is the unit of the test.
//! let f = Filter::default();
//! let old: Vec<_> = old.iter().map(|p| self_cpu_by_frame(std::slice::from_ref(p), &f)).collect();
//! let new: Vec<_> = new.iter().map(|p| self_cpu_by_frame(std::slice::from_ref(p), &f)).collect();
//! match compare(&old, &new, &DiffOptions::default()) {
//!     Ok(c) => println!("{} regression(s)", c.regressions.len()),
//!     Err(e) => println!("{e}"),
//! }
//! ```

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use span_profile_core::Profile;

use rustc_hash::FxHashSet;

use crate::store::frames::{leaf_frame, FrameId};
use crate::store::query::{distinct, for_each_sample, window_requests, Filter, Requests, Tally};
use crate::store::stats::{holm, welch_p, WindowedShare};

/// CPU samples by leaf frame (self time) in a selection, with the selection's CPU samples as
/// the total. Tallies of disjoint windows [`merge`](FrameTally::merge).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameTally {
    /// CPU samples of the whole selection (an empty stack counts here, under no frame).
    pub total: u64,
    /// CPU samples by leaf frame.
    pub counts: HashMap<FrameId, u64>,
}

impl FrameTally {
    /// Adds another tally.
    pub fn merge(&mut self, other: FrameTally) {
        self.total += other.total;
        for (k, n) in other.counts {
            *self.counts.entry(k).or_default() += n;
        }
    }
}

/// Self CPU samples by frame of the selected samples (see [`FrameTally`]).
pub fn self_cpu_by_frame(profiles: &[Profile], filter: &Filter) -> FrameTally {
    let mut t = FrameTally::default();
    let mut local: HashMap<(&str, &str), u64> = HashMap::new();
    for_each_sample(profiles, filter, |p, s| {
        if s.cpu_samples == 0 {
            return;
        }
        t.total += s.cpu_samples;
        if let Some(k) = leaf_frame(p, s.stack) {
            *local.entry(k).or_default() += s.cpu_samples;
        }
    });
    // Counted by borrowed names first: most samples hit a frame already counted.
    t.counts = local
        .into_iter()
        .map(|((function, file), n)| {
            let key = FrameId {
                function: function.to_owned(),
                file: file.to_owned(),
            };
            (key, n)
        })
        .collect();
    t
}

/// CPU samples by function, inclusive (counted once per sample wherever it is on the stack),
/// with the selection's CPU samples as the total. This is not what [`compare`] tests (one
/// cost would count at every caller); it is the inclusive view that window summaries answer
/// ([`WindowSummary::cpu_by_frame`](crate::store::summary::WindowSummary::cpu_by_frame)).
pub fn cpu_by_frame(profiles: &[Profile], filter: &Filter) -> Tally {
    let mut t = Tally::default();
    let mut seen = FxHashSet::default();
    for_each_sample(profiles, filter, |p, s| {
        t.total += s.cpu_samples;
        if s.cpu_samples == 0 {
            return;
        }
        let functions = p.stack_frames(s.stack).map(|f| f.function.as_str());
        distinct(&mut seen, functions, |f| t.add(f, s.cpu_samples));
    });
    t
}

/// What counts as a change.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct DiffOptions {
    /// Growth of a frame's self share of CPU that matters (0.02 = two points).
    pub threshold: f64,
    /// Family-wise significance level across all frames compared (Holm).
    pub alpha: f64,
}

impl Default for DiffOptions {
    fn default() -> Self {
        Self {
            threshold: 0.02,
            alpha: 0.01,
        }
    }
}

impl DiffOptions {
    /// With this threshold.
    pub fn with_threshold(mut self, threshold: f64) -> Self {
        self.threshold = threshold;
        self
    }
    /// With this significance level.
    pub fn with_alpha(mut self, alpha: f64) -> Self {
        self.alpha = alpha;
        self
    }
}

/// A frame whose self share of CPU changed between two selections.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrameChange {
    /// The frame.
    #[serde(flatten)]
    pub frame: FrameId,
    /// Self CPU samples in the old selection.
    pub old_samples: u64,
    /// Self CPU samples in the new selection.
    pub new_samples: u64,
    /// Self share of CPU in the old selection.
    pub old_share: f64,
    /// Self share of CPU in the new selection.
    pub new_share: f64,
    /// Holm-adjusted two-sided p-value of Welch's t-test over windows (ADR 0023).
    pub p_value: f64,
}

impl FrameChange {
    /// `new_share - old_share`.
    pub fn growth(&self) -> f64 {
        self.new_share - self.old_share
    }
}

/// The answer of [`compare`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Comparison {
    /// Frames that grew by more than the threshold, significantly; largest growth first.
    pub regressions: Vec<FrameChange>,
    /// Frames that shrank by more than the threshold, significantly; largest drop first.
    pub improvements: Vec<FrameChange>,
    /// Frames compared (the size of the family Holm corrects for).
    pub frames_tested: usize,
    /// Windows with CPU samples on the old side.
    pub old_windows: usize,
    /// Windows with CPU samples on the new side.
    pub new_windows: usize,
}

/// Why two selections cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    /// A side has fewer than two windows with CPU samples: the spread between windows, which
    /// the test needs, cannot be estimated.
    #[error("the {side} side has {windows} window(s) with CPU samples; the test needs at least 2 per side: compare longer deploys, or record with shorter windows (SPAN_PROFILE_WINDOW_S)")]
    TooFewWindows {
        /// `old` or `new`.
        side: &'static str,
        /// Windows with CPU samples.
        windows: usize,
    },
}

/// Compares the self share of every frame between two sides, each given as one tally per
/// window (ADR 0023).
pub fn compare(
    old: &[FrameTally],
    new: &[FrameTally],
    opts: &DiffOptions,
) -> Result<Comparison, CompareError> {
    let old: Vec<&FrameTally> = old.iter().filter(|t| t.total > 0).collect();
    let new: Vec<&FrameTally> = new.iter().filter(|t| t.total > 0).collect();
    for (side, w) in [("old", &old), ("new", &new)] {
        if w.len() < 2 {
            return Err(CompareError::TooFewWindows {
                side,
                windows: w.len(),
            });
        }
    }
    let mut frames: Vec<&FrameId> = old
        .iter()
        .chain(&new)
        .flat_map(|t| t.counts.keys())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    frames.sort_unstable();
    let share = |side: &[&FrameTally], f: &FrameId| {
        WindowedShare::new(
            side.iter()
                .map(|t| (t.counts.get(f).copied().unwrap_or(0), t.total)),
        )
    };
    let samples = |side: &[&FrameTally], f: &FrameId| -> u64 {
        side.iter().filter_map(|t| t.counts.get(f)).sum()
    };
    let mut changes = Vec::with_capacity(frames.len());
    let mut raw = Vec::with_capacity(frames.len());
    for f in &frames {
        let (a, b) = (share(&old, f), share(&new, f));
        raw.push(welch_p(&a, &b).unwrap_or(1.0));
        changes.push(FrameChange {
            frame: (*f).clone(),
            old_samples: samples(&old, f),
            new_samples: samples(&new, f),
            old_share: a.share,
            new_share: b.share,
            p_value: 1.0,
        });
    }
    let mut out = Comparison {
        frames_tested: frames.len(),
        old_windows: old.len(),
        new_windows: new.len(),
        ..Comparison::default()
    };
    for (mut c, p) in changes.into_iter().zip(holm(&raw)) {
        c.p_value = p;
        if p >= opts.alpha {
            continue;
        }
        if c.growth() > opts.threshold {
            out.regressions.push(c);
        } else if -c.growth() > opts.threshold {
            out.improvements.push(c);
        }
    }
    out.regressions.sort_by(|x, y| {
        y.growth()
            .total_cmp(&x.growth())
            .then(x.frame.cmp(&y.frame))
    });
    out.improvements.sort_by(|x, y| {
        x.growth()
            .total_cmp(&y.growth())
            .then(x.frame.cmp(&y.frame))
    });
    Ok(out)
}

/// CPU time by route and the requests behind it: the mergeable input of CPU per request.
/// Requests are counted as [`Requests`] says: every request that ended, in windows that count
/// them (ADR 0032); in older windows, the sampled ones only, and then CPU per request is
/// overstated for routes whose requests are shorter than the sampling period.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteCpu {
    /// CPU nanoseconds by route label.
    pub cpu_ns: HashMap<String, u64>,
    /// Requests by route.
    pub requests: HashMap<String, Requests>,
}

impl RouteCpu {
    /// Adds another tally.
    pub fn merge(&mut self, other: RouteCpu) {
        for (r, n) in other.cpu_ns {
            *self.cpu_ns.entry(r).or_default() += n;
        }
        for (r, n) in other.requests {
            self.requests.entry(r).or_default().merge(n);
        }
    }

    /// `(route, requests, CPU ns per request)` for every route with requests, most CPU per
    /// request first.
    pub fn per_request(&self) -> Vec<(String, u64, f64)> {
        let mut v: Vec<(String, u64, f64)> = self
            .requests
            .iter()
            .filter(|(_, n)| n.count() > 0)
            .map(|(r, n)| {
                let cpu = self.cpu_ns.get(r).copied().unwrap_or(0);
                (r.clone(), n.count(), cpu as f64 / n.count() as f64)
            })
            .collect();
        v.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        v
    }
}

/// [`RouteCpu`] of the selected samples and of the local-root spans in the selected windows.
pub fn route_cpu(profiles: &[Profile], filter: &Filter) -> RouteCpu {
    let mut t = RouteCpu::default();
    for_each_sample(profiles, filter, |p, s| {
        if s.cpu_ns > 0 {
            *t.cpu_ns.entry(s.route.to_string()).or_default() += s.cpu_ns;
        }
        // As `cost_attribution` marks them: a route on CPU in a window that did not count.
        if (s.cpu_samples > 0 || s.cpu_ns > 0) && p.requests.is_none() {
            t.requests
                .entry(s.route.to_string())
                .or_default()
                .sampled_only = true;
        }
    });
    for p in profiles.iter().filter(|p| filter.matches_window(p)) {
        for (route, n) in window_requests(p, filter) {
            t.requests.entry(route.to_owned()).or_default().merge(n);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(total: u64, frames: &[(&str, u64)]) -> FrameTally {
        FrameTally {
            total,
            counts: frames
                .iter()
                .map(|&(f, n)| {
                    (
                        FrameId {
                            function: f.into(),
                            file: "app.py".into(),
                        },
                        n,
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_steady_growth_is_flagged_and_a_drop_is_an_improvement() {
        let old: Vec<_> = (0..5)
            .map(|i| tally(100, &[("a", 50 + i % 2), ("b", 10)]))
            .collect();
        let new: Vec<_> = (0..5)
            .map(|i| tally(100, &[("a", 30 + i % 2), ("b", 10), ("c", 20)]))
            .collect();
        let c = compare(&old, &new, &DiffOptions::default()).unwrap();
        assert_eq!(c.frames_tested, 3);
        let names = |v: &[FrameChange]| -> Vec<String> {
            v.iter().map(|c| c.frame.function.clone()).collect()
        };
        assert_eq!(names(&c.regressions), ["c"]);
        assert_eq!(names(&c.improvements), ["a"]);
        assert!((c.regressions[0].new_share - 0.2).abs() < 1e-12);
    }

    #[test]
    fn growth_inside_the_spread_of_windows_is_not_flagged() {
        // Share of `a` jumps between windows on both sides; the means differ by 6 points.
        let old: Vec<_> = [20, 60, 25, 55]
            .iter()
            .map(|&n| tally(100, &[("a", n)]))
            .collect();
        let new: Vec<_> = [30, 65, 28, 61]
            .iter()
            .map(|&n| tally(100, &[("a", n)]))
            .collect();
        let c = compare(&old, &new, &DiffOptions::default()).unwrap();
        assert!(c.regressions.is_empty(), "{c:?}");
    }

    #[test]
    fn one_window_cannot_be_tested() {
        let one = vec![tally(100, &[("a", 1)])];
        let two = vec![tally(100, &[("a", 1)]), tally(100, &[("a", 1)])];
        assert_eq!(
            compare(&one, &two, &DiffOptions::default()),
            Err(CompareError::TooFewWindows {
                side: "old",
                windows: 1
            })
        );
    }
}
