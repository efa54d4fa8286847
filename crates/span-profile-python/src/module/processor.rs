//! The span processor: `span_profile.SpanProcessor`, the native class the OpenTelemetry SDK
//! calls on every span start and end, and the [`SpanRecorder`] it feeds, which records spans
//! in the running agent's span table and span-object table and sets `pyroscope.profile.id`.
//! The agent (`lifecycle.rs`) owns a recorder and installs it here while it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};

use span_profile_core::labels::LabelValues;
use span_profile_core::{SpanEnd, SpanId, SpanScope, SpanStart, SpanTable, TraceId};

use super::context::{HookCounters, PyActiveSpan};
use super::span_hooks::{
    as_py_string, set_profile_id, set_profile_id_ending, span_context, text, time_ns, Attributes,
    Hex16, TraceIds, CONTEXT, END_TIME, NAME, PARENT, START_TIME,
};
use super::span_objects::SpanObjects;

/// What the span hooks write to: the agent's span table, the span-object table the sampler
/// resolves spans in (ADR 0011), and the hooks' counters. Its methods never raise into the
/// application: a failure is counted in `hook_errors`.
#[derive(Debug)]
pub(crate) struct SpanRecorder {
    pub(crate) spans: Arc<SpanTable>,
    /// The SDK span objects our processor started, by address (ADR 0011).
    pub(crate) span_objects: Arc<SpanObjects>,
    /// Trace ids the span starts converted lately.
    trace_ids: TraceIds,
    pub(crate) counters: Arc<HookCounters>,
    /// Which spans get `pyroscope.profile.id`: those whose own id the exporter keeps samples
    /// under ([`SpanScope::links`]).
    link_scope: SpanScope,
}

impl SpanRecorder {
    /// A recorder feeding `spans` and `span_objects`, linking the spans of `link_scope`.
    pub(crate) fn new(
        spans: Arc<SpanTable>,
        span_objects: Arc<SpanObjects>,
        link_scope: SpanScope,
    ) -> Self {
        Self {
            spans,
            span_objects,
            trace_ids: TraceIds::default(),
            counters: Arc::new(HookCounters::default()),
            link_scope,
        }
    }

    /// Forgets the span objects and trace ids (the agent stopped, or this is a forked child).
    pub(crate) fn clear(&self) {
        self.span_objects.clear();
        self.trace_ids.clear();
    }

