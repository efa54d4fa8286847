//! The window aggregator: stamped samples in, one [`Profile`] per window out.

use std::collections::HashMap;
use std::sync::Arc;

use crate::labels::{LabelId, LabelValues};
use crate::mixhash::MixBuild as FxBuild;
use crate::rows::RowIndex;
use crate::spans::WindowSpans;
use crate::{
    ExecutionKey, Frame, FrameIndex, Profile, ProfileSample, RawFrame, RawSample, Resource,
    SpanContext, SpanId, SpanRecord, Stack, WindowStats,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
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

/// A row's totals. The sample counts are 32-bit, and saturate rather than wrap (an hour's
/// window at 100 Hz has 360,000 ticks): a busy window has tens of thousands of rows, and the
/// row buffer is kept from window to window.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    wall_samples: u32,
    cpu_ns: u64,
    wall_ns: u64,
}

/// Positions of a walk remembered by [`WindowAggregator::add_raw`]; later ones are not cached.
const MAX_RECENT: usize = 4096;

/// What one position of the last walk produced: its raw stack and names, their interned ids,
/// and the row they were counted in.
///
/// What [`WindowAggregator::repeat_raw`] reads, a waiting thread's every tick, comes first and
/// fits one cache line, which each position starts on: a repeat touches this line and its row's
/// counts, not the stack and names behind them (ADR 0035, amended 2026-12-07).
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct Recent {
    /// [`WindowAggregator::interning`] of the ids below; 0 = nothing cached.
    interning: u64,
    /// Whose sample with a wall weight this position last counted, in which walk
    /// ([`WindowAggregator::begin_walk`]): what [`WindowAggregator::repeat_raw`] may count again.
    last: Option<(ExecutionKey, u64)>,
    /// Where the last count went, of the sample `row_sample`.
    row: Option<RowAt>,
    row_sample: Option<Sample>,
    truncated: bool,
    has_task: bool,
    frames: Vec<RawFrame>,
    thread_name: String,
    task_name: String,
    stack: StackIndex,
    thread: LabelId,
    task: Option<LabelId>,
}

/// The row a position's last sample was counted in, and whether its stack was truncated.
#[derive(Debug, Clone, Copy)]
struct RowAt {
    window: u64,
    row: u32,
    truncated: bool,
}

impl Recent {
    fn same_stack(&self, s: &RawSample<'_>) -> bool {
        self.truncated == s.truncated
            && *self.frames == *s.frames
            && self.thread_name == s.thread_name
            && match s.task_name {
                Some(t) => self.has_task && self.task_name == t,
                None => !self.has_task,
            }
    }

    /// Counted in `row` of `window` (or in no row: `None`), as `sample`; call after
    /// [`Self::remember`].
    fn set_row(&mut self, window: u64, sample: Sample, row: Option<u32>) {
        let truncated = self.truncated;
        self.row = row.map(|row| RowAt {
            window,
            row,
            truncated,
        });
        self.row_sample = Some(sample);
    }

    /// Copies the raw parts of `s` (reusing this slot's buffers) with their interned `sample`.
    fn remember(&mut self, s: &RawSample<'_>, sample: Sample) {
        self.frames.clear();
        self.frames.extend_from_slice(s.frames);
        self.truncated = s.truncated;
        self.thread_name.clear();
        self.thread_name.push_str(s.thread_name);
        self.task_name.clear();
        self.task_name.push_str(s.task_name.unwrap_or(""));
        self.has_task = s.task_name.is_some();
        self.stack = sample.stack;
        self.thread = sample.thread;
        self.task = sample.task;
    }
}

