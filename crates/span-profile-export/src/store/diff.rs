//! Deploy-to-deploy diffs: each function's inclusive share of CPU in two selections, and the
//! functions whose share grew.

use rustc_hash::FxHashSet;
use serde::Serialize;
use span_profile_core::Profile;

use crate::store::query::{distinct, for_each_sample, Filter, Tally};

/// A frame whose share of CPU changed between two selections.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrameChange {
    /// Function name.
    pub function: String,
    /// Share of all CPU samples (inclusive) in the old selection.
    pub old_share: f64,
    /// Share in the new selection.
    pub new_share: f64,
}

impl FrameChange {
    /// `new_share - old_share`.
    pub fn growth(&self) -> f64 {
        self.new_share - self.old_share
    }
}

/// CPU samples by function, inclusive (counted once per sample wherever it is on the stack),
/// with the selection's CPU samples as the total: the mergeable input of [`diff_tallies`].
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

/// Frames whose inclusive share of CPU grew by more than `threshold` (e.g. 0.02 = two points)
/// from `old` to `new`, largest growth first.
pub fn diff(profiles: &[Profile], old: &Filter, new: &Filter, threshold: f64) -> Vec<FrameChange> {
    diff_tallies(
        &cpu_by_frame(profiles, old),
        &cpu_by_frame(profiles, new),
        threshold,
    )
}

/// [`diff`] from two [`cpu_by_frame`] tallies.
pub fn diff_tallies(old: &Tally, new: &Tally, threshold: f64) -> Vec<FrameChange> {
    let mut out: Vec<FrameChange> = new
        .counts
        .keys()
        .map(|f| FrameChange {
            function: f.clone(),
            old_share: old.share(f),
            new_share: new.share(f),
        })
        .filter(|c| c.growth() > threshold)
        .collect();
    out.sort_by(|x, y| {
        y.growth()
            .total_cmp(&x.growth())
            .then(x.function.cmp(&y.function))
    });
    out
}
