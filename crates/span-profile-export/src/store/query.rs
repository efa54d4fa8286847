//! Questions asked of stored windows: which samples a [`Filter`] selects, a span's samples and
//! top frames, the same for a trace, a route or a service, the routes that produce a frame,
//! the spans of some windows, and the counting rules every answer shares (also those of
//! [`WindowSummary`](crate::store::summary::WindowSummary) and
//! [`diff`](crate::store::diff)).
//!
//! Everything here works on a slice of [`Profile`]s, however they were loaded.
//!
//! ```
//! use span_profile_export::store::query::{report, Filter};
//! # let profiles: Vec<span_profile_core::Profile> = vec![];
//! let r = report(&profiles, &Filter::default().route("/checkout"));
//! for f in r.top(10) {
//!     println!("{:>6} {}", f.total_samples, f.function);
//! }
//! ```

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use span_profile_core::{Profile, ProfileSample, SpanId, SpanRecord, TraceId, WindowInfo};

use crate::store::frames::{display_name, group_key, module_of, Grouping};

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

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
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

/// One route's requests over some windows (ADR 0032): what CPU per request divides by.
///
/// A window written since requests are counted knows every request that ended in it, sampled
/// or not ([`Profile::requests`]). An older window knows only the local-root spans in its span
/// table, which holds the spans its samples need (ADR 0010): the requests a sample caught.
/// Those are kept by span id, so that a request whose record several windows hold counts once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    /// Requests that ended in windows that count them.
    pub counted: u64,
    /// Local-root span ids of the route from the span tables of windows that do not count
    /// requests, or of every window when a trace is selected (a count is not by trace).
    pub seen: HashSet<SpanId>,
    /// Some selected windows did not count requests: their requests are only those a sample
    /// caught, so a short route's count is low and its CPU per request high.
    pub sampled_only: bool,
}

impl Requests {
    /// How many requests.
    ///
    /// ```
    /// use span_profile_export::store::query::Requests;
    /// let mut r = Requests { counted: 90, ..Requests::default() };
    /// r.seen.insert(span_profile_core::SpanId::from_u64(7).unwrap());
    /// assert_eq!(r.count(), 91);
    /// ```
    pub fn count(&self) -> u64 {
        self.counted + self.seen.len() as u64
    }

    /// Adds the requests of other windows (a request seen in both counts once).
    pub fn merge(&mut self, other: Requests) {
        self.counted += other.counted;
        self.seen.extend(other.seen);
        self.sampled_only |= other.sampled_only;
    }
}

/// The requests of window `p` that `filter` selects, by route. The window must be one
/// `filter` selects.
pub(crate) fn window_requests<'p>(p: &'p Profile, filter: &Filter) -> FxHashMap<&'p str, Requests> {
    let mut by_route: FxHashMap<&str, Requests> = FxHashMap::default();
    let wanted = |r: &str| filter.route.as_deref().is_none_or(|want| want == r);
    match (&p.requests, filter.trace_id) {
        (Some(counts), None) => {
            for c in counts.iter().filter(|c| wanted(&c.route)) {
                by_route.entry(&c.route).or_default().counted += c.requests;
            }
        }
        (counts, trace) => {
            for r in &p.spans {
                let Some(name) = r.route.as_deref() else {
                    continue;
                };
                if r.span_id == r.local_root_span_id
                    && wanted(name)
                    && trace.is_none_or(|t| t == r.trace_id)
                {
                    let e = by_route.entry(name).or_default();
                    e.seen.insert(r.span_id);
                    e.sampled_only |= counts.is_none();
                }
            }
        }
    }
    by_route
}

/// A route's CPU and its requests, in a [`CostAttribution`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteCost {
    /// CPU samples with this route label.
    pub cpu_samples: u64,
    /// CPU time of those samples, nanoseconds.
    pub cpu_ns: u64,
    /// The route's requests.
    pub requests: Requests,
    /// Some of the route's samples are in windows that neither count requests nor keep the
    /// spans (roll-ups of such windows made by `compact`), so its requests cannot be counted.
    pub requests_unknown: bool,
}

impl RouteCost {
    /// How many requests, when they can be counted.
    pub fn request_count(&self) -> Option<u64> {
        (!self.requests_unknown).then_some(self.requests.count())
    }