/// Interns stacks and counts samples by (stack, span, labels) for the current window.
///
/// Adding a sample whose stack and labels were seen before does not allocate. Frames are
/// resolved through the symbolizer once per distinct raw frame.
///
/// ```
/// use span_profile_core::internal::WindowAggregator;
/// use span_profile_core::{Frame, RawFrame, Resource};
/// use span_profile_core::labels::LabelValues;
///
/// let mut agg = WindowAggregator::default();
/// let frames = [RawFrame { id: 1, line: 3 }, RawFrame { id: 2, line: 9 }];
/// let stack = agg.intern_stack(&frames, false);
/// agg.resolve_frames(&mut |r| Frame::new(format!("f{}", r.id), "a.py", r.line));
/// let thread = agg.intern_thread_name("main");
/// for _ in 0..3 {
///     agg.add(span_profile_core::internal::Sample { stack, span: None, route: LabelValues::BACKGROUND, thread, task: None }, 10_000_000, 10_000_000, 1);
/// }
/// let mut spans = span_profile_core::SpanTable::default().drain_window();
/// let p = agg.finish(Resource::default(), 0, 60_000_000_000, 10_000_000, &mut spans);
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
    /// Row of each distinct sample in `counts` (which holds the sample once).
    rows: RowIndex,
    /// The window's rows, in the order they were first seen.
    counts: Vec<(Sample, Counts)>,
    /// What each position of the last walk produced ([`Self::add_raw`]).
    recent: Vec<Recent>,
    /// Bumped when the intern tables are reset: stack ids of older [`Recent`]s are stale.
    interning: u64,
    /// Bumped when a window closes: row numbers of older [`Recent`]s are stale.
    window: u64,
    /// Bumped by [`Self::begin_walk`]: which walk each [`Recent`] was last filled in.
    walk: u64,
    threads: LabelValues,
    tasks: LabelValues,
    scratch: Vec<FrameIndex>,
    stats: WindowStats,
    /// Label overflows (routes, thread and task names) already reported in earlier windows.
    overflow_reported: u64,
    /// Span records the last window left out that ended near its close: offered once more to
    /// the next window, whose first samples may still carry them ([`spans_to_keep`]).
    carried_spans: Vec<SpanRecord>,
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
            rows: RowIndex::default(),
            counts: Vec::new(),
            recent: Vec::new(),
            interning: 1,
            window: 1,
            walk: 0,
            threads: LabelValues::with_cap(limits.max_thread_names),
            tasks: LabelValues::with_cap(limits.max_task_names),
            scratch: Vec::new(),
            stats: WindowStats::default(),
            overflow_reported: 0,
            carried_spans: Vec::new(),
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
        if self.stacks.len() >= self.limits.max_stacks && self.rows.len() == 0 {
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
        self.interning += 1;
    }

    /// The label id of a thread name.
    pub fn intern_thread_name(&mut self, name: &str) -> LabelId {
        self.threads.intern(name)
    }

    /// The label id of a task name.
    pub fn intern_task_name(&mut self, name: &str) -> LabelId {
        self.tasks.intern(name)
    }

    /// Counts one sample standing for `weight` samples of `interval_ns` of wall time each, and
    /// for `cpu_ns` of CPU time (what its thread used since its previous sample).
    #[inline]
    pub fn add(&mut self, sample: Sample, cpu_ns: u64, interval_ns: u64, weight: u32) {
        if let Some(row) = self.row_of(sample, weight) {
            self.bump(row, cpu_ns, interval_ns, weight);
        }
    }

    /// Counts the `slot`-th sample of a walk (its position among the samples the walker
    /// reported this tick) under `span` and `route`: the same as [`Self::intern_stack`], the
    /// name interning and [`Self::add`], but a slot whose stack, names, span and route are
    /// those of the same slot in the last walk goes straight to its row. A walker reports its
    /// threads in much the same order each tick, and most threads' stacks do not change
    /// between ticks, so the intern tables and the row map (and their cache misses) are mostly
    /// skipped. Steady state, it does not allocate.
    ///
    /// ```
    /// use span_profile_core::internal::WindowAggregator;
    /// use span_profile_core::{ExecutionKey, RawFrame, RawSample, Resource};
    /// use span_profile_core::labels::LabelValues;
    ///
    /// let mut agg = WindowAggregator::default();
    /// let frames = [RawFrame { id: 1, line: 3 }];
    /// let s = RawSample::new(ExecutionKey::thread(1), &frames, "main").with_cpu_ns(10_000_000);
    /// for _tick in 0..3 {
    ///     agg.add_raw(0, &s, None, LabelValues::BACKGROUND, 10_000_000);
    /// }
    /// let mut spans = span_profile_core::SpanTable::default().drain_window();
    /// let p = agg.finish(Resource::default(), 0, 60_000_000_000, 10_000_000, &mut spans);
    /// assert_eq!((p.samples.len(), p.samples[0].cpu_samples), (1, 3));
    /// ```
    pub fn add_raw(
        &mut self,
        slot: usize,
        s: &RawSample<'_>,
        span: Option<SpanContext>,
        route: LabelId,
        interval_ns: u64,
    ) {
        if slot >= self.recent.len() {
            if slot > MAX_RECENT {
                return self.add_raw_aside(s, span, route, interval_ns);
            }
            self.recent.resize_with(slot + 1, Recent::default);
        }
        let (interning, window) = (self.interning, self.window);
        let r = &mut self.recent[slot];
        r.last = (s.weight > 0).then_some((s.key, self.walk));
        if r.interning == interning && r.same_stack(s) {
            if s.truncated {
                self.stats.truncated_stacks += 1;
            }
            let sample = Sample {
                stack: r.stack,
                span,
                route,
                thread: r.thread,
                task: r.task,
            };
            let row = match r.row {
                Some(at) if at.window == window && r.row_sample == Some(sample) => Some(at.row),
                _ => {
                    let row = self.row_of(sample, s.weight);
                    self.recent[slot].set_row(window, sample, row);
                    row
                }
            };
            if let Some(row) = row {
                self.bump(row, s.cpu_ns, interval_ns, s.weight);
            }
            return;
        }
        let sample = self.intern_sample(s, span, route);
        let row = self.row_of(sample, s.weight);
        let r = &mut self.recent[slot];
        // Names that overflowed their table are interned each time, so every overflow counts.
        let cacheable =
            sample.thread != LabelValues::OTHER && sample.task != Some(LabelValues::OTHER);
        r.interning = if cacheable { interning } else { 0 };
        r.remember(s, sample);
        r.set_row(window, sample, row);
        if let Some(row) = row {
            self.bump(row, s.cpu_ns, interval_ns, s.weight);
        }
    }

    /// Counts a sample that holds no position in the walk: a CPU-only sample (weight 0) that a
    /// walker reports beside a thread's own, charging CPU to the stack the thread last ran in.
    /// Interned in full, as [`Self::add_raw`] past its positions does; the positions are left
    /// as they were, so that the threads reported after it keep theirs, and
    /// [`Self::repeat_raw`] and the same-stack shortcut still find each thread where the last
    /// walk left it.
    ///
    /// ```
    /// use span_profile_core::internal::WindowAggregator;
    /// use span_profile_core::{ExecutionKey, RawFrame, RawSample, Resource};
    /// use span_profile_core::labels::LabelValues;
    ///
    /// let mut agg = WindowAggregator::default();
    /// let (waits, ran) = ([RawFrame { id: 1, line: 3 }], [RawFrame { id: 2, line: 7 }]);
    /// let (a, b) = (ExecutionKey::thread(1), ExecutionKey::thread(2));
    /// agg.begin_walk();
    /// agg.add_raw(0, &RawSample::new(a, &waits, "a"), None, LabelValues::BACKGROUND, 10_000_000);
    /// agg.add_raw(1, &RawSample::new(b, &waits, "b"), None, LabelValues::BACKGROUND, 10_000_000);
    /// agg.begin_walk();
    /// assert!(agg.repeat_raw(0, a, 1, 10_000_000));
    /// // Thread a's CPU, charged to where it last ran: b is still at position 1.
    /// let charge = RawSample::new(a, &ran, "a").with_cpu_ns(4_000_000).with_weight(0);
    /// agg.add_raw_aside(&charge, None, LabelValues::BACKGROUND, 10_000_000);
    /// assert!(agg.repeat_raw(1, b, 1, 10_000_000));
    /// let mut spans = span_profile_core::SpanTable::default().drain_window();
    /// let p = agg.finish(Resource::default(), 0, 60_000_000_000, 10_000_000, &mut spans);
    /// assert_eq!(p.samples.len(), 3);
    /// ```
    pub fn add_raw_aside(
        &mut self,
        s: &RawSample<'_>,
        span: Option<SpanContext>,
        route: LabelId,
        interval_ns: u64,
    ) {
        let sample = self.intern_sample(s, span, route);
        self.add(sample, s.cpu_ns, interval_ns, s.weight);
    }

    /// Starts a walk: the positions [`Self::add_raw`] fills from here on belong to it, and
    /// [`Self::repeat_raw`] may count again what the previous walk counted.
    pub fn begin_walk(&mut self) {
        self.walk += 1;
    }

    /// Counts again, at position `slot` of this walk, standing for `weight` samples of
    /// `interval_ns` each and no CPU time, the sample that [`Self::add_raw`] counted for `key`
    /// at the same position of the previous walk (with a wall weight), if it is in this
    /// window's rows. Returns whether it did; it counts nothing (`false`) when there is no
    /// such sample: the window closed since, the position held another key or was not
    /// filled, the previous walk was not begun with [`Self::begin_walk`], or the names
    /// overflowed their table. Its span is not marked sampled again: the sample that first
    /// filled the row in this window did.
    ///
    /// The caller vouches that the sample it would hand [`Self::add_raw`] now is the same
    /// (stack, names, span, route) as the last one it handed for `key` with a wall weight; a
    /// walker knows that of a thread that has not run since (ADR 0035). It costs a few loads,
    /// where [`Self::add_raw`] compares the whole stack.
    ///
    /// ```
    /// use span_profile_core::internal::WindowAggregator;
    /// use span_profile_core::{ExecutionKey, RawFrame, RawSample, Resource};
    /// use span_profile_core::labels::LabelValues;
    ///
    /// let mut agg = WindowAggregator::default();
    /// let frames = [RawFrame { id: 1, line: 3 }];
    /// let key = ExecutionKey::thread(1);
    /// agg.begin_walk();
    /// agg.add_raw(0, &RawSample::new(key, &frames, "main"), None, LabelValues::BACKGROUND, 10_000_000);
    /// agg.begin_walk();
    /// assert!(agg.repeat_raw(0, key, 1, 12_000_000));
    /// // Another thread at that position, or a position not filled last walk: not counted.
    /// agg.begin_walk();
    /// assert!(!agg.repeat_raw(0, ExecutionKey::thread(2), 1, 10_000_000));
    /// assert!(!agg.repeat_raw(1, key, 1, 10_000_000));
    /// let mut spans = span_profile_core::SpanTable::default().drain_window();
    /// let p = agg.finish(Resource::default(), 0, 60_000_000_000, 10_000_000, &mut spans);
    /// assert_eq!((p.samples[0].wall_samples, p.samples[0].wall_ns), (2, 22_000_000));
    /// ```
    pub fn repeat_raw(
        &mut self,
        slot: usize,
        key: ExecutionKey,
        weight: u32,
        interval_ns: u64,
    ) -> bool {
        let (interning, window, walk) = (self.interning, self.window, self.walk);
        let Some(r) = self.recent.get_mut(slot) else {
            return false;
        };
        if r.interning != interning || r.last != Some((key, walk.wrapping_sub(1))) {
            return false;
        }
        let Some(at) = r.row else {
            return false;
        };
        if at.window != window {
            return false;
        }
        r.last = Some((key, walk));
        if at.truncated {
            self.stats.truncated_stacks += 1;
        }
        self.bump(at.row, 0, interval_ns, weight);
        true
    }

    fn intern_sample(
        &mut self,
        s: &RawSample<'_>,
        span: Option<SpanContext>,
        route: LabelId,
    ) -> Sample {
        Sample {
            stack: self.intern_stack(s.frames, s.truncated),
            span,
            route,
            thread: self.intern_thread_name(s.thread_name),
            task: s.task_name.map(|t| self.intern_task_name(t)),
        }
    }

    /// The row of `sample`, added if new; `None` (and `weight` samples counted as dropped)
    /// when the window is at its row cap.
    fn row_of(&mut self, sample: Sample, weight: u32) -> Option<u32> {
        if let Some(row) = self.rows.get(&self.counts, &sample) {
            return Some(row);
        }
        if self.rows.len() >= self.limits.max_rows {
            self.stats.dropped_samples += u64::from(weight.max(1));
            return None;
        }
        let row = self.counts.len() as u32;
        self.counts.push((sample, Counts::default()));
        self.rows.insert(&self.counts, row);
        Some(row)
    }

    #[inline]
    fn bump(&mut self, row: u32, cpu_ns: u64, interval_ns: u64, weight: u32) {
        // Weight 0: CPU time only, no wall sample (RawSample::weight).
        let w = weight;
        let ns = interval_ns.saturating_mul(u64::from(w));
        let counts = &mut self.counts[row as usize].1;
        counts.wall_samples = counts.wall_samples.saturating_add(w);
        counts.wall_ns += ns;
        counts.cpu_ns = counts.cpu_ns.saturating_add(cpu_ns);
    }

    /// Number of distinct rows in the current window.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// Closes the window: returns its [`Profile`] (frames and stacks compacted to those used)
    /// and starts an empty one. Routes of samples with a span are taken from the span table's
    /// record of the local root when it has one (instrumentations may set `http.route` late).
    ///
    /// The window's request counts are taken out of `spans` too (ADR 0032).
    ///
    /// The span records the window keeps are taken out of `spans` (ADR 0010 says which): the
    /// profile holds them in the buffer they came in, filtered in place, not copied, and
    /// `spans.spans` is left empty with a new buffer of the same capacity, untouched until
    /// filled, for [`crate::SpanTable::recycle`]. A busy window has tens of thousands of span
    /// records, and the close is where the process's memory peaks.
    pub fn finish(
        &mut self,
        resource: Resource,
        start_unix_ns: u64,
        duration_ns: u64,
        period_ns: u64,
        spans: &mut WindowSpans,
    ) -> Profile {
        let mut profile = Profile::empty(resource, start_unix_ns, duration_ns, period_ns);
        profile.requests = Some(std::mem::take(&mut spans.requests));
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
        self.rows.clear();
        self.window += 1;
        // Sorted and drained in place: the rows keep their buffer for the next window (the
        // sampling path does not allocate once warm), and are not copied at the close, where
        // a busy window's tens of thousands of rows would otherwise be held twice.
        self.counts
            .sort_unstable_by_key(|(s, _)| (s.stack, s.span, s.route, s.thread, s.task));
        // The profile holds its samples until the export: sized for them, not doubled.
        profile.samples.reserve_exact(self.counts.len());
        for (s, c) in self.counts.drain(..) {
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
                cpu_samples: 0,
                wall_samples: u64::from(c.wall_samples),
                cpu_ns: c.cpu_ns,
                wall_ns: c.wall_ns,
            });
        }
        drop(late_routes);
        apportion_cpu_samples(&mut profile.samples, period_ns);
        let carried = std::mem::take(&mut self.carried_spans);
        let window = (start_unix_ns, start_unix_ns.saturating_add(duration_ns));
        let fresh = Vec::with_capacity(spans.spans.capacity());
        let all = std::mem::replace(&mut spans.spans, fresh);
        let kept = spans_to_keep(all, carried, &profile.samples, window);
        profile.spans = kept.kept;
        self.carried_spans = kept.carry;
        let mut stats = std::mem::take(&mut self.stats);
        stats.unsampled_spans += kept.left_out + spans.left_out;
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

