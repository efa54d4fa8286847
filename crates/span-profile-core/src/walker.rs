//! The stack-walker backend trait: how a runtime's stacks reach the sampler.

use crate::{ActiveSpan, ActiveSpanRegistry, ExecutionKey, Frame, RawFrame};

/// One thread's or task's stack, as a walker hands it to the sampler.
///
/// Built with [`RawSample::new`] and the `with_*` setters; the fields stay public to read.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RawSample<'a> {
    /// Whose stack this is: the thread (or task) the sample was taken of.
    pub key: ExecutionKey,
    /// Frames, **leaf first**.
    pub frames: &'a [RawFrame],
    /// The walker stopped at its depth cap.
    pub truncated: bool,
    /// CPU time this sample stands for, in nanoseconds: what its thread used since the
    /// thread's previous sample (0 for a thread that only waited). It is not multiplied by
    /// `weight`: a thread sampled less often has used more since its last sample.
    pub cpu_ns: u64,
    /// Thread name, as the runtime knows it.
    pub thread_name: &'a str,
    /// Task name for a task sample.
    pub task_name: Option<&'a str>,
    /// What the walker knows of the span current on this stack.
    pub span: SpanSource,
    /// How many samples this one stands for (1, or more when the walker sampled a subset of
    /// threads and corrects the weight). 0: no wall sample, only `cpu_ns` charged to this
    /// stack (the CPU a thread used before a sample that found it off CPU goes to the stack
    /// it was last seen running in, ADR 0019). Such a sample that finds no row still counts
    /// as one dropped sample.
    pub weight: u32,
}

impl<'a> RawSample<'a> {
    /// One sample of `key`'s stack `frames` (leaf first), on the thread named `thread_name`:
    /// whole (not truncated), no CPU time, no task, no span known
    /// ([`SpanSource::Unknown`]), weight 1. Neither it nor the setters allocate.
    ///
    /// ```
    /// use span_profile_core::{ExecutionKey, RawFrame, RawSample, SpanSource};
    ///
    /// let frames = [RawFrame { id: 1, line: 10 }];
    /// let s = RawSample::new(ExecutionKey::thread(1), &frames, "main")
    ///     .with_cpu_ns(10_000_000)
    ///     .with_span(SpanSource::Resolved(None));
    /// assert_eq!((s.weight, s.truncated, s.task_name), (1, false, None));
    /// ```
    #[inline]
    #[must_use]
    pub const fn new(key: ExecutionKey, frames: &'a [RawFrame], thread_name: &'a str) -> Self {
        Self {
            key,
            frames,
            truncated: false,
            cpu_ns: 0,
            thread_name,
            task_name: None,
            span: SpanSource::Unknown,
            weight: 1,
        }
    }

    /// Sets [`RawSample::truncated`].
    #[inline]
    #[must_use]
    pub const fn with_truncated(self, truncated: bool) -> Self {
        Self { truncated, ..self }
    }

    /// Sets [`RawSample::cpu_ns`].
    #[inline]
    #[must_use]
    pub const fn with_cpu_ns(self, cpu_ns: u64) -> Self {
        Self { cpu_ns, ..self }
    }

    /// Sets [`RawSample::task_name`].
    #[inline]
    #[must_use]
    pub const fn with_task_name(self, task_name: Option<&'a str>) -> Self {
        Self { task_name, ..self }
    }

    /// Sets [`RawSample::span`].
    #[inline]
    #[must_use]
    pub const fn with_span(self, span: SpanSource) -> Self {
        Self { span, ..self }
    }

    /// Sets [`RawSample::weight`].
    #[inline]
    #[must_use]
    pub const fn with_weight(self, weight: u32) -> Self {
        Self { weight, ..self }
    }
}

/// What a walker knows, per sample, of the span current on the stack: the one way a walker
/// attributes a sample (ADR 0021). The sampler takes it as it is; it looks nothing up.
///
/// A walker whose spans are entered by hooks in an
/// [`ActiveSpanRegistry`](crate::ActiveSpanRegistry) asks the registry itself, at the moment
/// that is right for it (a signal handler at the sample instant, a walker on the sampling
/// thread when it reports the stack):
///
/// ```
/// use span_profile_core::{ActiveSpanRegistry, ExecutionKey, SpanSource};
/// let registry = ActiveSpanRegistry::with_capacity(64);
/// let key = ExecutionKey::thread(7);
/// assert_eq!(SpanSource::current_in(&registry, key), SpanSource::Resolved(None));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanSource {
    /// The walker found it (the context running on the thread, or the registry entry of the
    /// sample's thread or task): `Some` is the span, with its route; `None` means that no
    /// span was current.
    Resolved(Option<ActiveSpan>),
    /// The walker cannot tell: the sample carries no span (route `background`).
    Unknown,
}

