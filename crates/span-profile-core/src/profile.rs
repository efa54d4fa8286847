//! One closed window of samples: what exporters receive and queries read.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Frame, Resource, SpanContext, SpanId, Stack, TraceId};

/// One aggregated row of a window: all samples that shared a stack, a span and labels.
///
/// Built with [`ProfileSample::new`] and the `with_*` setters; the fields stay public.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProfileSample {
    /// Index into [`Profile::stacks`].
    pub stack: u32,
    /// The span that was current, or `None` for background work.
    pub span: Option<SpanContext>,
    /// `http.route` of the local root span, [`crate::labels::BACKGROUND_ROUTE`] without a span.
    pub route: Arc<str>,
    /// Name of the sampled thread.
    pub thread_name: Arc<str>,
    /// Name of the sampled task, for samples of a task (low-cardinality: default names folded).
    pub task_name: Option<Arc<str>>,
    /// CPU time in sampling periods: `cpu_ns / period_ns`, whole numbers the window's rows
    /// share by largest remainders (ADR 0019).
    pub cpu_samples: u64,
    /// Number of samples taken, on or off CPU.
    pub wall_samples: u64,
    /// CPU time these samples stand for, in nanoseconds: what their threads used (ADR 0019).
    pub cpu_ns: u64,
    /// Wall time these samples stand for, in nanoseconds.
    pub wall_ns: u64,
}

impl ProfileSample {
    /// A row of stack `stack` (an index into [`Profile::stacks`]) with route `route`, on the
    /// thread named `thread_name`: no span, no task, all counts zero.
    ///
    /// ```
    /// use span_profile_core::ProfileSample;
    ///
    /// let s = ProfileSample::new(0, "background".into(), "MainThread".into())
    ///     .with_cpu(3, 30_000_000)
    ///     .with_wall(5, 50_000_000);
    /// assert_eq!((s.span, s.cpu_samples, s.wall_ns), (None, 3, 50_000_000));
    /// ```
    #[must_use]
    pub fn new(stack: u32, route: Arc<str>, thread_name: Arc<str>) -> Self {
        Self {
            stack,
            span: None,
            route,
            thread_name,
            task_name: None,
            cpu_samples: 0,
            wall_samples: 0,
            cpu_ns: 0,
            wall_ns: 0,
        }
    }

    /// Sets [`ProfileSample::span`].
    #[must_use]
    pub fn with_span(self, span: Option<SpanContext>) -> Self {
        Self { span, ..self }
    }

    /// Sets [`ProfileSample::task_name`].
    #[must_use]
    pub fn with_task_name(self, task_name: Option<Arc<str>>) -> Self {
        Self { task_name, ..self }
    }

    /// Sets [`ProfileSample::cpu_samples`] and [`ProfileSample::cpu_ns`].
    #[must_use]
    pub fn with_cpu(self, cpu_samples: u64, cpu_ns: u64) -> Self {
        Self {
            cpu_samples,
            cpu_ns,
            ..self
        }
    }

    /// Sets [`ProfileSample::wall_samples`] and [`ProfileSample::wall_ns`].
    #[must_use]
    pub fn with_wall(self, wall_samples: u64, wall_ns: u64) -> Self {
        Self {
            wall_samples,
            wall_ns,
            ..self
        }
    }
}

/// How many requests of one route ended in a window: every local-root span that carried the
/// route (`http.route`, at its start or its end) and ended, whether or not a sample caught it
/// (ADR 0032). CPU per request divides a route's CPU by these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRequests {
    /// The route.
    pub route: Arc<str>,
    /// Local-root spans of the route that ended in the window.
    pub requests: u64,
}

/// A span's metadata, recorded by the span hooks: the span table of a window.
///
/// Built with [`SpanRecord::new`] and the `with_*` setters; the fields stay public.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SpanRecord {
    /// The trace.
    pub trace_id: TraceId,
    /// The span.
    pub span_id: SpanId,
    /// Its parent, when the parent is in this process.
    pub parent_span_id: Option<SpanId>,
    /// Its local root (itself for a local root).
    pub local_root_span_id: SpanId,
    /// The span's name (shared by the records of one name).
    pub name: Arc<str>,
    /// `http.route`, if the span has one.
    pub route: Option<Arc<str>>,
    /// Start, Unix nanoseconds.
    pub start_unix_ns: u64,
    /// End, Unix nanoseconds; `None` while the span is still open when the window closes.
    pub end_unix_ns: Option<u64>,
}