    /// `SpanProcessor.on_start`, natively: records the SDK span in the span table, lists it in
    /// the span-object table (for the sampler) and sets `pyroscope.profile.id`.
    pub(crate) fn on_start(&self, span: &Bound<'_, PyAny>) {
        self.span_objects.span_boundary();
        if self.try_on_start(span).is_err() {
            self.counters.hook_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `SpanProcessor.on_end`, natively: records the end time (and a root's `http.route`).
    pub(crate) fn on_end(&self, span: &Bound<'_, PyAny>) {
        self.span_objects.span_boundary();
        if self.try_on_end(span).is_err() {
            self.counters.hook_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `SpanProcessor._on_ending`, natively: records the end and sets the link of a span that
    /// may have samples.
    pub(crate) fn on_ending(&self, span: &Bound<'_, PyAny>) {
        self.span_objects.span_boundary();
        if self.try_on_ending(span).is_err() {
            self.counters.hook_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a span start in the span table; returns what samples under the span are
    /// labelled with, or `None` for an invalid (all-zero) id.
    #[allow(clippy::too_many_arguments)]
    fn span_start(
        &self,
        trace_id: u128,
        span_id: u64,
        parent_span_id: u64,
        parent_is_remote: bool,
        name: &str,
        route: Option<&str>,
        start_ns: u64,
    ) -> Option<PyActiveSpan> {
        let (Some(trace_id), Some(span_id)) =
            (TraceId::from_u128(trace_id), SpanId::from_u64(span_id))
        else {
            return None;
        };
        self.counters.spans_started.fetch_add(1, Ordering::Relaxed);
        Some(PyActiveSpan::new(self.spans.start(SpanStart {
            trace_id,
            span_id,
            parent_span_id: SpanId::from_u64(parent_span_id),
            parent_is_remote,
            name,
            route,
            start_unix_ns: start_ns,
        })))
    }

    fn try_on_start(&self, span: &Bound<'_, PyAny>) -> PyResult<()> {
        let sc = CONTEXT.of(span)?;
        let own = span_context(&sc)?;
        let (trace_id, span_id) = (own.trace_id(&self.trace_ids)?, own.span_id);
        let parent = PARENT.of(span)?;
        let (parent_id, remote) = if parent.is_none() {
            (0, false)
        } else {
            let p = span_context(&parent)?;
            (p.span_id, p.is_remote)
        };
        let is_root = parent_id == 0 || remote;
        // Only a local root's attributes are read: a local child inherits its root's route.
        // Where the SDK calls `_on_ending`, the link is set there, on the spans that may have
        // samples; before, every span in the link scope gets it now.
        let links = !ends_at_ending() && self.link_scope.links(is_root);
        let attributes = if is_root || links {
            Attributes::of(span)?
        } else {
            None
        };
        let route = match (&attributes, is_root) {
            (Some(a), true) => a.route()?,
            _ => None,
        };
        let route = route.as_ref().map(text);
        let name = as_py_string(NAME.of(span)?);
        let name = name.as_ref().map(text);
        let start_ns = time_ns(span, &START_TIME)?;
        let Some(active) = self.span_start(
            trace_id,
            span_id,
            parent_id,
            remote,
            name.as_deref().unwrap_or_default(),
            route.as_deref(),
            start_ns,
        ) else {
            return Ok(());
        };
        self.span_objects.insert(span, active.0);
        if links {
            let id = Hex16::new(active.0.ctx.span_id.to_u64());
            set_profile_id(span, attributes.as_ref(), id.as_str())?;
        }
        Ok(())
    }

    /// Records a span end (from any thread). Unknown ids are ignored.
    fn span_end(&self, span_id: u64, end_ns: u64, route: Option<&str>) -> SpanEnd {
        match SpanId::from_u64(span_id) {
            Some(id) => {
                self.counters.spans_ended.fetch_add(1, Ordering::Relaxed);
                self.spans.end(id, end_ns, route)
            }
            None => SpanEnd::NotOpen,
        }
    }

    /// The end of a span whose ids are read from the span itself: `on_end`'s `ReadableSpan`
    /// (made for the call, so never listed), or an ending span the span-object table did not
    /// list. Returns its id, whether it is a local root, and what the span table said.
    fn end_from_fields(&self, span: &Bound<'_, PyAny>) -> PyResult<(u64, bool, SpanEnd)> {
        let sc = CONTEXT.of(span)?;
        let span_id = span_context(&sc)?.span_id;
        let parent = PARENT.of(span)?;
        let is_root = parent.is_none() || span_context(&parent)?.is_remote;
        let end = self.record_end(span, span_id, is_root)?;
        Ok((span_id, is_root, end))
    }

    /// Records the end of span `span_id`, reading the end time and (for a local root) the
    /// route from `span`.
    fn record_end(
        &self,
        span: &Bound<'_, PyAny>,
        span_id: u64,
        read_route: bool,
    ) -> PyResult<SpanEnd> {
        let route = if read_route {
            Attributes::of(span)?
                .map(|a| a.route())
                .transpose()?
                .flatten()
        } else {
            None
        };
        let route = route.as_ref().map(text);
        let end_ns = time_ns(span, &END_TIME)?;
        Ok(self.span_end(span_id, end_ns, route.as_deref()))
    }

    fn try_on_end(&self, span: &Bound<'_, PyAny>) -> PyResult<()> {
        self.end_from_fields(span).map(drop)
    }

    /// `_on_ending`: the live span, which `on_start` listed with its ids, local root and route.
    /// Only its end time is read (and a root's route, if it had none at start: some
    /// instrumentations set it once routing is done). A span that may have samples gets
    /// `pyroscope.profile.id` if the link scope covers it, so a link never leads to an empty
    /// profile.
    fn try_on_ending(&self, span: &Bound<'_, PyAny>) -> PyResult<()> {
        let (span_id, is_root, end) = match self.span_objects.get(span) {
            Some(active) => {
                let span_id = active.ctx.span_id.to_u64();
                let is_root = active.ctx.local_root_span_id == active.ctx.span_id;
                let read_route = is_root && active.route == LabelValues::BACKGROUND;
                (
                    span_id,
                    is_root,
                    self.record_end(span, span_id, read_route)?,
                )
            }
            None => self.end_from_fields(span)?,
        };
        if end == SpanEnd::Sampled && self.link_scope.links(is_root) {
            let id = Hex16::new(span_id);
            let written = match Attributes::of(span)? {
                Some(a) => set_profile_id_ending(&a, id.as_str())?,
                None => false,
            };
            if !written {
                self.counters
                    .links_unwritten
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// The recorder the span processor's entry points feed: installed by the running agent
/// (`span_profile.start()`), cleared by `stop()`. Read under the GIL on every span start and
/// end.
static INSTALLED: RwLock<Option<Arc<SpanRecorder>>> = RwLock::new(None);

/// The installed recorder, if an agent runs. The lock is released before the hook runs.
fn installed() -> Option<Arc<SpanRecorder>> {
    INSTALLED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Points the span processor's entry points at `recorder` (or at nothing).
pub(crate) fn install(recorder: Option<Arc<SpanRecorder>>) {
    let old = std::mem::replace(
        &mut *INSTALLED.write().unwrap_or_else(PoisonError::into_inner),
        recorder,
    );
    // Released outside the lock.
    drop(old);
}

/// Whether the SDK calls `SpanProcessor._on_ending` with the live span just before `on_end`
/// (OpenTelemetry SDK 1.35 and later). Then the end is recorded there, from what `on_start`
/// listed, and `pyroscope.profile.id` goes only on the spans that may have samples; `on_end`
/// does nothing. Otherwise `on_start` links every span in the link scope and `on_end` records
/// the end from the `ReadableSpan`'s fields. One SDK per process: set once, at import.
static ENDS_AT_ENDING: AtomicBool = AtomicBool::new(false);

fn ends_at_ending() -> bool {
    // Relaxed: a flag set at import, before any span; it orders nothing else.
    ENDS_AT_ENDING.load(Ordering::Relaxed)
}

/// Tells the hooks whether the SDK calls `_on_ending` (see [`ENDS_AT_ENDING`]).
#[pyfunction]
pub(crate) fn set_ends_at_ending(yes: bool) {
    ENDS_AT_ENDING.store(yes, Ordering::Relaxed);
}

/// `span_profile.SpanProcessor`: links OpenTelemetry spans to profiles.
///
/// Add it to the TracerProvider: `provider.add_span_processor(span_profile.SpanProcessor())`.
/// On start it records the span (its parent, local root and `http.route`) in the agent's span
/// table and lists the span object for the sampler. As the span ends it records the end time
/// and sets the attribute `pyroscope.profile.id` to the span id (16 hex digits) if the span
/// may have samples and the output keeps samples under its own id: every span for a directory
/// or OTLP, the local roots only for Pyroscope (unless `PYROSCOPE_SPAN_SCOPE=all`). So a link
/// never leads to an empty profile. (SDKs before 1.35, which have no `_on_ending`, get the link
/// on every span in that scope, at start.) Which span is current on a thread is not tracked
/// here: the sampler reads OpenTelemetry's own context and attributes samples to its span when
/// this processor started it. Does nothing while no agent runs. It never raises into the
/// application: failures are counted in `stats()["hook_errors"]`.
///
/// A native class (ADR 0016), with the SDK `SpanProcessor`'s methods but not derived from it: the
/// SDK calls `on_start`, `_on_ending` and `on_end` for every span, and CPython caches the
/// lookup of a native class's method at the call site, with no Python frame run. Those three are
/// hand-written method descriptors (`processor_methods.rs`, ADR 0017), set on the type at
/// import. A subclass that overrides one of them must call the base:
/// `super().on_start(span, parent_context)`.
#[pyclass(name = "SpanProcessor", module = "span_profile", subclass, frozen)]
pub(crate) struct SpanProcessor;

#[pymethods]
impl SpanProcessor {
    /// `SpanProcessor()` takes no arguments. A subclass's constructor may have parameters of
    /// its own, for its `__init__`: they are let through, as `object.__new__` does.
    #[new]
    #[classmethod]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(
        cls: &Bound<'_, PyType>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let has_args = !args.is_empty() || kwargs.is_some_and(|k| !k.is_empty());
        if has_args && cls.is(cls.py().get_type::<Self>()) {
            return Err(PyTypeError::new_err(
                "SpanProcessor() takes no arguments; configure the agent with span_profile.start()",
            ));
        }
        Ok(Self)
    }

    /// Nothing to shut down: the agent is stopped by `agent.stop()` or at exit.
    fn shutdown(&self) {}

    /// Nothing is buffered here; always true. The timeout is not looked at, so no value of it
    /// (the SDK passes a float when the application gave one) can raise.
    #[pyo3(signature = (timeout_millis=None))]
    fn force_flush(&self, timeout_millis: Option<&Bound<'_, PyAny>>) -> bool {
        let _ = timeout_millis;
        true
    }
}

/// `SpanProcessor.on_start(span, parent_context=None)` (`processor_methods.rs`): records the
/// span with the running agent (see [`SpanRecorder::on_start`]).
pub(crate) fn processor_on_start(span: &Bound<'_, PyAny>) {
    if let Some(recorder) = installed() {
        recorder.on_start(span);
    }
}

/// `SpanProcessor._on_ending(span)`: records the end of the live span, where the SDK calls it
/// (see [`SpanRecorder::on_ending`] and [`ENDS_AT_ENDING`]).
pub(crate) fn processor_on_ending(span: &Bound<'_, PyAny>) {
    if !ends_at_ending() {
        return;
    }
    if let Some(recorder) = installed() {
        recorder.on_ending(span);
    }
}

/// `SpanProcessor.on_end(span)`: records the end from the `ReadableSpan`, for an SDK that does
/// not call `_on_ending` (see [`SpanRecorder::on_end`]); else nothing.
pub(crate) fn processor_on_end(span: &Bound<'_, PyAny>) {
    if ends_at_ending() {
        return;
    }
    if let Some(recorder) = installed() {
        recorder.on_end(span);
    }
}
