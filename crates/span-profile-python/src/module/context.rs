//! The runtime-context wrapper: OpenTelemetry-Python's `_RUNTIME_CONTEXT` is replaced by a
//! [`ContextHook`] that delegates every call to the original and, after each `attach` and
//! `detach`, publishes the thread's now-current span to the registry.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};

use crate::walker::SlotData;
use span_profile_core::labels::LabelValues;
use span_profile_core::{
    ActiveSpan, ActiveSpanRegistry, ExecutionKey, SpanContext, SpanId, TraceId,
};

/// An active span as Python sees it: what [`super::agent::NativeAgent::span_start`] returns
/// and what the span processor caches on the span. An opaque object rather than a tuple so
/// that publishing it on every `attach` copies 40 bytes instead of converting a 128-bit int.
///
/// It is also the value of the span slot ContextVar (`span_profile._agent.SPAN_SLOT`): the
/// walker finds it in the context running on a thread and reads the `#[repr(C)]`
/// [`SlotData`] copy of the ids at the offset [`slot_layout`] measures.
#[pyclass(frozen, name = "ActiveSpan", module = "span_profile._native")]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct PyActiveSpan(pub(crate) ActiveSpan, pub(crate) SlotData);

impl PyActiveSpan {
    pub(crate) fn new(active: ActiveSpan) -> Self {
        Self(active, SlotData::span(&active))
    }
}

/// The value of the task tag ContextVar (`span_profile._agent.TASK_TAG`), set in each asyncio
/// task's context when it is created: the id of its (folded) name.
#[pyclass(frozen, name = "TaskTag", module = "span_profile._native")]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskTag(pub(crate) SlotData);

#[pymethods]
impl TaskTag {
    /// The name id ([`crate::walker::TaskNames`]).
    #[getter]
    fn name_id(&self) -> u32 {
        self.0.name_id
    }
}

