//! The span (and asyncio task name) of the context that is running on a thread, read from
//! interpreter memory at the sample instant.
//!
//! OpenTelemetry's runtime context keeps the current `Context` (a `dict` subclass) in a
//! ContextVar, and the span under one key of that dict (ADR 0011). The task factory stores a
//! `TaskTag` in a ContextVar of our own in each task's context, and a `run_in_executor` worker
//! gets the submitter's span in a third (`SPAN_SLOT`). Every copy of a context (asyncio tasks,
//! `copy_context().run`, `asyncio.to_thread`) carries them along, and asyncio runs each task
//! step inside its context (`Context.run`), so what is entered on the thread when we sample is
//! exactly the running task's (or thread's) context.
//!
//! Per thread: `tstate->context` → `PyContext.ctx_vars` (an immutable HAMT) → look
//! OpenTelemetry's ContextVar up by its hash → check the value is a `Context` → find the span
//! key among its dict entries → look the span object's address up in the span-object table
//! that our span processor fills. The cost does not depend on how many tasks exist: only the
//! running context is read. Every node read is validated against the HAMT node types, the
//! depth and sizes are capped, and every failure is a counter (the sample then carries no
//! span, `SpanSource::Unknown`: nothing else on a Python thread knows its span).
//!
//! - `slot`: the slot ABI (what our objects in contexts carry) and the task-name table.
//! - `hamt`: the HAMT's node types and a bounded lookup.
//! - `dict`: `dict` scans, and the span in OpenTelemetry's `Context`.
//! - `reader`: [`ContextReader`], which runs the lookup per sampled thread, and what it found.
//! - `error`: [`ContextError`], shared by all of them.

mod dict;
mod error;
mod hamt;
mod reader;
mod slot;

#[cfg(test)]
mod tests;

pub use dict::{otel_span_object, DictLayout, OtelTarget};
pub use error::ContextError;
pub use hamt::HamtTypes;
pub use reader::{ContextCounters, ContextStats, ContextTarget};
pub(crate) use reader::{ContextReader, Resolution};
pub use slot::{SlotData, SlotVar, TaskNames};
