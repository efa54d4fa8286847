//! Reports: the samples, top frames, lines, coverage and leaf-frame partition of a selection,
//! and the frame counting rules a window summary shares.

use std::collections::HashMap;
use std::hash::Hash;

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use span_profile_core::{Profile, SpanRecord};

use super::{descendants, distinct, for_each_sample, span_index, Filter};
use crate::store::frames::{display_name, group_key, module_of, Grouping};

/// A frame's cost in a selection, by function and file (lines merged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrameCost {
    /// Function name.
    pub function: String,
    /// File.
    pub file: String,
    /// Samples where it is the leaf.
    pub self_samples: u64,
    /// Samples where it is anywhere on the stack (counted once per sample).
    pub total_samples: u64,
}

/// A line's cost in a selection: one row of a report by line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineCost {
    /// Function name.
    pub function: String,
    /// File.
    pub file: String,
    /// 1-based line; 0 when unknown.
    pub line: u32,
    /// Samples where this line is the leaf.
    pub self_samples: u64,
    /// Samples where this line is anywhere on the stack (counted once per sample).
    pub total_samples: u64,
}

/// One row of a [`Partition`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionRow {
    /// The row as a person reads it: `module:function`, `module:function (file:line)`, a
    /// module or a package.
    pub name: String,
    /// The function, when rows are frames or lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// The file, when rows are frames or lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The module ([`module_of`]), when the file gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// The line, when rows are lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Samples whose leaf frame falls in this row: the row's part of the partition.
    pub self_samples: u64,
    /// Samples with this row anywhere on the stack, when rows are frames or lines (a module
    /// or package total is not kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_samples: Option<u64>,
}

/// A selection's samples, each counted once at its leaf frame and grouped: the rows plus
/// `other_samples` add up to `samples` exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Partition {
    /// How the rows group the samples.
    pub by: Grouping,
    /// Samples of the selection.
    pub samples: u64,
    /// The largest rows, by self samples (ties by name).
    pub rows: Vec<PartitionRow>,
    /// Samples of the rows left out, and of stacks without frames.
    pub other_samples: u64,
}

/// Whether a span got the samples its duration predicts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Coverage {
    /// `duration / period`.
    pub expected_samples: f64,
    /// Samples found for the span and its children.
    pub actual_samples: u64,
    /// `actual / expected`.
    pub ratio: f64,
}

impl Coverage {
    /// Within ±20% of the prediction (sampling jitter and window edges stay inside that).
    pub fn is_ok(&self) -> bool {
        (0.8..=1.2).contains(&self.ratio)
    }
}

/// The answer to a [`report`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// The span asked for, when the filter names one that the span table knows.
    pub span: Option<SpanRecord>,
    /// Wall samples selected.
    pub samples: u64,
    /// CPU samples selected.
    pub cpu_samples: u64,
    /// Wall samples in the windows considered, selected or not.
    pub window_samples: u64,
    /// CPU samples in the windows considered.
    pub window_cpu_samples: u64,
    /// Every frame of the selection, by total samples, then self samples.
    pub frames: Vec<FrameCost>,
    /// The frames every selected sample enters through, outermost first, as (function, file):
    /// the longest common prefix of the stacks, root first (`main`, the request handler, the
    /// span's own function). A frame on every sample but reached by different paths (a hot
    /// helper called from two places) is not part of it. `None` when the report was made
    /// without stacks (from window summaries).
    pub entry_path: Option<Vec<(String, String)>>,
    /// For a span with a known duration: samples against the duration.
    pub coverage: Option<Coverage>,
    /// Windows that contributed.
    pub windows: usize,
    /// Every line of the selection, when the report was made with lines
    /// ([`report_with_lines`]); `None` otherwise (window summaries keep no lines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<LineCost>>,
}

impl Report {
    /// Counts one window that passes the filter, with its wall and CPU samples.
    pub(crate) fn add_window(&mut self, wall_samples: u64, cpu_samples: u64) {
        self.windows += 1;
        self.window_samples += wall_samples;
        self.window_cpu_samples += cpu_samples;
    }

    /// The `n` costliest frames.
    pub fn top(&self, n: usize) -> &[FrameCost] {
        &self.frames[..n.min(self.frames.len())]
    }

