//! The window aggregator: stamped samples in, one [`Profile`] per window out.

use std::collections::HashMap;
use std::sync::Arc;

use crate::labels::{LabelId, LabelValues};
use crate::mixhash::MixBuild as FxBuild;
use crate::spans::WindowSpans;
use crate::{
    Frame, FrameIndex, Profile, ProfileSample, RawFrame, Resource, SpanContext, Stack, WindowStats,
};

/// Limits of one window.
#[derive(Debug, Clone, Copy)]
pub struct AggregatorLimits {
    /// Distinct rows (stack × span × labels) per window; samples past it are dropped and counted.
    pub max_rows: usize,
    /// Distinct stacks remembered across windows before the intern tables are reset.
    pub max_stacks: usize,
    /// Distinct thread names.
    pub max_thread_names: usize,
    /// Distinct task names.
    pub max_task_names: usize,
}

impl Default for AggregatorLimits {
    fn default() -> Self {
        Self {
            max_rows: 200_000,
            max_stacks: 200_000,
            max_thread_names: 1_000,
            max_task_names: 200,
        }
    }
}

/// Index of an interned stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackIndex(pub u32);

/// A stamped sample: a stack with the span and labels it was taken under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sample {
    /// The interned stack.
    pub stack: StackIndex,
    /// The span current on the sampled key, if any.
    pub span: Option<SpanContext>,
    /// The route label id (in the span table's route values).
    pub route: LabelId,
    /// The thread name label id (in the aggregator's thread names).
    pub thread: LabelId,
    /// The task name label id, if a task was sampled.
    pub task: Option<LabelId>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    cpu_samples: u64,
    wall_samples: u64,
    cpu_ns: u64,
    wall_ns: u64,
}

/// Interns stacks and counts samples by (stack, span, labels) for the current window.
///
/// Adding a sample whose stack and labels were seen before does not allocate. Frames are
/// resolved through the symbolizer once per distinct raw frame.
///
/// ```
/// use span_profile_core::{Frame, RawFrame, Resource, WindowAggregator};
/// use span_profile_core::labels::LabelValues;
///
/// let mut agg = WindowAggregator::default();
/// let frames = [RawFrame { id: 1, line: 3 }, RawFrame { id: 2, line: 9 }];
/// let stack = agg.intern_stack(&frames, false);
/// agg.resolve_frames(&mut |r| Frame::new(format!("f{}", r.id), "a.py", r.line));
/// let thread = agg.intern_thread_name("main");
/// for _ in 0..3 {
///     agg.add(span_profile_core::Sample { stack, span: None, route: LabelValues::BACKGROUND, thread, task: None }, true, 10_000_000, 1);
/// }
/// let spans = span_profile_core::SpanTable::default().drain_window();
/// let p = agg.finish(Resource::default(), 0, 60_000_000_000, 10_000_000, &spans);
/// assert_eq!(p.samples[0].cpu_samples, 3);
/// assert_eq!(p.stack_frames(p.samples[0].stack).next().unwrap().function, "f1");
/// ```
#[derive(Debug)]
pub struct WindowAggregator {
    limits: AggregatorLimits,
    raw_frames: HashMap<RawFrame, FrameIndex, FxBuild>,
    /// Resolved frames, indexed by `FrameIndex`; `None` until [`Self::resolve_frames`] runs.
    frames: Vec<Option<Frame>>,
    /// Frames interned since the last resolution.
    unresolved: Vec<(RawFrame, FrameIndex)>,
    /// Stacks by raw frames, one map per truncation mark: a stack cut at the depth cap and a
    /// complete stack of the same frames (deep recursion) are different stacks.
    stack_index: [HashMap<Box<[RawFrame]>, StackIndex, FxBuild>; 2],
    stacks: Vec<Stack>,
    rows: HashMap<Sample, Counts, FxBuild>,
    threads: LabelValues,
    tasks: LabelValues,
    scratch: Vec<FrameIndex>,
    stats: WindowStats,
    /// Label overflows (routes, thread and task names) already reported in earlier windows.
    overflow_reported: u64,
}

impl Default for WindowAggregator {
    fn default() -> Self {
        Self::new(AggregatorLimits::default())
    }
}

