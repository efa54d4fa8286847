//! The slot ABI: what the `span_profile` objects that our hooks put in contexts carry
//! ([`SlotData`], `#[repr(C)]`), how one is found and read ([`SlotVar`], `read_slot`), and the
//! task names that a task tag's `name_id` stands for ([`TaskNames`]).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use span_profile_core::labels::LabelId;
use span_profile_core::{ActiveSpan, SpanContext, SpanId, TraceId};

use super::error::ContextError;
use super::hamt::{hamt_find, hamt_hash, HamtTypes};
use crate::walker::layout::OB_TYPE;
use crate::walker::memory::{field_u64, MemoryReader};
use crate::walker::namebuf::NameBuf;

/// `SlotData::magic` of a span slot ("SPANSLOT", little-endian).
pub(crate) const SPAN_MAGIC: u64 = u64::from_le_bytes(*b"SPANSLOT");
/// `SlotData::magic` of a task tag ("TASK_TAG").
pub(crate) const TASK_MAGIC: u64 = u64::from_le_bytes(*b"TASK_TAG");

/// What a `span_profile` slot object carries, `#[repr(C)]` at a fixed offset inside the Python
/// object (measured by the module when it builds the walker).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotData {
    /// `SPAN_MAGIC` or `TASK_MAGIC`; anything else is not ours.
    pub magic: u64,
    /// High and low halves of the trace id.
    pub trace_hi: u64,
    /// See `trace_hi`.
    pub trace_lo: u64,
    /// The span id.
    pub span_id: u64,
    /// The local root span id.
    pub local_root: u64,
    /// The route label id (span table interning).
    pub route: u32,
    /// A task name id ([`TaskNames`]), for task tags.
    pub name_id: u32,
}

/// Bytes of [`SlotData`].
pub(crate) const SLOT_SIZE: usize = std::mem::size_of::<SlotData>();

impl SlotData {
    /// The slot of an active span.
    pub fn span(a: &ActiveSpan) -> Self {
        let t = a.ctx.trace_id.to_u128();
        Self {
            magic: SPAN_MAGIC,
            trace_hi: (t >> 64) as u64,
            trace_lo: t as u64,
            span_id: a.ctx.span_id.to_u64(),
            local_root: a.ctx.local_root_span_id.to_u64(),
            route: a.route.0,
            name_id: 0,
        }
    }

    /// The tag of a task whose name has id `name_id`.
    pub fn task(name_id: u32) -> Self {
        Self {
            magic: TASK_MAGIC,
            name_id,
            ..Self::default()
        }
    }

    fn from_bytes(b: &[u8]) -> Self {
        let u32_at = |off: usize| {
            b.get(off..off + 4)
                .and_then(|s| <[u8; 4]>::try_from(s).ok())
                .map_or(0, u32::from_le_bytes)
        };
        Self {
            magic: field_u64(b, 0),
            trace_hi: field_u64(b, 8),
            trace_lo: field_u64(b, 16),
            span_id: field_u64(b, 24),
            local_root: field_u64(b, 32),
            route: u32_at(40),
            name_id: u32_at(44),
        }
    }

    /// The span this slot describes, if its ids are valid.
    pub fn active_span(&self) -> Option<ActiveSpan> {
        let trace = (u128::from(self.trace_hi) << 64) | u128::from(self.trace_lo);
        let span_id = SpanId::from_u64(self.span_id)?;
        Some(ActiveSpan {
            ctx: SpanContext {
                trace_id: TraceId::from_u128(trace)?,
                span_id,
                local_root_span_id: SpanId::from_u64(self.local_root).unwrap_or(span_id),
            },
            route: LabelId(self.route),
        })
    }
}

/// One ContextVar to look up and the type of the object it must hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotVar {
    /// `id(var)`: HAMT keys are compared by identity.
    pub var: u64,
    /// `hash(var)` (the var's `var_hash`).
    pub hash: i64,
    /// `id(type(value))` that a valid value has.
    pub value_type: u64,
    /// Offset of [`SlotData`] from the start of the value object.
    pub data_offset: usize,
}

/// Most bytes read at once for a slot value (header and data).
const VALUE_READ: usize = 128;

/// Reads the slot of `var` in the context at `ctx_vars`' root. `Ok(None)`: not set, or set
/// to something that is not ours (such as `None`).
pub(super) fn read_slot(
    reader: &dyn MemoryReader,
    types: &HamtTypes,
    root: u64,
    var: &SlotVar,
    magic: u64,
) -> Result<Option<SlotData>, ContextError> {
    let Some(value) = hamt_find(reader, types, root, var.var, hamt_hash(var.hash))? else {
        return Ok(None);
    };
    // The header and the slot data in one read when the data sits close behind the header
    // (it does in our objects); a value that is not ours (say `None`) may be too small for
    // that read, so its failure falls back to the header alone.
    let mut buf = [0u8; VALUE_READ];
    let end = var.data_offset + SLOT_SIZE;
    let whole = end <= VALUE_READ && reader.read(value, &mut buf[..end]).is_ok();
    if !whole {
        reader.read(value, &mut buf[..16])?;
    }
    if field_u64(&buf, OB_TYPE) != var.value_type {
        return Ok(None);
    }
    let slot = if whole {
        SlotData::from_bytes(&buf[var.data_offset..end])
    } else {
        let mut data = [0u8; SLOT_SIZE];
        reader.read(value.wrapping_add(var.data_offset as u64), &mut data)?;
        SlotData::from_bytes(&data)
    };
    if slot.magic != magic {
        return Err(ContextError::Invalid);
    }
    Ok(Some(slot))
}

/// Most task names remembered; later names fold into [`OTHER_TASK`].
pub(crate) const MAX_TASK_NAMES: usize = 256;
/// The name reported for tasks whose name was not registered or did not fit.
pub(crate) const OTHER_TASK: &str = "Task";

/// Task names by id, registered by the Python task factory (low cardinality: default
/// `Task-N` names are folded before they get here). The walker only `try_lock`s it.
#[derive(Debug, Clone, Default)]
pub struct TaskNames {
    inner: Arc<Mutex<Vec<Box<str>>>>,
}

impl TaskNames {
    /// The id of `name`, registering it if new; `0` (reported as `OTHER_TASK`) once
    /// `MAX_TASK_NAMES` names exist.
    pub fn intern(&self, name: &str) -> u32 {
        let mut names = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = names.iter().position(|n| &**n == name) {
            return i as u32 + 1;
        }
        if names.len() >= MAX_TASK_NAMES {
            return 0;
        }
        names.push(name.into());
        names.len() as u32
    }

    /// Copies the name of `id` into `buf` without blocking or allocating.
    pub(super) fn lookup(&self, id: u32, buf: &mut NameBuf) {
        buf.clear();
        if let Ok(names) = self.inner.try_lock() {
            if let Some(n) = (id as usize).checked_sub(1).and_then(|i| names.get(i)) {
                buf.push_str(n);
                return;
            }
        }
        let _ = buf.write_str(OTHER_TASK);
    }
}