    /// The selection's samples counted once each, at the leaf frame, grouped `by` (frame,
    /// module, package or line), the `limit` largest rows kept and the rest in
    /// [`Partition::other_samples`]. `None` by line when the report has no lines (see
    /// [`Report::lines`]).
    ///
    /// ```
    /// use span_profile_export::store::frames::Grouping;
    /// use span_profile_export::store::query::{report, Filter};
    /// # let profiles: Vec<span_profile_core::Profile> = vec![];
    /// let r = report(&profiles, &Filter::default().route("/checkout"));
    /// let p = r.partition(Grouping::Module, 10).expect("modules need no lines");
    /// let shown: u64 = p.rows.iter().map(|row| row.self_samples).sum();
    /// assert_eq!(shown + p.other_samples, r.samples);
    /// ```
    pub fn partition(&self, by: Grouping, limit: usize) -> Option<Partition> {
        let mut rows: Vec<PartitionRow> = match by {
            Grouping::Function => self
                .frames
                .iter()
                .filter(|f| f.self_samples > 0)
                .map(|f| PartitionRow {
                    name: display_name(&f.function, &f.file),
                    function: Some(f.function.clone()),
                    file: Some(f.file.clone()),
                    module: module_of(&f.file),
                    line: None,
                    self_samples: f.self_samples,
                    total_samples: Some(f.total_samples),
                })
                .collect(),
            Grouping::Line => self
                .lines
                .as_ref()?
                .iter()
                .filter(|l| l.self_samples > 0)
                .map(|l| PartitionRow {
                    name: format!(
                        "{} ({}:{})",
                        display_name(&l.function, &l.file),
                        l.file,
                        l.line
                    ),
                    function: Some(l.function.clone()),
                    file: Some(l.file.clone()),
                    module: module_of(&l.file),
                    line: Some(l.line),
                    self_samples: l.self_samples,
                    total_samples: Some(l.total_samples),
                })
                .collect(),
            Grouping::Module | Grouping::Package => {
                let mut by_key: HashMap<String, u64> = HashMap::new();
                for f in self.frames.iter().filter(|f| f.self_samples > 0) {
                    *by_key.entry(group_key(by, &f.file)).or_default() += f.self_samples;
                }
                by_key
                    .into_iter()
                    .map(|(name, n)| PartitionRow {
                        module: (by == Grouping::Module && !name.starts_with('<'))
                            .then(|| name.clone()),
                        name,
                        function: None,
                        file: None,
                        line: None,
                        self_samples: n,
                        total_samples: None,
                    })
                    .collect()
            }
        };
        rows.sort_by(|a, b| {
            b.self_samples
                .cmp(&a.self_samples)
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.file.cmp(&b.file))
                .then_with(|| a.line.cmp(&b.line))
        });
        rows.truncate(limit);
        let shown: u64 = rows.iter().map(|r| r.self_samples).sum();
        Some(Partition {
            by,
            samples: self.samples,
            rows,
            other_samples: self.samples.saturating_sub(shown),
        })
    }

    /// Adds the report of other windows, made with the same filter: counts add up and frames
    /// are summed by function and file, then sorted again.
    ///
    /// Exact for filters without a span id: then a report over windows `a ++ b` equals the
    /// merge of the reports over `a` and over `b`, so windows can be read and reported one at
    /// a time. That holds for [`Filter::span_name`] too, as each window holds the records of
    /// its sampled spans and their ancestors (ADR 0010). A span's descendants and coverage
    /// need the whole span table: report a span over all its windows at once. Here the first
    /// report that has a span or coverage keeps it.
    ///
    /// ```
    /// use span_profile_export::store::query::{report, Filter, Report};
    /// # let (a, b): (Vec<span_profile_core::Profile>, Vec<span_profile_core::Profile>) = (vec![], vec![]);
    /// let f = Filter::default().route("/checkout");
    /// let mut r = Report::default();
    /// r.merge(report(&a, &f));
    /// r.merge(report(&b, &f));
    /// ```
    pub fn merge(&mut self, other: Report) {
        // Lines add up when both reports have them; a report without samples adds nothing.
        self.lines = match (self.lines.take(), other.lines) {
            (Some(a), Some(b)) => Some(merge_lines(a, b)),
            (a, b) if other.samples == 0 => a.or(if self.samples == 0 { b } else { None }),
            (None, b) if self.samples == 0 => b,
            _ => None,
        };
        // A report without samples says nothing about the entry path.
        self.entry_path = match (self.samples == 0, other.samples == 0) {
            (_, true) => self.entry_path.take(),
            (true, false) => other.entry_path,
            (false, false) => match (self.entry_path.take(), other.entry_path) {
                (Some(mut a), Some(b)) => {
                    let n = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
                    a.truncate(n);
                    Some(a)
                }
                _ => None,
            },
        };
        self.samples += other.samples;
        self.cpu_samples += other.cpu_samples;
        self.window_samples += other.window_samples;
        self.window_cpu_samples += other.window_cpu_samples;
        self.windows += other.windows;
        if self.span.is_none() {
            self.span = other.span;
        }
        if self.coverage.is_none() {
            self.coverage = other.coverage;
        }
        if other.frames.is_empty() {
            return;
        }
        if self.frames.is_empty() {
            self.frames = other.frames;
            return;
        }
        // Where each of `other`'s frames goes: a frame of `self`, or the next new one.
        let mut at: FxHashMap<(&str, &str), usize> = self
            .frames
            .iter()
            .enumerate()
            .map(|(i, f)| ((f.function.as_str(), f.file.as_str()), i))
            .collect();
        let mut next = self.frames.len();
        let targets: Vec<usize> = other
            .frames
            .iter()
            .map(|f| {
                *at.entry((f.function.as_str(), f.file.as_str()))
                    .or_insert_with(|| {
                        next += 1;
                        next - 1
                    })
            })
            .collect();
        drop(at);
        for (f, i) in other.frames.into_iter().zip(targets) {
            match self.frames.get_mut(i) {
                Some(e) => {
                    e.self_samples += f.self_samples;
                    e.total_samples += f.total_samples;
                }
                // New frames get their indices in order, so `i` is the next one.
                None => self.frames.push(f),
            }
        }
        sort_frames(&mut self.frames);
    }
}