/// Spans that ended this close to a window's end may still have samples on their way (a
/// native walker's ring is drained at the next tick, up to 50 intervals later under a budget).
const CARRY_SPANS_ENDED_WITHIN_NS: u64 = 1_000_000_000;

/// What [`spans_to_keep`] decided for one window.
struct KeptSpans {
    kept: Vec<SpanRecord>,
    /// Left out for good.
    left_out: u64,
    /// Left out of this window but offered to the next one.
    carry: Vec<SpanRecord>,
}

/// The span records a window keeps (ADR 0010):
/// - the spans its samples carry, as their span or their local root;
/// - their ancestors, so that a span's report with its child spans, and the route of its local
///   root, still resolve;
/// - spans that started before the window did: their earlier samples are in earlier windows,
///   and this window may hold the only record with their end.
///
/// The window's records are `all` plus the ones the last window carried over. Of the rest,
/// open spans come again with the next window; ended ones that ended within
/// [`CARRY_SPANS_ENDED_WITHIN_NS`] of the window's end are carried to the next window once (a
/// sample drained after the close still finds its span there); the others, and carried ones
/// that are still unsampled, are left out and counted.
///
/// `all` is filtered in place and becomes the kept records, its slack released: a copy would
/// hold the window's records twice at the close.
///
/// A span with no sample has nothing to show in a profile; keeping every span would make the
/// export's cost follow the request rate (thousands of spans a second) instead of what was
/// sampled.
/// Sets each row's `cpu_samples`: its CPU time in sampling periods, whole numbers that add up
/// to the window's CPU time in periods, rounded (largest remainders get the odd periods). The
/// truth is `cpu_ns`; the counts are for the readers that work in samples (summaries, the
/// OTLP CPU profile's `samples` value, significance tests), so that a thread that ran 20% of
/// the time counts 20 of its 100 ticks, not every tick on which it ran at all.
fn apportion_cpu_samples(samples: &mut [ProfileSample], period_ns: u64) {
    let period = u128::from(period_ns.max(1));
    let total: u128 = samples.iter().map(|s| u128::from(s.cpu_ns)).sum();
    let target = (total + period / 2) / period;
    let mut given: u128 = 0;
    let mut remainders: Vec<(u64, usize)> = Vec::new();
    for (i, s) in samples.iter_mut().enumerate() {
        let ns = u128::from(s.cpu_ns);
        s.cpu_samples = (ns / period) as u64;
        given += ns / period;
        let r = (ns % period) as u64;
        if r > 0 {
            remainders.push((r, i));
        }
    }
    let mut left = target.saturating_sub(given) as usize;
    if left == 0 {
        return;
    }
    // Largest remainder first; ties by position, so the result does not depend on the sort.
    remainders.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in &remainders {
        if left == 0 {
            break;
        }
        samples[i].cpu_samples += 1;
        left -= 1;
    }
}

