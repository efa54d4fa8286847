//! # span-profile-core
//!
//! The types, traits and runtime of span-profile: a continuous profiler whose every sample
//! carries the OpenTelemetry trace and span that were active on the sampled thread or task.
//!
//! Core types:
//! - [`TraceId`], [`SpanId`], [`SpanContext`]: ids that parse and print lowercase hex.
//! - [`Frame`], [`Stack`], [`RawFrame`]: interned frames; walkers report raw frames.
//! - [`ExecutionKey`]: a thread, or a task on a thread.
//! - [`Resource`] and [`labels::LabelValues`]: resource labels, per-sample labels with caps.
//! - [`Profile`]: one closed window, what exporters receive and queries read; [`WindowInfo`]:
//!   what window filters look at (its service, version and time range).
//! - [`WindowMerger`] / [`merge_windows`]: windows rolled up into one (retention).
//!
//! Reading stored windows back, and the questions asked of them (reports, routes, spans,
//! diffs, window summaries), are `span_profile_export::store`.
//!
//! Traits: [`StackWalker`] (a runtime's stacks) and [`Exporter`] (where windows go).
//!
//! Feature flags:
//! - `otel`: the OpenTelemetry-Rust span processor and context guard.
//!
//! MSRV: the workspace's `rust-version` (1.95, the toolchain CI tests); raising it is a minor-version change.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod aggregate;
mod budget;
mod counters;
mod export;
pub mod failure;
mod frame;
mod id;
mod key;
pub mod labels;
mod merge;
mod mixhash;
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod otel;
mod profile;
mod registry;
mod rng;
mod rows;
mod runtime;
mod sampled;
mod spans;
mod time;
mod walker;

pub use aggregate::AggregatorLimits;
pub use export::{ExportError, Exporter, WindowCounts};
pub use frame::{Frame, FrameIndex, RawFrame, Stack};
pub use id::{ParseIdError, SpanContext, SpanId, TraceId};
pub use key::ExecutionKey;
pub use labels::Resource;
pub use merge::{merge_windows, MergeError, WindowMerger};
pub use profile::{Profile, ProfileSample, RouteRequests, SpanRecord, WindowInfo, WindowStats};
pub use registry::{ActiveSpan, ActiveSpanRegistry, AtomicActiveSpan, RegistryStats};
pub use runtime::{Profiler, ProfilerBuilder, ProfilerStats, StartError};
pub use spans::{SpanEnd, SpanScope, SpanStart, SpanTable, SpanTableLimits};
pub use walker::{RawSample, SpanSource, StackSink, StackWalker, WalkError};

/// Internals exposed for the workspace's other crates, fuzz targets, benches and allocation
/// tests. Not a stable API.
#[doc(hidden)]
pub mod internal {
    pub use crate::aggregate::{Sample, StackIndex, WindowAggregator};
    pub use crate::budget::BudgetController;
    pub use crate::counters;
    pub use crate::rng::XorShift;
    pub use crate::runtime::SamplerHarness;
    pub use crate::spans::WindowSpans;
    pub use crate::time::{now_unix_ns, unix_ns};
}