/// `(id(type), offset of SlotData from the object's start)` of a live instance, measured from
/// the object PyO3 laid out (no assumption about PyO3's object layout).
pub(crate) fn slot_layout<T>(obj: &Bound<'_, T>, data: impl Fn(&T) -> &SlotData) -> (u64, usize)
where
    T: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync,
{
    let start = obj.as_ptr() as usize;
    let at = data(obj.get()) as *const SlotData as usize;
    (
        obj.as_any().get_type().as_ptr() as u64,
        at.wrapping_sub(start),
    )
}

#[pymethods]
impl PyActiveSpan {
    /// The trace id as an int.
    #[getter]
    fn trace_id(&self) -> u128 {
        self.0.ctx.trace_id.to_u128()
    }
    /// The span id as an int.
    #[getter]
    fn span_id(&self) -> u64 {
        self.0.ctx.span_id.to_u64()
    }
    /// The local root span id as an int.
    #[getter]
    fn local_root(&self) -> u64 {
        self.0.ctx.local_root_span_id.to_u64()
    }
    /// The interned route label id.
    #[getter]
    fn route_id(&self) -> u32 {
        self.0.route.0
    }
    /// The span id as 16 lowercase hex digits (the `pyroscope.profile.id` attribute).
    #[getter]
    fn profile_id(&self) -> String {
        super::span_hooks::hex16(self.0.ctx.span_id.to_u64())
    }
    /// `(trace_id, span_id, local_root, route_id)`.
    fn as_tuple(&self) -> (u128, u64, u64, u32) {
        (
            self.trace_id(),
            self.span_id(),
            self.local_root(),
            self.route_id(),
        )
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyActiveSpan>()
            .is_ok_and(|o| o.get().0 == self.0)
    }
    fn __hash__(&self) -> u64 {
        self.0.ctx.span_id.to_u64()
    }
    fn __repr__(&self) -> String {
        format!(
            "ActiveSpan(trace_id={}, span_id={}, local_root={}, route_id={})",
            self.0.ctx.trace_id, self.0.ctx.span_id, self.0.ctx.local_root_span_id, self.0.route.0
        )
    }
}

/// The identity CPython gives the calling thread (`threading.get_ident()`), which is also
/// what the walker reads from each thread state.
pub(crate) fn current_thread_ident() -> u64 {
    // SAFETY: (1) pthread_self has no preconditions: it takes no arguments, cannot fail and
    // only returns the calling thread's handle. (2) CPython's PyThread_get_thread_ident on
    // POSIX is exactly `(unsigned long)pthread_self()`, so the value matches
    // `threading.get_ident()` and the walker's `tstate->thread_id`.
    let t = unsafe { libc::pthread_self() };
    t as u64
}

/// Counters of the context hook (shared with the agent's `stats()`).
#[derive(Debug, Default)]
pub(crate) struct HookCounters {
    pub(crate) spans_started: AtomicU64,
    pub(crate) spans_ended: AtomicU64,
    pub(crate) publishes: AtomicU64,
    pub(crate) hook_errors: AtomicU64,
}

/// Name of the attribute the span processor sets on SDK spans.
pub(crate) const CACHE_ATTR: &str = "_span_profile_active";

/// Delegating wrapper around OpenTelemetry-Python's runtime context.
#[pyclass(frozen, name = "ContextHook", module = "span_profile._native")]
#[derive(Debug)]
pub(crate) struct ContextHook {
    original: Py<PyAny>,
    attach: Py<PyAny>,
    detach: Py<PyAny>,
    get_current: Py<PyAny>,
    span_key: Py<PyString>,
    cache_attr: Py<PyString>,
    /// `opentelemetry.trace.NonRecordingSpan`: never carries our cached span, so skip the
    /// attribute lookup (a miss raises and clears an AttributeError, which costs more).
    non_recording: Py<PyType>,
    /// `contextvars.Token` and `Token.MISSING` when `attach`/`detach` go straight to the
    /// original's ContextVar: after `reset(token)` the current context is `token.old_value`.
    token_type: Option<(Py<PyType>, Py<PyAny>)>,
    registry: Arc<ActiveSpanRegistry>,
    counters: Arc<HookCounters>,
    /// `SPAN_SLOT.set`: after each attach/detach the now-current span object (or `None`) is
    /// stored in our own ContextVar, in the same context as OpenTelemetry's, for the walker.
    slot_set: Option<Py<PyAny>>,
    /// Cleared by `disable()` when the agent stops but the hook cannot be uninstalled
    /// (something wrapped it in turn); it then only delegates.
    enabled: AtomicBool,
}

impl ContextHook {
    /// A hook delegating to `original`. With `context_var` (the ContextVar inside
    /// OpenTelemetry's stock `ContextVarsRuntimeContext`, whose `attach`/`detach`/`get_current`
    /// are exactly its `set`/`reset`/`get`), the hook calls the ContextVar's C methods directly,
    /// which skips a Python frame per call; tokens are the same either way.
    pub(crate) fn new(
        original: &Bound<'_, PyAny>,
        context_var: Option<&Bound<'_, PyAny>>,
        span_key: &Bound<'_, PyString>,
        non_recording: &Bound<'_, PyType>,
        registry: Arc<ActiveSpanRegistry>,
        counters: Arc<HookCounters>,
        slot_var: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let py = original.py();
        let (attach, detach, get_current, token_type) = match context_var {
            Some(var) => {
                let token = py.import("contextvars")?.getattr("Token")?;
                let missing = token.getattr("MISSING")?.unbind();
                (
                    var.getattr(intern!(py, "set"))?,
                    var.getattr(intern!(py, "reset"))?,
                    var.getattr(intern!(py, "get"))?,
                    Some((token.cast_into::<PyType>()?.unbind(), missing)),
                )
            }
            None => (
                original.getattr(intern!(py, "attach"))?,
                original.getattr(intern!(py, "detach"))?,
                original.getattr(intern!(py, "get_current"))?,
                None,
            ),
        };
        Ok(Self {
            original: original.clone().unbind(),
            attach: attach.unbind(),
            detach: detach.unbind(),
            get_current: get_current.unbind(),
            token_type,
            span_key: span_key.clone().unbind(),
            cache_attr: PyString::intern(py, CACHE_ATTR).unbind(),
            non_recording: non_recording.clone().unbind(),
            registry,
            counters,
            slot_set: slot_var
                .map(|v| v.getattr(intern!(py, "set")))
                .transpose()?
                .map(Bound::unbind),
            enabled: AtomicBool::new(true),
        })
    }

    /// Publishes the span current in `context` for the calling thread. Never raises: a
    /// context it cannot read counts as "no span" and is counted.
    fn publish(&self, py: Python<'_>, context: Option<&Bound<'_, PyAny>>) {
        // Relaxed: a publish racing with `disable` may land either way; the registry it
        // writes to belongs to the stopped agent and is never read again.
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        let active = match context.map(|c| self.span_of(c)).unwrap_or(Ok(None)) {
            Ok(a) => a,
            Err(_) => {
                self.counters.hook_errors.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        self.registry.set_current(
            ExecutionKey::thread(current_thread_ident()),
            active.as_ref().map(|a| a.get().0),
        );
        if let Some(set) = &self.slot_set {
            let value = match active {
                Some(a) => a.into_any(),
                None => py.None().into_bound(py),
            };
            if set.call1(py, (value,)).is_err() {
                self.counters.hook_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.counters.publishes.fetch_add(1, Ordering::Relaxed);
    }

    fn span_of<'py>(
        &self,
        context: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyActiveSpan>>> {
        let py = context.py();
        let Ok(dict) = context.cast::<PyDict>() else {
            return Ok(None);
        };
        let Some(span) = dict.get_item(self.span_key.bind(py))? else {
            return Ok(None);
        };
        if !span.get_type().is(self.non_recording.bind(py)) {
            if let Some(cached) = span.getattr_opt(self.cache_attr.bind(py))? {
                if let Ok(a) = cached.cast_into::<PyActiveSpan>() {
                    return Ok(Some(a));
                }
            }
        }
        span_from_context(&span)?
            .map(|a| Bound::new(py, PyActiveSpan::new(a)))
            .transpose()
    }
}

/// An [`ActiveSpan`] for a span our processor did not see: its own id is its local root and
/// its route is unknown. `None` for an invalid span.
fn span_from_context(span: &Bound<'_, PyAny>) -> PyResult<Option<ActiveSpan>> {
    let py = span.py();
    let Some(sc) = span.getattr_opt(intern!(py, "get_span_context"))? else {
        return Ok(None);
    };
    let sc = sc.call0()?;
    if sc.is_none() {
        return Ok(None);
    }
    let trace: u128 = sc.getattr(intern!(py, "trace_id"))?.extract()?;
    let span_id: u64 = sc.getattr(intern!(py, "span_id"))?.extract()?;
    Ok(
        match (TraceId::from_u128(trace), SpanId::from_u64(span_id)) {
            (Some(trace_id), Some(span_id)) => Some(ActiveSpan {
                ctx: SpanContext {
                    trace_id,
                    span_id,
                    local_root_span_id: span_id,
                },
                route: LabelValues::BACKGROUND,
            }),
            _ => None,
        },
    )
}

#[pymethods]
impl ContextHook {
    /// `RuntimeContext.attach`: the original's, then publish.
    fn attach(&self, py: Python<'_>, context: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let token = self.attach.call1(py, (context,))?;
        self.publish(py, Some(context));
        Ok(token)
    }

    /// `RuntimeContext.detach`: the original's, then publish what is current again.
    fn detach(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<()> {
        self.detach.call1(py, (token,))?;
        if let Some((token_type, missing)) = &self.token_type {
            if token.get_type().is(token_type.bind(py)) {
                // `reset(token)` made `token.old_value` current again (or the empty default
                // context, when it was MISSING).
                let old = token.getattr(intern!(py, "old_value"))?;
                let old = (!old.is(missing.bind(py))).then_some(&old);
                self.publish(py, old);
                return Ok(());
            }
        }
        match self.get_current.call0(py) {
            Ok(ctx) => self.publish(py, Some(ctx.bind(py))),
            Err(_) => {
                self.counters.hook_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// `RuntimeContext.get_current`: the original's.
    fn get_current(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.get_current.call0(py)
    }

    /// The wrapped runtime context (restored by `stop()`).
    #[getter]
    fn original(&self, py: Python<'_>) -> Py<PyAny> {
        self.original.clone_ref(py)
    }

    /// Publishes the calling thread's current context now (used once at start).
    fn publish_current(&self, py: Python<'_>) -> PyResult<()> {
        let ctx = self.get_current.call0(py)?;
        self.publish(py, Some(ctx.bind(py)));
        Ok(())
    }

    /// Stops publishing; from now on the hook only delegates.
    fn disable(&self) {
        self.enabled.store(false, Ordering::Relaxed);
    }

    /// Anything else a caller expects of a runtime context comes from the original.
    fn __getattr__(&self, py: Python<'_>, name: &Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
        self.original.getattr(py, name)
    }
}