/// Lines of two reports, summed by function, file and line, costliest first.
fn merge_lines(a: Vec<LineCost>, b: Vec<LineCost>) -> Vec<LineCost> {
    let mut costs: FrameCosts<(&str, &str, u32)> = FrameCosts::default();
    for l in a.iter().chain(&b) {
        costs.add(
            (l.function.as_str(), l.file.as_str(), l.line),
            l.self_samples,
            l.total_samples,
        );
    }
    costs.into_lines()
}

/// By total samples, then self samples (both descending), then function and file name. Frames
/// are unique by function and file, so the order is total and an unstable sort is exact.
fn sort_frames(frames: &mut [FrameCost]) {
    frames.sort_unstable_by(|a, b| {
        (b.total_samples, b.self_samples, &a.function, &a.file).cmp(&(
            a.total_samples,
            a.self_samples,
            &b.function,
            &b.file,
        ))
    });
}

/// Self and total samples by frame key: how [`report`] counts a stack, and how a
/// [`WindowSummary`](crate::store::summary::WindowSummary) counts it ahead of time. The leaf (the first key) gets the sample's count
/// as self; every distinct key on the stack gets it once as total.
#[derive(Debug)]
pub(crate) struct FrameCosts<K> {
    costs: FxHashMap<K, (u64, u64)>,
    seen: FxHashSet<K>,
}

impl<K> Default for FrameCosts<K> {
    fn default() -> Self {
        Self {
            costs: FxHashMap::default(),
            seen: FxHashSet::default(),
        }
    }
}

impl<K: Copy + Eq + Hash> FrameCosts<K> {
    /// Counts one sample of `n` with this stack (keys leaf first).
    pub(crate) fn add_stack(&mut self, leaf_first: impl IntoIterator<Item = K>, n: u64) {
        let costs = &mut self.costs;
        let mut leaf = true;
        distinct(&mut self.seen, leaf_first, |k| {
            let e = costs.entry(k).or_default();
            if leaf {
                e.0 += n;
                leaf = false;
            }
            e.1 += n;
        });
    }

    /// Adds counts already made for `key`.
    pub(crate) fn add(&mut self, key: K, self_samples: u64, total_samples: u64) {
        let e = self.costs.entry(key).or_default();
        e.0 += self_samples;
        e.1 += total_samples;
    }

    /// Every key with its (self, total) samples, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (K, u64, u64)> + '_ {
        self.costs.iter().map(|(&k, &(s, t))| (k, s, t))
    }
}