fn spans_to_keep(
    mut all: Vec<SpanRecord>,
    carried: Vec<SpanRecord>,
    samples: &[ProfileSample],
    (window_start_ns, window_end_ns): (u64, u64),
) -> KeptSpans {
    // The records (of `all`, then of `carried`) by span id: 16 bytes a record, sorted, where
    // a map of parents and a set of kept ids took about 40. A record is kept when a sample
    // names its span, or a kept record names it as its parent.
    let n_all = all.len();
    let keep = {
        let mut by_id: Vec<(SpanId, u32)> = all
            .iter()
            .chain(&carried)
            .enumerate()
            .map(|(i, r)| (r.span_id, i as u32))
            .collect();
        by_id.sort_unstable();
        let mut keep = vec![false; by_id.len()];
        let mut todo: Vec<u32> = Vec::new();
        let mark = |id: SpanId, keep: &mut [bool], todo: &mut Vec<u32>| {
            let from = by_id.partition_point(|&(s, _)| s < id);
            for &(_, i) in by_id[from..].iter().take_while(|&&(s, _)| s == id) {
                if !std::mem::replace(&mut keep[i as usize], true) {
                    todo.push(i);
                }
            }
        };
        for c in samples.iter().filter_map(|s| s.span) {
            mark(c.span_id, &mut keep, &mut todo);
            mark(c.local_root_span_id, &mut keep, &mut todo);
        }
        while let Some(i) = todo.pop() {
            let i = i as usize;
            let r = if i < n_all {
                &all[i]
            } else {
                &carried[i - n_all]
            };
            if let Some(parent) = r.parent_span_id {
                mark(parent, &mut keep, &mut todo);
            }
        }
        keep
    };
    let carry_from = window_end_ns.saturating_sub(CARRY_SPANS_ENDED_WITHIN_NS);
    let mut left_out = 0;
    let mut carry = Vec::new();
    let mut kept = keep.iter().copied();
    all.retain(|r| match r.end_unix_ns {
        _ if kept.next() == Some(true) || r.start_unix_ns < window_start_ns => true,
        // Still open: offered again by the span table with the next window.
        None => false,
        Some(end) if end >= carry_from => {
            carry.push(r.clone());
            false
        }
        Some(_) => {
            left_out += 1;
            false
        }
    });
    for (r, kept) in carried.into_iter().zip(kept) {
        if kept {
            all.push(r);
        } else {
            left_out += 1;
        }
    }
    // The profile holds these until it is exported: the slack goes back now.
    all.shrink_to_fit();
    KeptSpans {
        kept: all,
        left_out,
        carry,
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
    fn a_row_takes_80_bytes() {
        // The row buffer is kept from window to window, sized for the busiest one.
        assert!(std::mem::size_of::<(Sample, Counts)>() <= 80);
    }

    /// An aggregator and a sample of one stack, background, on thread "w".
    fn one_stack() -> (WindowAggregator, Sample) {
        let mut a = WindowAggregator::default();
        let st = a.intern_stack(&[RawFrame { id: 1, line: 1 }], false);
        let t = a.intern_thread_name("w");
        let s = Sample {
            stack: st,
            span: None,
            route: LabelValues::BACKGROUND,
            thread: t,
            task: None,
        };
        (a, s)
    }

    /// Closes the window at a 10 ns period.
    fn close_at_period_10(mut a: WindowAggregator) -> Profile {
        a.finish(
            Resource::default(),
            0,
            1,
            10,
            &mut SpanTable::default().drain_window(),
        )
    }

    #[test]
    fn sample_counts_saturate() {
        let (mut a, s) = one_stack();
        a.add(s, 10 * u64::from(u32::MAX - 1), 10, u32::MAX - 1);
        a.add(s, 50, 10, 5);
        let p = close_at_period_10(a);
        // CPU is counted in nanoseconds (64-bit), so its periods do not saturate.
        assert_eq!(p.samples[0].cpu_samples, u64::from(u32::MAX) + 4);
        assert_eq!(p.samples[0].wall_samples, u64::from(u32::MAX));
    }

    #[test]
    fn a_weight_0_sample_adds_cpu_and_no_wall_time() {
        let (mut a, s) = one_stack();
        a.add(s, 0, 10, 1);
        a.add(s, 7, 10, 0);
        let p = close_at_period_10(a);
        let row = &p.samples[0];
        assert_eq!((row.wall_samples, row.wall_ns, row.cpu_ns), (1, 10, 7));
    }

    #[test]
    fn cpu_samples_are_the_windows_cpu_in_periods_shared_by_largest_remainders() {
        let mut a = WindowAggregator::default();
        let t = a.intern_thread_name("w");
        // Three rows at a 10 ms period: 4 ms, 4 ms and 17 ms of CPU (25 ms: 2.5 periods,
        // rounded to 3). Each gets its whole periods (0, 0, 1); the odd ones go to the
        // largest remainders: 17 ms (7 ms over) first, then the first 4 ms row.
        for (id, cpu_ms) in [(1, 4), (2, 4), (3, 17)] {
            let st = a.intern_stack(&[RawFrame { id, line: 1 }], false);
            let s = Sample {
                stack: st,
                span: None,
                route: LabelValues::BACKGROUND,
                thread: t,
                task: None,
            };
            a.add(s, cpu_ms * 1_000_000, 10_000_000, 1);
        }
        let p = a.finish(
            Resource::default(),
            0,
            1,
            10_000_000,
            &mut SpanTable::default().drain_window(),
        );
        let mut by_cpu: Vec<(u64, u64)> = p
            .samples
            .iter()
            .map(|s| (s.cpu_ns, s.cpu_samples))
            .collect();
        by_cpu.sort_unstable();
        assert_eq!(by_cpu.iter().map(|r| r.1).sum::<u64>(), 3);
        assert_eq!(by_cpu[2], (17_000_000, 2));
        assert_eq!(by_cpu[0].1 + by_cpu[1].1, 1);
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
                if span.is_some() { 10 } else { 0 },
                10,
                1,
            );
        }
        let table = SpanTable::default();
        table.intern_route("/checkout");
        let p = a.finish(Resource::default(), 0, 1, 10, &mut table.drain_window());
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

    /// A window keeps the records of the spans its samples carry, their ancestors, and spans
    /// that started before it. A span that ended just before the close is offered to the next
    /// window too (its sample may be drained after the close); the rest are left out and
    /// counted.
    #[test]
    fn a_window_keeps_the_spans_its_samples_need_and_counts_the_rest() {
        use crate::{ActiveSpan, SpanId, SpanStart, TraceId};
        const S: u64 = 1_000_000_000;
        let id = |n| SpanId::from_u64(n).unwrap();
        let trace_id = TraceId::from_u128(9).unwrap();
        let table = SpanTable::default();
        let start = |span: u64, parent: Option<u64>, at: u64| {
            table.start(SpanStart {
                trace_id,
                span_id: id(span),
                parent_span_id: parent.map(id),
                parent_is_remote: false,
                name: "op",
                route: None,
                start_unix_ns: at,
            })
        };
        let mut a = WindowAggregator::default();
        let st = a.intern_stack(&[RawFrame { id: 1, line: 1 }], false);
        let thread = a.intern_thread_name("w");
        let sample_in = |a: &mut WindowAggregator, span: ActiveSpan| {
            let sample = Sample {
                stack: st,
                span: Some(span.ctx),
                route: span.route,
                thread,
                task: None,
            };
            a.add(sample, 10, 10, 1);
        };
        let kept_ids = |p: &Profile| {
            let mut v: Vec<u64> = p.spans.iter().map(|r| r.span_id.to_u64()).collect();
            v.sort_unstable();
            v
        };

        // Window 1, [10 s, 20 s): root 1 -> 2 -> 3 (sampled); 4 a sibling of 2 with no sample;
        // 5 a long span that started before the window; 6 unrelated, no sample; 7 and 8 end
        // just before the close with no sample yet; 9 stays open, unsampled.
        start(1, None, 11 * S);
        start(2, Some(1), 12 * S);
        let three = start(3, Some(2), 13 * S);
        start(4, Some(1), 14 * S);
        start(5, None, 5 * S);
        start(6, None, 15 * S);
        start(7, None, 16 * S);
        let eight = start(8, None, 16 * S);
        start(9, None, 16 * S);
        for s in [3, 4, 2, 6, 1, 5] {
            table.end(id(s), 18 * S, None);
        }
        for s in [7, 8] {
            table.end(id(s), 20 * S - 1_000, None);
        }
        sample_in(&mut a, three);
        let p = a.finish(
            Resource::default(),
            10 * S,
            10 * S,
            10,
            &mut table.drain_window(),
        );
        assert_eq!(kept_ids(&p), [1, 2, 3, 5]);
        assert_eq!(
            p.stats.unsampled_spans, 2,
            "4 and 6; 9 is open, 7 and 8 carried"
        );

        // Window 2: the first sample drained carries 8. 7 never gets one. 9, still open,
        // started before this window: kept, as every span that crosses into a window is.
        sample_in(&mut a, eight);
        let p = a.finish(
            Resource::default(),
            20 * S,
            10 * S,
            10,
            &mut table.drain_window(),
        );
        assert_eq!(kept_ids(&p), [8, 9]);
        assert_eq!(p.stats.unsampled_spans, 1, "7");
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
                3,
                1,
                3,
            );
        }
        let p = a.finish(
            Resource::default(),
            0,
            1,
            1,
            &mut SpanTable::default().drain_window(),
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
            a.add(s, 1, 1, 1);
        }
        a.resolve_frames(&mut sym);
        let p = a.finish(
            Resource::default(),
            0,
            1,
            1,
            &mut SpanTable::default().drain_window(),
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
            a.finish(Resource::default(), 0, 1, 1, &mut table.drain_window())
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

    /// An aggregator with limits small enough for the fuzzing below to overflow them: 40 rows,
    /// 30 stacks, `thread_names` of its 8 thread names, 4 of its 5 task names.
    fn fuzzed(thread_names: usize) -> WindowAggregator {
        WindowAggregator::new(AggregatorLimits {
            max_rows: 40,
            max_stacks: 30,
            max_thread_names: thread_names,
            max_task_names: 4,
        })
    }

    fn fuzz_ctx(s: u64) -> SpanContext {
        SpanContext {
            trace_id: crate::TraceId::from_u128(7).unwrap(),
            span_id: crate::SpanId::from_u64(s).unwrap(),
            local_root_span_id: crate::SpanId::from_u64(1).unwrap(),
        }
    }

    fn fuzz_names() -> Vec<String> {
        (0..8).map(|i| format!("worker-{i}")).collect()
    }

    type FuzzRow = (
        Vec<Frame>,
        bool,
        (Option<SpanContext>, Arc<str>, Arc<str>, Option<Arc<str>>),
        (u64, u64, u64, u64),
    );

    /// A window's rows, whatever their order: frames, truncation, labels and counts.
    fn fuzz_rows(p: &Profile) -> Vec<FuzzRow> {
        let mut v: Vec<_> = p
            .samples
            .iter()
            .map(|s| {
                let frames: Vec<_> = p.stack_frames(s.stack).cloned().collect();
                let truncated = p.stacks[s.stack as usize].truncated;
                let labels = (
                    s.span,
                    s.route.clone(),
                    s.thread_name.clone(),
                    s.task_name.clone(),
                );
                let counts = (s.cpu_samples, s.wall_samples, s.cpu_ns, s.wall_ns);
                (frames, truncated, labels, counts)
            })
            .collect();
        v.sort();
        v
    }

    /// Closes both windows and checks that they hold the same rows and stats; returns `fast`'s.
    fn close_both_the_same(
        fast: &mut WindowAggregator,
        slow: &mut WindowAggregator,
        spans: &SpanTable,
    ) -> Profile {
        let mut window = spans.drain_window();
        let (a, b) = (
            fast.finish(Resource::default(), 0, 1, 10, &mut window.clone()),
            slow.finish(Resource::default(), 0, 1, 10, &mut window),
        );
        assert_eq!(fuzz_rows(&a), fuzz_rows(&b));
        assert_eq!(format!("{:?}", a.stats), format!("{:?}", b.stats));
        a
    }

    /// `add_raw` is only a shortcut: over ticks whose stacks, names, spans and routes change
    /// at random (with reordered walks, overflowing name tables, the row cap and truncated
    /// stacks), it gives the windows that interning and `add` give.
    #[test]
    fn add_raw_gives_the_windows_that_intern_and_add_give() {
        let (mut fast, mut slow) = (fuzzed(5), fuzzed(5));
        let mut rng = crate::rng::XorShift::new(0x2545_f491_4f6c_dd1d);
        let mut rnd = |n: u64| rng.below(n);
        let spans = SpanTable::default();
        let ctx = fuzz_ctx;
        let names = fuzz_names();
        for _window in 0..6 {
            for _tick in 0..50 {
                let threads = 3 + rnd(6) as usize;
                for slot in 0..threads {
                    // Mostly the same as last tick at this slot, sometimes not.
                    let t = if rnd(10) == 0 { rnd(8) } else { slot as u64 };
                    let depth = 1 + (t + rnd(2)) as usize;
                    let frames: Vec<RawFrame> = (0..depth)
                        .map(|d| RawFrame {
                            id: d as u64 + t * rnd(2),
                            line: 1,
                        })
                        .collect();
                    let task = ["a", "b", "c", "d", "e"][rnd(5) as usize];
                    let s = RawSample {
                        key: crate::ExecutionKey::thread(t),
                        frames: &frames,
                        truncated: rnd(7) == 0,
                        cpu_ns: rnd(3) * 7,
                        thread_name: &names[t as usize],
                        task_name: (rnd(4) == 0).then_some(task),
                        span: crate::SpanSource::Unknown,
                        weight: 1 + rnd(2) as u32,
                    };
                    let span = (rnd(3) > 0).then(|| ctx(1 + rnd(3)));
                    let route = LabelId(rnd(3) as u32);
                    fast.add_raw(slot, &s, span, route, 10);
                    let sample = Sample {
                        stack: slow.intern_stack(s.frames, s.truncated),
                        span,
                        route,
                        thread: slow.intern_thread_name(s.thread_name),
                        task: s.task_name.map(|t| slow.intern_task_name(t)),
                    };
                    slow.add(sample, s.cpu_ns, 10, s.weight);
                }
                fast.resolve_frames(&mut sym);
                slow.resolve_frames(&mut sym);
            }
            let a = close_both_the_same(&mut fast, &mut slow, &spans);
            assert!(a.stats.dropped_samples > 0 || a.samples.len() < 40);
        }
    }

    #[test]
    fn what_a_repeat_reads_of_a_position_is_one_cache_line() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<Recent>(), 64);
        let end = |at: usize, size: usize| at + size;
        assert!(end(offset_of!(Recent, interning), size_of::<u64>()) <= 64);
        assert!(
            end(
                offset_of!(Recent, last),
                size_of::<Option<(ExecutionKey, u64)>>()
            ) <= 64
        );
        assert!(end(offset_of!(Recent, row), size_of::<Option<RowAt>>()) <= 64);
    }

    /// `repeat_raw` is only a shortcut too: a walker that repeats every sample it may (one the
    /// same as the key's last with a wall weight, no CPU) and hands the whole sample when
    /// refused gets the windows of one that hands every sample to `add_raw`; over walks whose
    /// threads change their stacks, names and spans, change places, drop out, get CPU-only
    /// samples between them, overflow the name table and the row cap, and tick at uneven
    /// intervals.
    #[test]
    fn repeat_raw_gives_the_windows_that_add_raw_gives() {
        let (mut fast, mut slow) = (fuzzed(7), fuzzed(7));
        let mut rng = crate::rng::XorShift::new(0x9e37_79b9_7f4a_7c15);
        let mut rnd = |n: u64| rng.below(n);
        let spans = SpanTable::default();
        let ctx = fuzz_ctx;
        let names = fuzz_names();
        // Each thread's sample: (stack variant, truncated, name, task, span, route).
        type State = (u64, bool, usize, Option<&'static str>, Option<u64>, u32);
        let mut state: Vec<State> = (0..8)
            .map(|t| (t, false, t as usize, None, None, 0))
            .collect();
        // What each thread last handed with a wall weight.
        let mut last: Vec<Option<State>> = vec![None; 8];
        let (mut repeated, mut refused, mut dropped) = (0u32, 0u32, 0u64);
        for _window in 0..6 {
            for _tick in 0..50 {
                fast.begin_walk();
                slow.begin_walk();
                let interval = 5 + rnd(11);
                let mut order: Vec<u64> = (0..8).collect();
                if rnd(10) == 0 {
                    order.swap(rnd(8) as usize, rnd(8) as usize);
                }
                if rnd(10) == 0 {
                    order.remove(rnd(8) as usize);
                }
                let mut slot = 0;
                for &t in &order {
                    let st = &mut state[t as usize];
                    let ran = rnd(10) == 0;
                    if ran {
                        *st = (
                            rnd(4),
                            rnd(7) == 0,
                            if rnd(3) == 0 {
                                rnd(8) as usize
                            } else {
                                t as usize
                            },
                            (rnd(4) == 0).then_some(["a", "b", "c", "d", "e"][rnd(5) as usize]),
                            (rnd(2) == 0).then(|| 1 + rnd(3)),
                            rnd(3) as u32,
                        );
                    }
                    let st = *st;
                    let frames: Vec<RawFrame> = (0..=st.0)
                        .map(|d| RawFrame { id: d + t, line: 1 })
                        .collect();
                    let weight = 1 + rnd(2) as u32;
                    let s = RawSample {
                        key: crate::ExecutionKey::thread(t),
                        frames: &frames,
                        truncated: st.1,
                        cpu_ns: if ran { 1 + rnd(9) } else { 0 },
                        thread_name: &names[st.2],
                        task_name: st.3,
                        span: crate::SpanSource::Unknown,
                        weight,
                    };
                    let span = st.4.map(ctx);
                    let route = LabelId(st.5);
                    slow.add_raw(slot, &s, span, route, interval);
                    if !ran && last[t as usize] == Some(st) {
                        if fast.repeat_raw(slot, s.key, weight, interval) {
                            repeated += 1;
                        } else {
                            refused += 1;
                            fast.add_raw(slot, &s, span, route, interval);
                        }
                    } else {
                        fast.add_raw(slot, &s, span, route, interval);
                    }
                    last[t as usize] = Some(st);
                    slot += 1;
                    // Now and then a CPU-only sample of the same thread's last running stack.
                    if rnd(50) == 0 {
                        let other = [RawFrame { id: 99, line: 1 }];
                        let c = RawSample::new(s.key, &other, s.thread_name)
                            .with_cpu_ns(5)
                            .with_weight(0);
                        slow.add_raw(slot, &c, span, route, interval);
                        fast.add_raw(slot, &c, span, route, interval);
                        slot += 1;
                    }
                }
                fast.resolve_frames(&mut sym);
                slow.resolve_frames(&mut sym);
            }
            let a = close_both_the_same(&mut fast, &mut slow, &spans);
            dropped += a.stats.dropped_samples;
        }
        // Both ways were taken: about half the unchanged samples were repeated, the rest
        // refused (moved slots, window closes, overflowed names, the row cap), and the cap
        // dropped samples.
        assert!(
            repeated > 500 && refused > 50 && dropped > 0,
            "{repeated} repeated, {refused} refused, {dropped} dropped"
        );
    }
}