impl SpanRecord {
    /// The record of span `span_id` of trace `trace_id`, under local root
    /// `local_root_span_id` (itself for a local root), named `name`, started at
    /// `start_unix_ns`: no parent in this process, no route, still open.
    ///
    /// ```
    /// use span_profile_core::{SpanId, SpanRecord, TraceId};
    ///
    /// let root = SpanId::from_u64(1).unwrap();
    /// let trace = TraceId::from_u128(7).unwrap();
    /// let r = SpanRecord::new(trace, root, root, "GET /".into(), 1_000)
    ///     .with_route(Some("/".into()))
    ///     .with_end_unix_ns(Some(1_500));
    /// assert_eq!((r.parent_span_id, r.duration_ns()), (None, Some(500)));
    /// ```
    #[must_use]
    pub fn new(
        trace_id: TraceId,
        span_id: SpanId,
        local_root_span_id: SpanId,
        name: Arc<str>,
        start_unix_ns: u64,
    ) -> Self {
        Self {
            trace_id,
            span_id,
            parent_span_id: None,
            local_root_span_id,
            name,
            route: None,
            start_unix_ns,
            end_unix_ns: None,
        }
    }

    /// Sets [`SpanRecord::parent_span_id`].
    #[must_use]
    pub fn with_parent_span_id(self, parent_span_id: Option<SpanId>) -> Self {
        Self {
            parent_span_id,
            ..self
        }
    }

    /// Sets [`SpanRecord::route`].
    #[must_use]
    pub fn with_route(self, route: Option<Arc<str>>) -> Self {
        Self { route, ..self }
    }

    /// Sets [`SpanRecord::end_unix_ns`].
    #[must_use]
    pub fn with_end_unix_ns(self, end_unix_ns: Option<u64>) -> Self {
        Self {
            end_unix_ns,
            ..self
        }
    }

    /// Duration in nanoseconds, if the span has ended.
    pub fn duration_ns(&self) -> Option<u64> {
        self.end_unix_ns
            .map(|e| e.saturating_sub(self.start_unix_ns))
    }
}

/// What was lost or degraded in a window, and what the profiler cost. Every drop has a counter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct WindowStats {
    /// Sampler ticks in the window.
    pub ticks: u64,
    /// Ticks that were late by more than one interval (sampler starved or suspended).
    pub missed_ticks: u64,
    /// Samples the walker could not produce (a failed or invalid memory read, a vanished thread).
    pub walk_errors: u64,
    /// Stacks cut at the depth cap.
    pub truncated_stacks: u64,
    /// Threads or tasks not walked because a per-tick cap was reached.
    pub skipped_threads: u64,
    /// Samples dropped because the window's distinct-row cap was reached.
    pub dropped_samples: u64,
    /// Label values replaced by `_other` because their key's cardinality cap was reached.
    pub label_overflow: u64,
    /// Span records dropped because the span table's cap was reached.
    pub dropped_spans: u64,
    /// Span records left out of the window because no sample carries the span, a descendant
    /// of it, or (as their local root) a span under it (ADR 0010). Not a loss of samples: a
    /// span without samples has nothing to show.
    pub unsampled_spans: u64,
    /// Earlier windows dropped (export queue full), reported with the next window that gets out.
    pub dropped_windows: u64,
    /// Exports that failed since the previous window.
    pub export_errors: u64,
    /// CPU time of the profiler's own threads during the window, in nanoseconds.
    pub agent_cpu_ns: u64,
    /// Sampling rate actually achieved, in samples per second per thread, times 1000.
    pub effective_rate_millihz: u64,
    /// Samples dropped because the thread's span or task changed while its stack was being
    /// copied, so the two could disagree ([`crate::WalkError::Torn`]).
    pub torn_samples: u64,
    /// Span enters in the window that found the span registry full (those spans' samples
    /// carry no span).
    pub registry_full: u64,
    /// Span exits in the window for a span that was not entered on that thread or task.
    pub unmatched_exits: u64,
    /// Sampler reads of the registry that gave up because a hook kept rewriting the slot
    /// (the sample then carries no span).
    pub contended_reads: u64,
    /// Window accounting of the profiler's life up to this window (this one excluded; ADR
    /// 0027): windows made before it, and what became of them. Cumulative, not a delta:
    /// `windows_made == windows_delivered + windows_waiting + every windows_dropped_*`.
    pub windows_made: u64,
    /// Of those, windows delivered (2xx, or written to the store).
    pub windows_delivered: u64,
    /// Of those, windows waiting (export queue, memory or disk spool).
    pub windows_waiting: u64,
    /// Of those, windows dropped because the export queue was full.
    pub windows_dropped_queue_full: u64,
    /// Of those, windows dropped because the spool was full (or unwritable).
    pub windows_dropped_spool_full: u64,
    /// Of those, windows dropped because they grew too old to send.
    pub windows_dropped_expired: u64,
    /// Of those, windows the receiver refused (or the store failed to write).
    pub windows_dropped_rejected: u64,
    /// Of those, windows lost at shutdown.
    pub windows_dropped_at_shutdown: u64,
}