impl FrameCosts<(&str, &str)> {
    /// The frames of a [`Report`], costliest first.
    pub(crate) fn into_frames(self) -> Vec<FrameCost> {
        let mut frames: Vec<FrameCost> = self
            .costs
            .into_iter()
            .map(
                |((function, file), (self_samples, total_samples))| FrameCost {
                    function: function.to_string(),
                    file: file.to_string(),
                    self_samples,
                    total_samples,
                },
            )
            .collect();
        sort_frames(&mut frames);
        frames
    }
}

impl FrameCosts<(&str, &str, u32)> {
    /// The lines of a [`Report`], costliest first.
    pub(crate) fn into_lines(self) -> Vec<LineCost> {
        let mut lines: Vec<LineCost> = self
            .costs
            .into_iter()
            .map(
                |((function, file, line), (self_samples, total_samples))| LineCost {
                    function: function.to_string(),
                    file: file.to_string(),
                    line,
                    self_samples,
                    total_samples,
                },
            )
            .collect();
        lines.sort_unstable_by(|a, b| {
            (
                b.total_samples,
                b.self_samples,
                &a.function,
                &a.file,
                a.line,
            )
                .cmp(&(
                    a.total_samples,
                    a.self_samples,
                    &b.function,
                    &b.file,
                    b.line,
                ))
        });
        lines
    }
}

/// Samples, top frames and coverage of the selected samples.
pub fn report(profiles: &[Profile], filter: &Filter) -> Report {
    report_impl(profiles, filter, false)
}

/// [`report`] with [`Report::lines`] filled in: what a report by line needs. Window
/// summaries keep no lines, so this is answered from decoded windows only.
pub fn report_with_lines(profiles: &[Profile], filter: &Filter) -> Report {
    report_impl(profiles, filter, true)
}

fn report_impl(profiles: &[Profile], filter: &Filter, with_lines: bool) -> Report {
    let mut r = Report::default();
    let mut costs: FrameCosts<(&str, &str)> = FrameCosts::default();
    let mut line_costs: FrameCosts<(&str, &str, u32)> = FrameCosts::default();
    // The common root-first prefix so far (`None` before the first sample).
    let mut entry: Option<Vec<(&str, &str)>> = None;
    let mut stack: Vec<(&str, &str)> = Vec::new();
    for_each_sample(profiles, filter, |p, s| {
        r.samples += s.wall_samples;
        r.cpu_samples += s.cpu_samples;
        stack.clear();
        stack.extend(
            p.stack_frames(s.stack)
                .map(|f| (f.function.as_str(), f.file.as_str())),
        );
        costs.add_stack(stack.iter().copied(), s.wall_samples);
        if with_lines {
            line_costs.add_stack(
                p.stack_frames(s.stack)
                    .map(|f| (f.function.as_str(), f.file.as_str(), f.line)),
                s.wall_samples,
            );
        }
        match &mut entry {
            None => entry = Some(stack.iter().rev().copied().collect()),
            Some(e) => {
                let n = e
                    .iter()
                    .zip(stack.iter().rev())
                    .take_while(|(a, b)| a == b)
                    .count();
                e.truncate(n);
            }
        }
    });
    for p in profiles.iter().filter(|p| filter.matches_window(p)) {
        r.add_window(p.total_wall_samples(), p.total_cpu_samples());
    }
    r.frames = costs.into_frames();
    if with_lines {
        r.lines = Some(line_costs.into_lines());
    }
    r.entry_path = Some(
        entry
            .unwrap_or_default()
            .into_iter()
            .map(|(f, file)| (f.to_string(), file.to_string()))
            .collect(),
    );
    if let Some(id) = filter.span_id {
        let index = span_index(profiles);
        r.span = index.get(&id).cloned();
        let period = profiles.iter().map(|p| p.period_ns).find(|&p| p > 0);
        if let (Some(span), Some(period)) = (&r.span, period) {
            if let Some(d) = span.duration_ns() {
                // Coverage counts the span with its children: a child's samples are inside
                // the parent's duration.
                let all = descendants(&index, id);
                let mut actual = 0;
                for_each_sample(profiles, &Filter::default(), |_, s| {
                    if s.span.is_some_and(|c| all.contains(&c.span_id)) {
                        actual += s.wall_samples;
                    }
                });
                let expected = d as f64 / period as f64;
                r.coverage = Some(Coverage {
                    expected_samples: expected,
                    actual_samples: actual,
                    ratio: if expected > 0.0 {
                        actual as f64 / expected
                    } else {
                        0.0
                    },
                });
            }
        }
    }
    r
}