    /// CPU time per request, nanoseconds (`None` without requests or when they cannot be
    /// counted).
    pub fn cpu_ns_per_request(&self) -> Option<u64> {
        let n = self.request_count()?;
        (n > 0).then(|| self.cpu_ns / n)
    }
}

/// Where a selection's CPU goes: by route, with each route's requests, and by leaf frame (self
/// CPU, so that thread and event-loop entry frames, which are never the leaf of a busy
/// stack, do not show). The mergeable answer of [`cost_attribution`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CostAttribution {
    /// CPU samples of the selection.
    pub cpu_samples: u64,
    /// CPU time of the selection, nanoseconds.
    pub cpu_ns: u64,
    /// By route label.
    pub routes: HashMap<String, RouteCost>,
    /// Self CPU samples by leaf frame, as (function, file).
    pub self_cpu: HashMap<(String, String), u64>,
}

impl CostAttribution {
    /// Adds the attribution of other windows (requests seen in both count once).
    pub fn merge(&mut self, other: CostAttribution) {
        self.cpu_samples += other.cpu_samples;
        self.cpu_ns += other.cpu_ns;
        for (route, c) in other.routes {
            let e = self.routes.entry(route).or_default();
            e.cpu_samples += c.cpu_samples;
            e.cpu_ns += c.cpu_ns;
            e.requests.merge(c.requests);
            e.requests_unknown |= c.requests_unknown;
        }
        for (k, n) in other.self_cpu {
            *self.self_cpu.entry(k).or_default() += n;
        }
    }

    /// Self CPU samples grouped `by` module or package ([`group_key`]); by function and line
    /// it is keyed by [`display_name`]. Largest first, ties by key.
    pub fn self_cpu_by(&self, by: Grouping) -> Vec<(String, u64)> {
        let mut m: HashMap<String, u64> = HashMap::new();
        for ((function, file), &n) in &self.self_cpu {
            let key = match by {
                Grouping::Module | Grouping::Package => group_key(by, file),
                _ => display_name(function, file),
            };
            *m.entry(key).or_default() += n;
        }
        let mut v: Vec<(String, u64)> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }
}

/// CPU by route (with the requests of each route, [`Requests`]) and self CPU by leaf
/// frame ([`leaf_frame`](crate::store::frames::leaf_frame); a stack without a frame counts
/// under an empty function and file), of the selected samples.
pub fn cost_attribution(profiles: &[Profile], filter: &Filter) -> CostAttribution {
    let mut a = CostAttribution::default();
    let mut self_cpu: FxHashMap<(&str, &str), u64> = FxHashMap::default();
    for_each_sample(profiles, filter, |p, s| {
        if s.cpu_samples == 0 && s.cpu_ns == 0 {
            return;
        }
        a.cpu_samples += s.cpu_samples;
        a.cpu_ns += s.cpu_ns;
        let r = match a.routes.get_mut(&*s.route) {
            Some(r) => r,
            None => a.routes.entry(s.route.to_string()).or_default(),
        };
        r.cpu_samples += s.cpu_samples;
        r.cpu_ns += s.cpu_ns;
        if p.requests.is_none() {
            r.requests_unknown |= spans_dropped(p, s);
            r.requests.sampled_only = true;
        }
        if s.cpu_samples > 0 {
            let leaf = crate::store::frames::leaf_frame(p, s.stack).unwrap_or(("", ""));
            *self_cpu.entry(leaf).or_default() += s.cpu_samples;
        }
    });
    for ((function, file), n) in self_cpu {
        *a.self_cpu
            .entry((function.to_owned(), file.to_owned()))
            .or_default() += n;
    }
    for p in profiles.iter().filter(|p| filter.matches_window(p)) {
        for (route, n) in window_requests(p, filter) {
            a.routes
                .entry(route.to_owned())
                .or_default()
                .requests
                .merge(n);
        }
    }
    a
}