impl WindowAggregator {
    /// An empty aggregator.
    pub fn new(limits: AggregatorLimits) -> Self {
        Self {
            limits,
            raw_frames: HashMap::default(),
            frames: Vec::new(),
            unresolved: Vec::new(),
            stack_index: Default::default(),
            stacks: Vec::new(),
            rows: HashMap::default(),
            threads: LabelValues::with_cap(limits.max_thread_names),
            tasks: LabelValues::with_cap(limits.max_task_names),
            scratch: Vec::new(),
            stats: WindowStats::default(),
            overflow_reported: 0,
        }
    }

    /// The window's running counters, for the sampler to add drops and errors to.
    pub fn stats_mut(&mut self) -> &mut WindowStats {
        &mut self.stats
    }

    /// Interns a stack (leaf first). A stack seen before is found without allocating; new raw
    /// frames are queued for [`WindowAggregator::resolve_frames`], which the caller runs after
    /// the walk (the walker that symbolizes is busy walking while stacks are interned).
    pub fn intern_stack(&mut self, raw: &[RawFrame], truncated: bool) -> StackIndex {
        if truncated {
            self.stats.truncated_stacks += 1;
        }
        if let Some(&i) = self.stack_index[usize::from(truncated)].get(raw) {
            return i;
        }
        if self.stacks.len() >= self.limits.max_stacks && self.rows.is_empty() {
            // Intern tables persist across windows so steady-state stacks never allocate;
            // reset them only between windows, when nothing refers to them.
            self.reset_interning();
        }
        self.scratch.clear();
        for &r in raw {
            let next = self.frames.len() as FrameIndex;
            let fi = *self.raw_frames.entry(r).or_insert(next);
            if fi == next {
                self.frames.push(None);
                self.unresolved.push((r, fi));
            }
            self.scratch.push(fi);
        }
        let i = StackIndex(self.stacks.len() as u32);
        self.stacks.push(Stack {
            frames: self.scratch.clone(),
            truncated,
        });
        self.stack_index[usize::from(truncated)].insert(raw.into(), i);
        i
    }

    /// Resolves the frames interned since the last call. Cheap when there are none.
    pub fn resolve_frames(&mut self, symbolize: &mut dyn FnMut(RawFrame) -> Frame) {
        for (r, fi) in self.unresolved.drain(..) {
            if let Some(slot) = self.frames.get_mut(fi as usize) {
                *slot = Some(symbolize(r));
            }
        }
    }

    fn reset_interning(&mut self) {
        self.raw_frames.clear();
        self.frames.clear();
        self.unresolved.clear();
        self.stack_index.iter_mut().for_each(HashMap::clear);
        self.stacks.clear();
    }

    /// The label id of a thread name.
    pub fn intern_thread_name(&mut self, name: &str) -> LabelId {
        self.threads.intern(name)
    }

    /// The label id of a task name.
    pub fn intern_task_name(&mut self, name: &str) -> LabelId {
        self.tasks.intern(name)
    }

    /// Counts one sample standing for `weight` samples of `interval_ns` each.
    #[inline]
    pub fn add(&mut self, sample: Sample, on_cpu: bool, interval_ns: u64, weight: u32) {
        let w = u64::from(weight.max(1));
        let ns = interval_ns.saturating_mul(w);
        let counts = match self.rows.get_mut(&sample) {
            Some(c) => c,
            None => {
                if self.rows.len() >= self.limits.max_rows {
                    self.stats.dropped_samples += w;
                    return;
                }
                self.rows.entry(sample).or_default()
            }
        };
        counts.wall_samples += w;
        counts.wall_ns += ns;
        if on_cpu {
            counts.cpu_samples += w;
            counts.cpu_ns += ns;
        }
    }