/// What a window is, as the window filters see it: its service, version, environment,
/// instance and time range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowInfo<'a> {
    /// `service.name` of the window's resource.
    pub service: &'a str,
    /// `service.version` of the window's resource.
    pub version: Option<&'a str>,
    /// `deployment.environment` of the window's resource.
    pub environment: Option<&'a str>,
    /// The instance label of the window's resource (`service.instance.id`, or the host).
    pub instance: Option<&'a str>,
    /// Window start, Unix nanoseconds.
    pub start_unix_ns: u64,
    /// Window length in nanoseconds.
    pub duration_ns: u64,
}

/// One window of aggregated samples. Frames and stacks are interned tables that samples index.
///
/// The sample types are `cpu` and `wall`, both in nanoseconds; the period is `1e9 / rate`.
/// Built with [`Profile::empty`]; the fields stay public.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Profile {
    /// The process's resource labels.
    pub resource: Resource,
    /// Window start, Unix nanoseconds.
    pub start_unix_ns: u64,
    /// Window length in nanoseconds.
    pub duration_ns: u64,
    /// Nominal sampling period in nanoseconds.
    pub period_ns: u64,
    /// Interned frames.
    pub frames: Vec<Frame>,
    /// Interned stacks, indexing `frames`.
    pub stacks: Vec<Stack>,
    /// Aggregated samples.
    pub samples: Vec<ProfileSample>,
    /// Spans that started, ended or were sampled in this window.
    pub spans: Vec<SpanRecord>,
    /// The requests that ended in this window, by route, sorted by route, each route once
    /// (ADR 0032). `None` when they were not counted: a window of a store written before
    /// requests were counted, or a foreign profile. Then only the local-root spans in
    /// [`Profile::spans`] tell of requests, and those are the requests a sample caught.
    #[serde(default)]
    pub requests: Option<Vec<RouteRequests>>,
    /// Drops, errors and the profiler's own cost.
    pub stats: WindowStats,
}

impl Profile {
    /// An empty window of `resource`, starting at `start_unix_ns` and `duration_ns` long,
    /// sampled every `period_ns`: no frames, stacks, samples or spans, requests not counted,
    /// zero stats.
    ///
    /// ```
    /// use span_profile_core::{Profile, Resource};
    ///
    /// let p = Profile::empty(Resource::default(), 1_000, 10_000_000_000, 10_000_000);
    /// assert_eq!((p.samples.len(), p.total_wall_samples()), (0, 0));
    /// ```
    #[must_use]
    pub fn empty(resource: Resource, start_unix_ns: u64, duration_ns: u64, period_ns: u64) -> Self {
        Self {
            resource,
            start_unix_ns,
            duration_ns,
            period_ns,
            frames: Vec::new(),
            stacks: Vec::new(),
            samples: Vec::new(),
            spans: Vec::new(),
            requests: None,
            stats: WindowStats::default(),
        }
    }

    /// The frames of a sample's stack, leaf first. Out-of-range indices are skipped.
    pub fn stack_frames(&self, stack: u32) -> impl Iterator<Item = &Frame> + '_ {
        self.stack_frame_indices(stack)
            .filter_map(|f| self.frames.get(f))
    }

    /// The indices into [`Profile::frames`] of a sample's stack, leaf first: the frames that
    /// [`Profile::stack_frames`] yields.
    pub(crate) fn stack_frame_indices(&self, stack: u32) -> impl Iterator<Item = usize> + '_ {
        let n = self.frames.len();
        self.stacks
            .get(stack as usize)
            .map(|s| s.frames.as_slice())
            .unwrap_or(&[])
            .iter()
            .map(|&f| f as usize)
            .filter(move |&f| f < n)
    }

    /// The window's service, version, environment, instance and time range, as filters see
    /// them.
    pub fn info(&self) -> WindowInfo<'_> {
        WindowInfo {
            service: &self.resource.service,
            version: self.resource.version.as_deref(),
            environment: self.resource.environment.as_deref(),
            instance: self.resource.instance.as_deref(),
            start_unix_ns: self.start_unix_ns,
            duration_ns: self.duration_ns,
        }
    }

    /// Total wall samples in the window.
    pub fn total_wall_samples(&self) -> u64 {
        self.samples.iter().map(|s| s.wall_samples).sum()
    }

    /// Total CPU samples in the window.
    pub fn total_cpu_samples(&self) -> u64 {
        self.samples.iter().map(|s| s.cpu_samples).sum()
    }
}