/// Whether a sample lost its span, so that its route's requests cannot be counted from span
/// records: a span without the window's span table, or a request's route without its span (a
/// roll-up made by `compact` keeps no span ids and no span tables). Matters only for a window
/// that does not count its requests.
pub(crate) fn spans_dropped(p: &Profile, s: &ProfileSample) -> bool {
    match s.span {
        Some(_) => p.spans.is_empty(),
        None => &*s.route != span_profile_core::labels::BACKGROUND_ROUTE,
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

/// A span with its samples: those of the span and its descendants, and its own.
#[derive(Debug, Clone, Serialize)]
pub struct SpanSummary {
    /// The span.
    pub span: SpanRecord,
    /// Wall samples of the span and every span below it (the span tree of the windows read):
    /// the request's samples, for a root span.
    pub samples: u64,
    /// Wall samples with this exact span id: taken while it was the innermost current span.
    pub own_samples: u64,
}

/// The span table and per-span sample counts of some windows: the mergeable form of
/// [`spans`]. Tallies of disjoint windows made with the same filter merge into the tally of
/// all of them, so windows can be read one at a time.
#[derive(Debug, Clone, Default)]
pub struct SpanTally {
    records: HashMap<SpanId, SpanRecord>,
    samples: HashMap<SpanId, u64>,
}

impl SpanTally {
    /// Adds the span records (of the trace, if the filter names one) and the span sample
    /// counts of the windows that pass `filter`'s window test.
    pub fn add(&mut self, profiles: &[Profile], filter: &Filter) {
        for p in profiles.iter().filter(|p| filter.matches_window(p)) {
            for s in &p.samples {
                if let Some(c) = s.span {
                    *self.samples.entry(c.span_id).or_default() += s.wall_samples;
                }
            }
            for r in p
                .spans
                .iter()
                .filter(|r| filter.trace_id.is_none_or(|t| r.trace_id == t))
            {
                self.add_record(r.clone());
            }
        }
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: SpanTally) {
        for (id, n) in other.samples {
            *self.samples.entry(id).or_default() += n;
        }
        for r in other.records.into_values() {
            self.add_record(r);
        }
    }

    /// An ended record wins over an open one.
    fn add_record(&mut self, r: SpanRecord) {
        match self.records.get(&r.span_id) {
            Some(existing) if existing.end_unix_ns.is_some() => {}
            _ => {
                self.records.insert(r.span_id, r);
            }
        }
    }

    /// Ended spans, slowest first (ties by span id), with their sample counts: their own, and
    /// with their descendants (by the parent links of every record added, whichever window it
    /// came from, so a request that crosses windows is counted whole).
    pub fn finish(self) -> Vec<SpanSummary> {
        let own = self.samples;
        let with_descendants = subtree_samples(&self.records, &own);
        let mut out: Vec<SpanSummary> = self
            .records
            .into_values()
            .filter(|s| s.end_unix_ns.is_some())
            .map(|span| SpanSummary {
                samples: with_descendants.get(&span.span_id).copied().unwrap_or(0),
                own_samples: own.get(&span.span_id).copied().unwrap_or(0),
                span,
            })
            .collect();
        out.sort_by(|a, b| {
            b.span
                .duration_ns()
                .cmp(&a.span.duration_ns())
                .then(a.span.span_id.cmp(&b.span.span_id))
        });
        out
    }
}

/// Each recorded span's own samples plus those of every span below it. Each span's own count
/// is added to itself and to each ancestor once (a cycle in corrupt parent links stops at the
/// first repeat). Samples of a span without a record count for no ancestor.
fn subtree_samples(
    records: &HashMap<SpanId, SpanRecord>,
    own: &HashMap<SpanId, u64>,
) -> HashMap<SpanId, u64> {
    let mut out: HashMap<SpanId, u64> = records.keys().map(|&id| (id, 0)).collect();
    let mut seen: HashSet<SpanId> = HashSet::new();
    for (&id, &n) in own {
        if n == 0 {
            continue;
        }
        seen.clear();
        let mut at = Some(id);
        while let Some(s) = at {
            if !seen.insert(s) {
                break;
            }
            let Some(r) = records.get(&s) else { break };
            *out.entry(s).or_default() += n;
            at = r.parent_span_id;
        }
    }
    out
}

/// Ended spans of the selected windows (and of the filter's trace, if it names one), slowest
/// first, with their sample counts (see [`SpanTally::finish`]).
pub fn spans(profiles: &[Profile], filter: &Filter) -> Vec<SpanSummary> {
    let mut t = SpanTally::default();
    t.add(profiles, filter);
    t.finish()
}

/// The slowest ended span with this name, if any.
pub fn slowest_span(profiles: &[Profile], name: &str) -> Option<SpanRecord> {
    spans(profiles, &Filter::default())
        .into_iter()
        .find(|s| &*s.span.name == name)
        .map(|s| s.span)
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
