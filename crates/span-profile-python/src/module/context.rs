//! The Python objects the sampler reads out of thread contexts: [`PyActiveSpan`] (what a span
//! is labelled with) and [`TaskTag`] (an asyncio task's name), and the hooks' counters.

use std::sync::atomic::AtomicU64;

use pyo3::prelude::*;

use crate::walker::SlotData;
use span_profile_core::ActiveSpan;

/// An active span as Python sees it: what [`super::processor::SpanRecorder::span_start`] and
/// `active_of` return. An opaque object rather than a tuple, so that handing it to a
/// `run_in_executor` worker copies 40 bytes instead of converting a 128-bit int.
///
/// It is also the value of the span slot ContextVar (`span_profile._agent.SPAN_SLOT`), set in
/// such a worker: the walker finds it in the context running on a thread and reads the
/// `#[repr(C)]` [`SlotData`] copy of the ids at the offset [`slot_layout`] measures.
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
        // Not on the span path: the core's formatting (16 lowercase hex digits) will do.
        self.0.ctx.span_id.to_string()
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

/// Counters of the span hooks (shared with the agent's `stats()`).
#[derive(Debug, Default)]
pub(crate) struct HookCounters {
    pub(crate) spans_started: AtomicU64,
    pub(crate) spans_ended: AtomicU64,
    pub(crate) hook_errors: AtomicU64,
    /// Spans that may have samples and should have carried `pyroscope.profile.id`, but whose
    /// attributes had no room for it (full, or not the SDK's kind) when they ended.
    pub(crate) links_unwritten: AtomicU64,
}