    /// Number of distinct rows in the current window.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// Closes the window: returns its [`Profile`] (frames and stacks compacted to those used)
    /// and starts an empty one. Routes of samples with a span are taken from the span table's
    /// record of the local root when it has one (instrumentations may set `http.route` late).
    pub fn finish(
        &mut self,
        resource: Resource,
        start_unix_ns: u64,
        duration_ns: u64,
        period_ns: u64,
        spans: &WindowSpans,
    ) -> Profile {
        let mut profile = Profile::empty(resource, start_unix_ns, duration_ns, period_ns);
        let late_routes: HashMap<_, &str> = spans
            .spans
            .iter()
            .filter_map(|s| Some((s.span_id, s.route.as_deref()?)))
            .collect();
        let mut stack_map: HashMap<StackIndex, u32> = HashMap::new();
        let mut frame_map: HashMap<FrameIndex, FrameIndex> = HashMap::new();
        // Distinct raw frames may resolve to the same frame (two addresses of one line).
        let mut by_value: HashMap<&Frame, FrameIndex> = HashMap::new();
        let unknown = Frame::new("[unknown]", "", 0);
        let mut route_cache: HashMap<LabelId, Arc<str>> = HashMap::new();
        let mut rows: Vec<(Sample, Counts)> = self.rows.drain().collect();
        rows.sort_unstable_by_key(|(s, _)| (s.stack, s.span, s.route, s.thread, s.task));
        for (s, c) in rows {
            let stack = match stack_map.get(&s.stack) {
                Some(&i) => i,
                None => {
                    let Some(src) = self.stacks.get(s.stack.0 as usize) else {
                        continue;
                    };
                    let mut frames = Vec::with_capacity(src.frames.len());
                    for &f in &src.frames {
                        let nf = *frame_map.entry(f).or_insert_with(|| {
                            let frame = self
                                .frames
                                .get(f as usize)
                                .and_then(Option::as_ref)
                                .unwrap_or(&unknown);
                            *by_value.entry(frame).or_insert_with(|| {
                                profile.frames.push(frame.clone());
                                (profile.frames.len() - 1) as FrameIndex
                            })
                        });
                        frames.push(nf);
                    }
                    profile.stacks.push(Stack {
                        frames,
                        truncated: src.truncated,
                    });
                    let i = (profile.stacks.len() - 1) as u32;
                    stack_map.insert(s.stack, i);
                    i
                }
            };
            let route = match s.span.and_then(|c| late_routes.get(&c.local_root_span_id)) {
                Some(r) => Arc::from(*r),
                None => route_cache
                    .entry(s.route)
                    .or_insert_with(|| Arc::from(spans.route(s.route)))
                    .clone(),
            };
            profile.samples.push(ProfileSample {
                stack,
                span: s.span,
                route,
                thread_name: self.threads.get_arc(s.thread),
                task_name: s.task.map(|t| self.tasks.get_arc(t)),
                cpu_samples: c.cpu_samples,
                wall_samples: c.wall_samples,
                cpu_ns: c.cpu_ns,
                wall_ns: c.wall_ns,
            });
        }
        profile.spans = spans.spans.clone();
        let mut stats = std::mem::take(&mut self.stats);
        // The label tables live across windows and count overflows in total: report this
        // window's share, so that summing windows (a merge) counts each overflow once.
        let overflow = spans.route_overflow + self.threads.overflowed() + self.tasks.overflowed();
        stats.label_overflow += overflow.saturating_sub(self.overflow_reported);
        self.overflow_reported = overflow;
        stats.dropped_spans += spans.dropped;
        profile.stats = stats;
        profile
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SpanTable;

    fn sym(r: RawFrame) -> Frame {
        Frame::new(format!("f{}", r.id), "x.py", r.line)
    }

    #[test]
    fn identical_samples_are_merged_and_distinct_spans_are_not() {
        let mut a = WindowAggregator::default();
        let raw = [RawFrame { id: 1, line: 1 }];
        let st = a.intern_stack(&raw, false);
        let t = a.intern_thread_name("w");
        let ctx = |s| SpanContext {
            trace_id: crate::TraceId::from_u128(1).unwrap(),
            span_id: crate::SpanId::from_u64(s).unwrap(),
            local_root_span_id: crate::SpanId::from_u64(1).unwrap(),
        };
        for span in [Some(ctx(1)), Some(ctx(1)), Some(ctx(2)), None] {
            let route = if span.is_some() {
                LabelId(2)
            } else {
                LabelValues::BACKGROUND
            };
            a.add(
                Sample {
                    stack: st,
                    span,
                    route,
                    thread: t,
                    task: None,
                },
                span.is_some(),
                10,
                1,
            );
        }
        let table = SpanTable::default();
        table.intern_route("/checkout");
        let p = a.finish(Resource::default(), 0, 1, 10, &table.drain_window());
        assert_eq!(p.samples.len(), 3);
        assert_eq!(p.total_wall_samples(), 4);
        assert_eq!(p.total_cpu_samples(), 3);
        let bg = p.samples.iter().find(|s| s.span.is_none()).unwrap();
        assert_eq!(&*bg.route, "background");
        assert_eq!(bg.cpu_ns, 0);
        assert!(p
            .samples
            .iter()
            .filter(|s| s.span.is_some())
            .all(|s| &*s.route == "/checkout"));
    }

    #[test]
    fn the_row_cap_drops_and_counts() {
        let mut a = WindowAggregator::new(AggregatorLimits {
            max_rows: 2,
            ..Default::default()
        });
        let t = a.intern_thread_name("w");
        for i in 0..5 {
            let st = a.intern_stack(&[RawFrame { id: i, line: 0 }], false);
            a.add(
                Sample {
                    stack: st,
                    span: None,
                    route: LabelValues::BACKGROUND,
                    thread: t,
                    task: None,
                },
                true,
                1,
                3,
            );
        }
        let p = a.finish(
            Resource::default(),
            0,
            1,
            1,
            &SpanTable::default().drain_window(),
        );
        assert_eq!(p.samples.len(), 2);
        assert_eq!(p.stats.dropped_samples, 9);
    }

    #[test]
    fn a_truncated_stack_and_a_complete_one_of_the_same_frames_stay_apart() {
        // Found by the window_merge fuzz target: stacks were interned by frames alone, so the
        // first-seen truncation mark stuck to every later stack of the same frames.
        let mut a = WindowAggregator::default();
        let t = a.intern_thread_name("w");
        let raw = [RawFrame { id: 1, line: 1 }, RawFrame { id: 1, line: 2 }];
        for truncated in [false, true, true] {
            let stack = a.intern_stack(&raw, truncated);
            let s = Sample {
                stack,
                span: None,
                route: LabelValues::BACKGROUND,
                thread: t,
                task: None,
            };
            a.add(s, true, 1, 1);
        }
        a.resolve_frames(&mut sym);
        let p = a.finish(
            Resource::default(),
            0,
            1,
            1,
            &SpanTable::default().drain_window(),
        );
        let mut rows: Vec<_> = p
            .samples
            .iter()
            .map(|s| (p.stacks[s.stack as usize].truncated, s.wall_samples))
            .collect();
        rows.sort();
        assert_eq!(rows, [(false, 1), (true, 2)]);
        assert_eq!(p.stats.truncated_stacks, 2);
    }

    #[test]
    fn label_overflow_is_reported_in_the_window_it_happened() {
        let mut a = WindowAggregator::new(AggregatorLimits {
            max_thread_names: 3,
            ..Default::default()
        });
        let table = SpanTable::default();
        let mut window = |names: &[&str]| {
            for n in names {
                a.intern_thread_name(n);
            }
            a.finish(Resource::default(), 0, 1, 1, &table.drain_window())
                .stats
                .label_overflow
        };
        assert_eq!(window(&["a", "b", "c"]), 2);
        assert_eq!(
            window(&["a"]),
            0,
            "earlier overflows are not reported again"
        );
        assert_eq!(window(&["d"]), 1);
    }

    #[test]
    fn frames_are_symbolized_once_and_shared_between_stacks() {
        let mut a = WindowAggregator::default();
        let mut calls = 0;
        let mut s = |r: RawFrame| {
            calls += 1;
            sym(r)
        };
        let f = |id| RawFrame { id, line: 0 };
        a.intern_stack(&[f(1), f(2)], false);
        a.intern_stack(&[f(3), f(2)], false);
        a.resolve_frames(&mut s);
        a.intern_stack(&[f(3), f(2)], false);
        a.resolve_frames(&mut s);
        assert_eq!(calls, 3);
    }
}