impl SpanSource {
    /// The span that the hooks entered for `key` in `registry`, read now: the registry as a
    /// helper a walker calls, never a stage of the sampler.
    #[inline]
    pub fn current_in(registry: &ActiveSpanRegistry, key: ExecutionKey) -> Self {
        SpanSource::Resolved(registry.current(key))
    }
}

/// Why a walker could not produce a sample. Each kind is counted, never logged on the sampling
/// path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WalkError {
    /// A read of the target's memory failed or returned data that failed validation.
    InvalidRead,
    /// The thread or task disappeared during the walk.
    Vanished,
    /// A per-tick cap (threads, tasks) was reached; the rest were skipped.
    Skipped,
    /// The thread's span or task changed while its stack was copied: the sample was dropped
    /// rather than attributed to a span it may not belong to.
    Torn,
}

/// Receives the stacks of one tick. Implemented by the sampler; walkers only call it.
pub trait StackSink {
    /// Records one stack. A walker calls it once per thread or task it sampled in the tick,
    /// plus any CPU-only samples (`weight` 0, ADR 0019); a signal-driven walker may report
    /// several samples of one key in a tick, each taken at its own instant (ADR 0005).
    fn sample(&mut self, sample: &RawSample<'_>);
    /// Counts again, standing for `weight` samples and no CPU time, the sample with a wall
    /// weight that the walker handed for `key` in the previous tick, as the next sample of this
    /// tick. The walker calls it only when the sample it would hand now is the same (frames,
    /// names, span), as it knows of a thread that has not run since (ADR 0035); it saves
    /// building and comparing the sample again. Returns `false` when the sink keeps no such
    /// sample (the default, which keeps nothing): the walker then hands the whole sample to
    /// [`StackSink::sample`].
    fn repeat(&mut self, key: ExecutionKey, weight: u32) -> bool {
        let _ = (key, weight);
        false
    }
    /// Counts a failure (one per thread or task that could not be walked).
    fn error(&mut self, error: WalkError);
}

/// A backend that walks the stacks of the threads (and tasks) of one runtime.
///
/// # Contract on the sampling path
///
/// [`StackWalker::walk`] runs on the profiler's sampling thread once per tick, while the
/// application runs. It **may**: read memory it has validated, reuse buffers it allocated
/// during warm-up, keep per-thread caches. It **must not**: block on a lock the application
/// may hold (try and count instead), allocate after warm-up in the steady state, log or print,
/// panic, or take time that grows without bound (cap threads, depth and string lengths, and
/// report what was cut through [`StackSink::error`] and [`RawSample::truncated`]).
///
/// [`StackWalker::symbolize`] is called after each `walk` returns, once per [`RawFrame`] never
/// seen before, and may allocate. A raw frame must mean the same [`Frame`] for the life of the
/// walker: the profiler caches the answer across windows.
///
/// ```
/// use std::sync::Arc;
/// use span_profile_core::{
///     ActiveSpanRegistry, ExecutionKey, Frame, RawFrame, RawSample, SpanSource, StackSink,
///     StackWalker,
/// };
///
/// /// Reports one fixed stack for thread 1, with the span its hooks entered.
/// struct OneStack {
///     registry: Arc<ActiveSpanRegistry>,
/// }
/// impl StackWalker for OneStack {
///     fn walk(&mut self, sink: &mut dyn StackSink) {
///         let frames = [RawFrame { id: 1, line: 10 }, RawFrame { id: 2, line: 20 }];
///         let key = ExecutionKey::thread(1);
///         sink.sample(
///             &RawSample::new(key, &frames, "main")
///                 .with_cpu_ns(10_000_000)
///                 // The span the hooks entered for thread 1, if any.
///                 .with_span(SpanSource::current_in(&self.registry, key)),
///         );
///     }
///     fn symbolize(&mut self, raw: RawFrame) -> Frame {
///         let name = if raw.id == 1 { "leaf" } else { "main" };
///         Frame::new(name, "app.py", raw.line)
///     }
/// }
/// ```
pub trait StackWalker: Send + 'static {
    /// Walks every thread (and task) once, reporting each stack to `sink`.
    fn walk(&mut self, sink: &mut dyn StackSink);

    /// Resolves a raw frame this walker produced.
    fn symbolize(&mut self, raw: RawFrame) -> Frame;

    /// Called on the sampling thread just before the first `walk`, for per-thread setup.
    fn on_start(&mut self) {}
}
