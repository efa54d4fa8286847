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

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use span_profile_core::labels::LabelId;
use span_profile_core::{
    ActiveSpan, RawSample, SpanContext, SpanId, SpanSource, StackSink, TraceId, WalkError,
};

use super::layout::{
    tstate_context, PythonVersion, CONTEXT_VARS, HAMT_ARRAY_ARRAY, HAMT_BITMAP_ARRAY,
    HAMT_BITMAP_BITMAP, HAMT_COLLISION_ARRAY, HAMT_COLLISION_HASH, HAMT_MAX_DEPTH, HAMT_ROOT,
    OB_SIZE, OB_TYPE,
};
use super::memory::{field_u64, MemoryReader, ReadError};
use super::namebuf::NameBuf;
use super::object_table::SpanObjectTable;

/// `SlotData::magic` of a span slot ("SPANSLOT", little-endian).
pub const SPAN_MAGIC: u64 = u64::from_le_bytes(*b"SPANSLOT");
/// `SlotData::magic` of a task tag ("TASK_TAG").
pub const TASK_MAGIC: u64 = u64::from_le_bytes(*b"TASK_TAG");
/// Most key/value slots read from one collision node.
const MAX_COLLISION_SLOTS: usize = 64;
/// Most task names remembered; later names fold into [`OTHER_TASK`].
pub const MAX_TASK_NAMES: usize = 256;
/// The name reported for tasks whose name was not registered or did not fit.
pub const OTHER_TASK: &str = "Task";

/// What a `span_profile` slot object carries, `#[repr(C)]` at a fixed offset inside the Python
/// object (measured by the module when it builds the walker).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotData {
    /// [`SPAN_MAGIC`] or [`TASK_MAGIC`]; anything else is not ours.
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
pub const SLOT_SIZE: usize = std::mem::size_of::<SlotData>();

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

/// Type objects that validate context and HAMT reads (0 disables a check).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HamtTypes {
    /// `PyContext_Type`.
    pub context: u64,
    /// `_PyHamt_Type`.
    pub hamt: u64,
    /// `_PyHamt_BitmapNode_Type`.
    pub bitmap: u64,
    /// `_PyHamt_ArrayNode_Type`.
    pub array: u64,
    /// `_PyHamt_CollisionNode_Type`.
    pub collision: u64,
}

impl HamtTypes {
    /// The type objects of this process's interpreter, found with `dlsym` (the node types are
    /// exported data symbols of libpython / the executable). `None` if any is missing: node
    /// types cannot be told apart without them.
    pub fn current_process() -> Option<Self> {
        Some(Self {
            context: super::target::dlsym("PyContext_Type\0")?,
            hamt: super::target::dlsym("_PyHamt_Type\0")?,
            bitmap: super::target::dlsym("_PyHamt_BitmapNode_Type\0")?,
            array: super::target::dlsym("_PyHamt_ArrayNode_Type\0")?,
            collision: super::target::dlsym("_PyHamt_CollisionNode_Type\0")?,
        })
    }
}

/// `PyTypeObject.tp_name` (after `PyObject_VAR_HEAD`), every version.
const TP_NAME: u64 = 24;
/// How far from the bitmap node type the other node types are searched (they are adjacent
/// static objects of Python/hamt.c).
const TYPE_SCAN_BYTES: u64 = 16 * 1024;

/// Whether the object at `addr` is a type object (`ob_type == type_type`) named `name`.
fn is_type_named(reader: &dyn MemoryReader, addr: u64, type_type: u64, name: &str) -> bool {
    let mut head = [0u8; 32];
    if reader.read(addr, &mut head).is_err() || field_u64(&head, OB_TYPE) != type_type {
        return false;
    }
    let mut text = [0u8; 24];
    let want = name.as_bytes();
    let Some(buf) = text.get_mut(..want.len() + 1) else {
        return false;
    };
    reader.read(field_u64(&head, TP_NAME as usize), buf).is_ok()
        && buf.get(..want.len()) == Some(want)
        && buf.get(want.len()) == Some(&0)
}

impl HamtTypes {
    /// Finds the node types without symbols (3.11 and 3.12 do not export them): the HAMT and
    /// bitmap-node types from a live, empty `contextvars.Context()` at `empty_context` (its
    /// root is the empty bitmap node), then the array and collision node types among the
    /// type objects next to the bitmap node type, each checked by `ob_type == type_type`
    /// (`id(type)`) and its `tp_name`. Runs once at start-up, with the GIL held.
    pub fn discover(reader: &dyn MemoryReader, empty_context: u64, type_type: u64) -> Option<Self> {
        let word = |addr: u64| -> Option<u64> {
            let mut b = [0u8; 8];
            reader.read(addr, &mut b).ok()?;
            Some(u64::from_le_bytes(b))
        };
        let context = word(empty_context.wrapping_add(OB_TYPE as u64))?;
        let hamt_obj = word(empty_context.wrapping_add(CONTEXT_VARS as u64))?;
        let hamt = word(hamt_obj.wrapping_add(OB_TYPE as u64))?;
        let root = word(hamt_obj.wrapping_add(HAMT_ROOT as u64))?;
        let bitmap = word(root.wrapping_add(OB_TYPE as u64))?;
        if !is_type_named(reader, hamt, type_type, "hamt")
            || !is_type_named(reader, bitmap, type_type, "hamt_bitmap_node")
        {
            return None;
        }
        let (mut array, mut collision) = (0, 0);
        let start = bitmap.saturating_sub(TYPE_SCAN_BYTES);
        let mut at = start;
        while at < bitmap.saturating_add(TYPE_SCAN_BYTES) && (array == 0 || collision == 0) {
            if array == 0 && is_type_named(reader, at, type_type, "hamt_array_node") {
                array = at;
            } else if collision == 0 && is_type_named(reader, at, type_type, "hamt_collision_node")
            {
                collision = at;
            }
            at += 8;
        }
        (array != 0 && collision != 0).then_some(Self {
            context,
            hamt,
            bitmap,
            array,
            collision,
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

/// OpenTelemetry's own current context, read in place (ADR 0011): the ContextVar of its
/// runtime context, the type of the `Context` it holds (a `dict` subclass), and the key under
/// which that dict keeps the current span.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OtelTarget {
    /// `id(var)` of `ContextVarsRuntimeContext._current_context` (`0`: not read).
    pub var: u64,
    /// `hash(var)`.
    pub hash: i64,
    /// `id(opentelemetry.context.Context)`: the value must be exactly of this type.
    pub context_type: u64,
    /// `id(_SPAN_KEY)`: contexts are built by copying and setting this very key object, so
    /// keys are compared by identity.
    pub span_key: u64,
}

/// What the walker needs to read spans and task names from thread contexts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextTarget {
    /// Node types for validation.
    pub types: HamtTypes,
    /// OpenTelemetry's context variable (`var == 0`: not read).
    pub otel: OtelTarget,
    /// The span slot ContextVar, set only around `run_in_executor` calls, where the worker
    /// does not run in the submitter's context (`var == 0`: not read).
    pub span: SlotVar,
    /// The task tag ContextVar (`var == 0`: task names are not read).
    pub task: SlotVar,
}

/// Task names by id, registered by the Python task factory (low cardinality: default
/// `Task-N` names are folded before they get here). The walker only `try_lock`s it.
#[derive(Debug, Clone, Default)]
pub struct TaskNames {
    inner: Arc<Mutex<Vec<Box<str>>>>,
}

impl TaskNames {
    /// The id of `name`, registering it if new; `0` (reported as [`OTHER_TASK`]) once
    /// [`MAX_TASK_NAMES`] names exist.
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
    fn lookup(&self, id: u32, buf: &mut NameBuf) {
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

/// Counters of context reads (`Relaxed`: independent statistics, nothing is published through
/// them).
#[derive(Debug, Default)]
pub struct ContextCounters {
    /// Threads whose context was looked at.
    pub lookups: AtomicU64,
    /// Samples whose span came from the context.
    pub spans: AtomicU64,
    /// Contexts (or threads without one) that hold no span.
    pub no_span: AtomicU64,
    /// Contexts whose current span is one our span processor did not start (another
    /// tracer provider's, or a sampled-out `NonRecordingSpan`): not attributed.
    pub untracked: AtomicU64,
    /// Samples that carried a task name.
    pub tasks: AtomicU64,
    /// Failed reads or validations (the sample carries no span).
    pub invalid: AtomicU64,
    /// Samples dropped because another context was entered (an asyncio task switch), or a
    /// variable of the entered context was set (a span entered or left), while the stack was
    /// copied: their frames and span could disagree.
    pub switched: AtomicU64,
}

/// A snapshot of [`ContextCounters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContextStats {
    /// See [`ContextCounters::lookups`].
    pub lookups: u64,
    /// See [`ContextCounters::spans`].
    pub spans: u64,
    /// See [`ContextCounters::no_span`].
    pub no_span: u64,
    /// See [`ContextCounters::untracked`].
    pub untracked: u64,
    /// See [`ContextCounters::tasks`].
    pub tasks: u64,
    /// See [`ContextCounters::invalid`].
    pub invalid: u64,
    /// See [`ContextCounters::switched`].
    pub switched: u64,
}

impl ContextCounters {
    /// Current values.
    pub fn snapshot(&self) -> ContextStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ContextStats {
            lookups: g(&self.lookups),
            spans: g(&self.spans),
            no_span: g(&self.no_span),
            untracked: g(&self.untracked),
            tasks: g(&self.tasks),
            invalid: g(&self.invalid),
            switched: g(&self.switched),
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Why a context read stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextError {
    /// A read failed.
    Read(ReadError),
    /// An object had an unexpected type or an implausible size.
    Invalid,
    /// Deeper than a HAMT can be.
    TooDeep,
    /// The thread entered another context, or a span started or ended on it, while its frames
    /// were copied.
    Switched,
}

impl From<ReadError> for ContextError {
    fn from(e: ReadError) -> Self {
        Self::Read(e)
    }
}

/// `hamt_hash` of Python/hamt.c: the 64-bit `Py_hash_t` folded to 32 bits by XOR, with -1
/// mapped to -2.
pub fn hamt_hash(py_hash: i64) -> i32 {
    let folded = (py_hash as i32) ^ ((py_hash >> 32) as i32);
    if folded == -1 {
        -2
    } else {
        folded
    }
}

fn type_ok(expected: u64, actual: u64) -> bool {
    expected == 0 || expected == actual
}

/// Bytes of a HAMT node header (every node kind's fixed fields fit).
const NODE_HEAD: usize = 32;
/// Bytes read per HAMT node: the header and the first 8 key/value pairs of a bitmap node.
const NODE_READ: usize = HAMT_BITMAP_ARRAY + 8 * 16;
/// Most bytes read at once for a slot value (header and data).
const VALUE_READ: usize = 128;

/// Looks `key` (an object address, compared by identity as ContextVars are) up in the HAMT
/// whose root node is `node`; `hash` is [`hamt_hash`] of the key. Returns the value's address.
/// Node types are told apart by `types`, which must all be known (non-zero).
pub fn hamt_find(
    reader: &dyn MemoryReader,
    types: &HamtTypes,
    mut node: u64,
    key: u64,
    hash: i32,
) -> Result<Option<u64>, ContextError> {
    let mut shift = 0u32;
    let mut buf = [0u8; NODE_READ];
    for _ in 0..HAMT_MAX_DEPTH {
        // One read for the node's header and its first key/value pairs (a context's root
        // usually holds all its variables); a node at the end of mapped memory, where the
        // longer read fails, is read again with just its header.
        let got = match reader.read(node, &mut buf) {
            Ok(()) => NODE_READ,
            Err(_) => {
                reader.read(node, &mut buf[..NODE_HEAD])?;
                NODE_HEAD
            }
        };
        let head = &buf[..NODE_HEAD];
        let ty = field_u64(head, OB_TYPE);
        let idx = ((hash as u32) >> shift.min(31)) & 0x1f;
        if ty == types.bitmap {
            let bitmap = field_u64(head, HAMT_BITMAP_BITMAP) as u32;
            let size = field_u64(head, OB_SIZE);
            if size != 2 * u64::from(bitmap.count_ones()) {
                return Err(ContextError::Invalid);
            }
            let bit = 1u32 << idx;
            if bitmap & bit == 0 {
                return Ok(None);
            }
            let pos = u64::from((bitmap & (bit - 1)).count_ones());
            let at = HAMT_BITMAP_ARRAY + pos as usize * 16;
            let mut pair = [0u8; 16];
            match buf.get(at..at + 16).filter(|_| at + 16 <= got) {
                Some(b) => pair.copy_from_slice(b),
                None => reader.read(node.wrapping_add(at as u64), &mut pair)?,
            }
            let (k, v) = (field_u64(&pair, 0), field_u64(&pair, 8));
            if k == 0 {
                if v == 0 {
                    return Err(ContextError::Invalid);
                }
                node = v;
                shift += 5;
                continue;
            }
            return Ok((k == key).then_some(v));
        } else if ty == types.array {
            let mut child = [0u8; 8];
            reader.read(
                node.wrapping_add(HAMT_ARRAY_ARRAY as u64 + u64::from(idx) * 8),
                &mut child,
            )?;
            match u64::from_le_bytes(child) {
                0 => return Ok(None),
                c => {
                    node = c;
                    shift += 5;
                }
            }
        } else if ty == types.collision {
            let c_hash = field_u64(head, HAMT_COLLISION_HASH) as u32 as i32;
            if c_hash != hash {
                return Ok(None);
            }
            let size = usize::try_from(field_u64(head, OB_SIZE)).unwrap_or(usize::MAX);
            if size > MAX_COLLISION_SLOTS || size % 2 != 0 {
                return Err(ContextError::Invalid);
            }
            let mut slots = [0u8; MAX_COLLISION_SLOTS * 8];
            let slots = slots.get_mut(..size * 8).ok_or(ContextError::Invalid)?;
            reader.read(node.wrapping_add(HAMT_COLLISION_ARRAY as u64), slots)?;
            for pair in slots.chunks_exact(16) {
                if field_u64(pair, 0) == key {
                    return Ok(Some(field_u64(pair, 8)));
                }
            }
            return Ok(None);
        } else {
            return Err(ContextError::Invalid);
        }
    }
    Err(ContextError::TooDeep)
}

/// How a `dict`'s keys object lays out its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DictLayout {
    /// 3.9 and 3.10: `dk_size` at 8, `dk_nentries` at 32, indices at 40 sized by `dk_size`,
    /// entries of (hash, key, value).
    Py39,
    /// 3.11 to 3.13: `dk_log2_size`, `dk_log2_index_bytes` and `dk_kind` bytes at 8, 9 and 10,
    /// `dk_nentries` at 24, indices at 32; entries of (key, value) when every key is a `str`,
    /// else (hash, key, value).
    Py311,
}

impl DictLayout {
    /// The layout of CPython `version`.
    pub fn for_version(version: PythonVersion) -> Self {
        if version.minor >= 11 {
            Self::Py311
        } else {
            Self::Py39
        }
    }
}

/// `PyDictObject.ma_keys` and `ma_values` (3.9 to 3.13).
const DICT_KEYS: usize = 32;
const DICT_VALUES: usize = 40;
/// Bytes read of a dict object and of its keys object's header.
const DICT_HEAD: usize = 48;
/// Most entries scanned in a context dict (OpenTelemetry contexts hold a handful of keys).
pub const MAX_CONTEXT_ENTRIES: u64 = 32;

/// The value stored under `key` (an object address, compared by identity) in the combined
/// `dict` whose first `DICT_HEAD` bytes are `head`, by a scan of its entries. `Ok(None)`:
/// not there. A split table, an implausible size or more than [`MAX_CONTEXT_ENTRIES`] entries
/// is [`ContextError::Invalid`].
pub fn dict_find(
    reader: &dyn MemoryReader,
    layout: DictLayout,
    head: &[u8],
    key: u64,
) -> Result<Option<u64>, ContextError> {
    if field_u64(head, DICT_VALUES) != 0 {
        return Err(ContextError::Invalid);
    }
    let keys = field_u64(head, DICT_KEYS);
    if keys == 0 {
        return Err(ContextError::Invalid);
    }
    let mut k = [0u8; DICT_HEAD];
    reader.read(keys, &mut k[..40])?;
    let (entries, nentries, size, key_at, value_at) = match layout {
        DictLayout::Py39 => {
            let size = field_u64(&k, 8);
            if size == 0 || !size.is_power_of_two() || size > 1 << 32 {
                return Err(ContextError::Invalid);
            }
            let index_bytes = match size {
                0..=0xff => 1,
                0x100..=0xffff => 2,
                _ => 4,
            };
            let at = keys.checked_add(40 + size * index_bytes);
            (at, field_u64(&k, 32), 24, 8, 16)
        }
        DictLayout::Py311 => {
            let (log2_size, log2_index_bytes, kind) = (k[8], k[9], k[10]);
            if log2_size > 32 || log2_index_bytes > 35 || log2_index_bytes < log2_size {
                return Err(ContextError::Invalid);
            }
            let (size, key_at, value_at) = if kind == 0 { (24, 8, 16) } else { (16, 0, 8) };
            (
                keys.checked_add(32 + (1u64 << log2_index_bytes)),
                field_u64(&k, 24),
                size,
                key_at,
                value_at,
            )
        }
    };
    // A garbage keys pointer near the top of the address space is invalid, not a panic.
    let Some(entries) = entries else {
        return Err(ContextError::Invalid);
    };
    if nentries > MAX_CONTEXT_ENTRIES {
        return Err(ContextError::Invalid);
    }
    let mut buf = [0u8; MAX_CONTEXT_ENTRIES as usize * 24];
    let buf = buf
        .get_mut(..nentries as usize * size)
        .ok_or(ContextError::Invalid)?;
    reader.read(entries, buf)?;
    Ok(buf
        .chunks_exact(size)
        .find(|e| field_u64(e, key_at) == key)
        .map(|e| field_u64(e, value_at))
        .filter(|&v| v != 0))
}

/// The span object current in OpenTelemetry's `Context` at `context` (a dict subclass of type
/// `otel.context_type`), or `None` when it holds no span.
pub fn otel_span_object(
    reader: &dyn MemoryReader,
    layout: DictLayout,
    otel: &OtelTarget,
    context: u64,
) -> Result<Option<u64>, ContextError> {
    let mut head = [0u8; DICT_HEAD];
    reader.read(context, &mut head)?;
    if field_u64(&head, OB_TYPE) != otel.context_type {
        return Err(ContextError::Invalid);
    }
    dict_find(reader, layout, &head, otel.span_key)
}

/// Reads the slot of `var` in the context at `ctx_vars`' root. `Ok(None)`: not set, or set
/// to something that is not ours (such as `None`).
fn read_slot(
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

/// What one context lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextSpan {
    /// The context could not be read (or context reading is off): the sample has no span.
    Unknown,
    /// The span current in the running context (`None`: no span).
    Known(Option<ActiveSpan>),
    /// Another context was entered, or a variable of the entered one was set, while the
    /// stack was copied: the sample is dropped and counted in [`ContextCounters::switched`].
    Switched,
}

/// What a context lookup found, kept with a thread's cached stack
/// ([`super::threads::CachedStack::resolution`]) and reused while the thread does not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resolution {
    /// [`ContextSpan::Known`] or [`ContextSpan::Unknown`] (never `Switched`).
    span: ContextSpan,
    /// The task name id, if the context had a task tag.
    task: Option<u32>,
}

#[cfg(test)]
impl Resolution {
    /// A context that held `task` and could not be read for a span.
    pub(crate) fn unknown_with_task(task: Option<u32>) -> Self {
        Self {
            span: ContextSpan::Unknown,
            task,
        }
    }
}

/// Per-walker state of context reading: the target, a buffer for the task name, counters.
#[derive(Debug)]
pub(crate) struct ContextReader {
    tstate_context: Option<usize>,
    dict_layout: DictLayout,
    target: Option<ContextTarget>,
    /// The span-object table the span processor fills, by object address.
    span_objects: Option<Arc<SpanObjectTable>>,
    names: TaskNames,
    counters: Arc<ContextCounters>,
    task: NameBuf,
    has_task: bool,
    /// The name id behind `task`.
    task_id: Option<u32>,
    /// `tstate->context` read before the thread's frames ([`NOT_READ`] if not read).
    before: u64,
    /// That context's `ctx_vars` (its HAMT), read in the same syscall when the context was
    /// the one last seen on the thread ([`NOT_READ`] otherwise).
    before_vars: u64,
    /// The span and task found by a full lookup before the frames were copied
    /// ([`ContextReader::look_before`]); the lookup after the copy must find the same.
    before_found: Option<(Option<ActiveSpan>, Option<u32>)>,
    /// The thread's span-boundary count read before its frames were copied
    /// ([`SpanObjectTable::span_boundaries`]): the thread id and the count.
    before_boundaries: Option<(u64, u64)>,
    /// Set while [`ContextReader::look_before`] looks up: its misses are not counted twice.
    quiet: bool,
    /// The context last seen on each thread state, direct-mapped: lets [`ContextReader::before`]
    /// read `tstate->context` and that context's `ctx_vars` in one batched read.
    last_ctx: Box<[(u64, u64); CTX_CACHE]>,
}

/// Entries of [`ContextReader::last_ctx`] (a miss only costs the `ctx_vars` check).
const CTX_CACHE: usize = 256;

fn ctx_slot(tstate: u64) -> usize {
    (tstate.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % CTX_CACHE
}

/// [`ContextReader::before`] did not read the context pointer.
const NOT_READ: u64 = u64::MAX;

impl ContextReader {
    pub(crate) fn new(version: PythonVersion) -> Self {
        Self {
            tstate_context: tstate_context(version),
            dict_layout: DictLayout::for_version(version),
            target: None,
            span_objects: None,
            names: TaskNames::default(),
            counters: Arc::default(),
            task: NameBuf::new(),
            has_task: false,
            task_id: None,
            before: NOT_READ,
            before_vars: NOT_READ,
            before_found: None,
            before_boundaries: None,
            quiet: false,
            last_ctx: Box::new([(0, 0); CTX_CACHE]),
        }
    }

    /// Remembers which context is entered on the thread, and which variables it holds,
    /// before its frames are copied, so that [`ContextReader::emit`] can drop a sample whose
    /// span or task changed during the walk: another context entered (an asyncio task
    /// switch) or a variable set in the same context (a span entered or left on a thread).
    ///
    /// One syscall: `tstate->context` and the `ctx_vars` of the context last seen on the
    /// thread are read together; the second is used only if the first matches it.
    pub(crate) fn before(&mut self, reader: &dyn MemoryReader, tstate: u64) {
        self.forget_before();
        let Some(off) = self.context_offset() else {
            return;
        };
        let mut b = [0u8; 8];
        match self.last_context(tstate) {
            Some(seen) => {
                let mut v = [0u8; 8];
                let (ctx_read, vars_read) = reader.read_pair(
                    tstate.wrapping_add(off as u64),
                    &mut b,
                    seen.wrapping_add(CONTEXT_VARS as u64),
                    &mut v,
                );
                if ctx_read.is_ok() {
                    let vars = vars_read.is_ok().then(|| u64::from_le_bytes(v));
                    self.observe_before(tstate, u64::from_le_bytes(b), vars);
                }
            }
            None => {
                if reader.read(tstate.wrapping_add(off as u64), &mut b).is_ok() {
                    self.observe_before(tstate, u64::from_le_bytes(b), None);
                }
            }
        }
    }

    /// Where `tstate->context` is, when contexts are read (`None`: they are not).
    pub(crate) fn context_offset(&self) -> Option<usize> {
        self.target.and(self.tstate_context)
    }

    /// The context last seen entered on `tstate`, whose `ctx_vars` a caller of
    /// [`ContextReader::observe_before`] may read in the same syscall as the thread state.
    pub(crate) fn last_context(&self, tstate: u64) -> Option<u64> {
        let (seen_ts, seen_ctx) = self.last_ctx[ctx_slot(tstate)];
        (seen_ts == tstate && seen_ctx != 0).then_some(seen_ctx)
    }

    /// Records what the caller read before copying the frames: `ctx`, the thread's
    /// `tstate->context`, and `vars`, the `ctx_vars` of [`ContextReader::last_context`] read at
    /// the same time (used only if `ctx` is that context).
    pub(crate) fn observe_before(&mut self, tstate: u64, ctx: u64, vars: Option<u64>) {
        self.before = ctx;
        self.before_vars = match vars {
            Some(v) if self.last_context(tstate) == Some(ctx) => v,
            _ => NOT_READ,
        };
    }

    /// Nothing was read before the frames: no switch can be detected for this sample.
    pub(crate) fn forget_before(&mut self) {
        self.before = NOT_READ;
        self.before_vars = NOT_READ;
        self.before_found = None;
        self.before_boundaries = None;
    }

    /// The span boundaries counted so far on the thread whose `tstate->thread_id` is
    /// `thread_id`, if the span processor counts them; hand it to
    /// [`ContextReader::expect_after`] with what [`ContextReader::look_before`] found.
    pub(crate) fn span_boundaries(&self, thread_id: u64) -> Option<(u64, u64)> {
        let table = self.span_objects.as_ref()?;
        Some((thread_id, table.span_boundaries(thread_id)))
    }

    /// Looks the thread's span and task up in full, before its frame pointer is read and its
    /// frames are copied; hand the result to [`ContextReader::expect_after`]. Addresses alone
    /// cannot prove that the context did not change during the copy: a span's exit frees the
    /// variables' HAMT and the next entry may get the same address (ADR 0020). A span is
    /// current on a thread over one stretch of time, so finding the same span before the
    /// frame pointer was read and after the frames were copied proves it was current
    /// throughout.
    pub(crate) fn look_before(
        &mut self,
        reader: &dyn MemoryReader,
        tstate: u64,
    ) -> Option<(Option<ActiveSpan>, Option<u32>)> {
        let (Some(off), Some(target)) = (self.tstate_context, self.target) else {
            return None;
        };
        let t = &target.types;
        if t.bitmap == 0 || t.array == 0 || t.collision == 0 {
            return None;
        }
        let saved = (self.before, self.before_vars);
        (self.before, self.before_vars) = (NOT_READ, NOT_READ);
        self.quiet = true;
        let found = self.lookup(reader, tstate, off, &target);
        self.quiet = false;
        (self.before, self.before_vars) = saved;
        found.ok()
    }

    /// The lookup after the copy must find what [`ContextReader::look_before`] found, and no
    /// span may have started or ended on the thread since `boundaries` was read
    /// ([`ContextReader::span_boundaries`]), or the sample is dropped as switched. The second
    /// catches what the first cannot: a span that started and ended during the copy leaves
    /// the same span (or none) current on both sides, but its frames may be in the copy.
    pub(crate) fn expect_after(
        &mut self,
        found: Option<(Option<ActiveSpan>, Option<u32>)>,
        boundaries: Option<(u64, u64)>,
    ) {
        self.before_found = found;
        self.before_boundaries = boundaries;
    }

    /// A span started or ended on the thread since `before` ([`ContextReader::span_boundaries`]).
    fn crossed_boundary(&self, before: Option<(u64, u64)>) -> bool {
        match (before, &self.span_objects) {
            (Some((thread_id, n)), Some(table)) => table.span_boundaries(thread_id) != n,
            _ => false,
        }
    }

    /// The span and task of the context entered on the thread state at `tstate`. Never
    /// fails: what cannot be read is counted and reported as [`ContextSpan::Unknown`].
    pub(crate) fn resolve(&mut self, reader: &dyn MemoryReader, tstate: u64) -> ContextSpan {
        self.has_task = false;
        self.task_id = None;
        let boundaries = self.before_boundaries.take();
        let (Some(off), Some(target)) = (self.tstate_context, self.target) else {
            return ContextSpan::Unknown;
        };
        let t = &target.types;
        if t.bitmap == 0 || t.array == 0 || t.collision == 0 {
            // Node kinds cannot be told apart: do not guess.
            return ContextSpan::Unknown;
        }
        bump(&self.counters.lookups);
        let before = self.before_found.take();
        let found = self.lookup(reader, tstate, off, &target);
        // Read after the lookup: a span that ends while it reads is seen.
        let crossed = self.crossed_boundary(boundaries);
        match found {
            Ok(found) if crossed || before.is_some_and(|b| b != found) => {
                bump(&self.counters.switched);
                ContextSpan::Switched
            }
            Ok((span, task)) => {
                match span {
                    Some(_) => bump(&self.counters.spans),
                    None => bump(&self.counters.no_span),
                }
                if let Some(id) = task {
                    bump(&self.counters.tasks);
                    self.set_task(id);
                }
                ContextSpan::Known(span)
            }
            Err(ContextError::Switched) => {
                bump(&self.counters.switched);
                ContextSpan::Switched
            }
            // Read whole before the copy and torn after it: changed while it was read (a
            // HAMT freed under the reader) rather than never readable.
            Err(_) if before.is_some() || crossed => {
                bump(&self.counters.switched);
                ContextSpan::Switched
            }
            Err(_) => {
                bump(&self.counters.invalid);
                ContextSpan::Unknown
            }
        }
    }

    fn lookup(
        &mut self,
        reader: &dyn MemoryReader,
        tstate: u64,
        off: usize,
        target: &ContextTarget,
    ) -> Result<(Option<ActiveSpan>, Option<u32>), ContextError> {
        let mut b = [0u8; 8];
        reader.read(tstate.wrapping_add(off as u64), &mut b)?;
        let ctx = u64::from_le_bytes(b);
        // A thread's first context is created lazily (null before): not a switch.
        if self.before != NOT_READ && self.before != 0 && self.before != ctx {
            return Err(ContextError::Switched);
        }
        if ctx == 0 {
            // No context was ever entered or created on this thread: no ContextVar is set.
            return Ok((None, None));
        }
        let mut c = [0u8; CONTEXT_VARS + 8];
        reader.read(ctx, &mut c)?;
        if !type_ok(target.types.context, field_u64(&c, OB_TYPE)) {
            return Err(ContextError::Invalid);
        }
        let hamt = field_u64(&c, CONTEXT_VARS);
        if hamt == 0 {
            return Err(ContextError::Invalid);
        }
        self.last_ctx[ctx_slot(tstate)] = (tstate, ctx);
        // A variable was set in this context while the frames were copied (the HAMT is
        // immutable, so every set installs a new one): the span may not match the frames.
        if self.before_vars != NOT_READ && self.before_vars != hamt {
            return Err(ContextError::Switched);
        }
        let mut h = [0u8; HAMT_ROOT + 8];
        reader.read(hamt, &mut h)?;
        if !type_ok(target.types.hamt, field_u64(&h, OB_TYPE)) {
            return Err(ContextError::Invalid);
        }
        let root = field_u64(&h, HAMT_ROOT);
        if root == 0 {
            return Err(ContextError::Invalid);
        }
        // OpenTelemetry's own context first: its span, if our processor started it.
        let mut span = None;
        if target.otel.var != 0 {
            let found = hamt_find(
                reader,
                &target.types,
                root,
                target.otel.var,
                hamt_hash(target.otel.hash),
            )?;
            if let Some(context) = found {
                if let Some(obj) =
                    otel_span_object(reader, self.dict_layout, &target.otel, context)?
                {
                    span = self.span_objects.as_ref().and_then(|t| t.get(obj));
                    if span.is_none() && !self.quiet {
                        bump(&self.counters.untracked);
                    }
                }
            }
        }
        // Else the span a `run_in_executor` worker was handed.
        if span.is_none() && target.span.var != 0 {
            span = read_slot(reader, &target.types, root, &target.span, SPAN_MAGIC)?
                .and_then(|s| s.active_span());
        }
        let task = if target.task.var != 0 {
            read_slot(reader, &target.types, root, &target.task, TASK_MAGIC)?.map(|s| s.name_id)
        } else {
            None
        };
        Ok((span, task))
    }

    /// Hands `sample` to `sink` with the span and task name of the context running on the
    /// thread state at `tstate` (no span when that context cannot be read).
    /// Returns what was found, unless the context changed while the frames were copied.
    pub(crate) fn emit(
        &mut self,
        reader: &dyn MemoryReader,
        tstate: u64,
        sink: &mut dyn StackSink,
        sample: RawSample<'_>,
    ) -> Option<Resolution> {
        let span = self.resolve(reader, tstate);
        self.hand(span, sink, sample);
        (span != ContextSpan::Switched).then_some(Resolution {
            span,
            task: self.task_id,
        })
    }

    /// Hands `sample` to `sink` with what an earlier [`ContextReader::emit`] found, without
    /// reading memory: for a thread that has not run since.
    pub(crate) fn emit_resolved(
        &mut self,
        r: Resolution,
        sink: &mut dyn StackSink,
        sample: RawSample<'_>,
    ) {
        self.has_task = false;
        self.task_id = None;
        if let Some(id) = r.task {
            self.set_task(id);
        }
        self.hand(r.span, sink, sample);
    }

    fn set_task(&mut self, id: u32) {
        self.names.lookup(id, &mut self.task);
        self.has_task = true;
        self.task_id = Some(id);
    }

    fn hand(&self, span: ContextSpan, sink: &mut dyn StackSink, sample: RawSample<'_>) {
        match span {
            ContextSpan::Known(span) => sink.sample(&RawSample {
                task_name: self.task_name(),
                span: SpanSource::Resolved(span),
                ..sample
            }),
            ContextSpan::Unknown => sink.sample(&sample),
            // Counted in `ContextCounters::switched` (`stats()["context_switched"]`) and, as a
            // torn sample, in the window's stats.
            ContextSpan::Switched => sink.error(WalkError::Torn),
        }
    }

    /// The task name found by the last [`ContextReader::resolve`].
    pub(crate) fn task_name(&self) -> Option<&str> {
        self.has_task.then(|| self.task.as_str())
    }

    /// Reads contexts as `target` describes ([`super::PythonWalker::with_context`]).
    pub(crate) fn set_target(&mut self, target: ContextTarget) {
        self.target = Some(target);
    }

    /// Resolves span objects in `table` ([`super::PythonWalker::with_span_objects`]).
    pub(crate) fn set_span_objects(&mut self, table: Arc<SpanObjectTable>) {
        self.span_objects = Some(table);
    }

    /// The task-name table the task factory fills.
    pub(crate) fn names(&self) -> &TaskNames {
        &self.names
    }

    /// Counters of context reads.
    pub(crate) fn counters(&self) -> &Arc<ContextCounters> {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walker::memory::FakeMemory;
    use crate::walker::Insert;

    const TYPES: HamtTypes = HamtTypes {
        context: 0xc0_0000,
        hamt: 0xc1_0000,
        bitmap: 0xc2_0000,
        array: 0xc3_0000,
        collision: 0xc4_0000,
    };
    const SLOT_TYPE: u64 = 0xd0_0000;

    /// A tiny allocator over a [`FakeMemory`].
    struct Image {
        mem: FakeMemory,
        next: u64,
    }

    impl Image {
        fn new() -> Self {
            Self {
                mem: FakeMemory::new(),
                next: 0x10_0000,
            }
        }
        fn alloc(&mut self, words: &[u64]) -> u64 {
            let a = self.next;
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            self.next += bytes.len() as u64 + 0x40;
            self.mem.insert(a, bytes);
            a
        }
        fn bitmap(&mut self, entries: &[(u32, u64, u64)]) -> u64 {
            let mut bitmap = 0u32;
            let mut sorted = entries.to_vec();
            sorted.sort_by_key(|e| e.0);
            let mut words = vec![1, TYPES.bitmap, 2 * sorted.len() as u64, 0];
            for &(idx, k, v) in &sorted {
                bitmap |= 1 << idx;
                words.push(k);
                words.push(v);
            }
            words[3] = u64::from(bitmap);
            self.alloc(&words)
        }
        fn array(&mut self, children: &[(u32, u64)]) -> u64 {
            let mut words = vec![1, TYPES.array];
            words.extend([0u64; 32]);
            words.push(children.len() as u64);
            for &(i, c) in children {
                words[2 + i as usize] = c;
            }
            self.alloc(&words)
        }
        fn collision(&mut self, hash: i32, pairs: &[(u64, u64)]) -> u64 {
            let mut words = vec![
                1,
                TYPES.collision,
                2 * pairs.len() as u64,
                u64::from(hash as u32),
            ];
            for &(k, v) in pairs {
                words.push(k);
                words.push(v);
            }
            self.alloc(&words)
        }
        fn slot(&mut self, data: SlotData) -> u64 {
            self.alloc(&[
                1,
                SLOT_TYPE,
                data.magic,
                data.trace_hi,
                data.trace_lo,
                data.span_id,
                data.local_root,
                u64::from(data.route) | u64::from(data.name_id) << 32,
            ])
        }
    }

    fn idx(hash: i32, level: u32) -> u32 {
        ((hash as u32) >> (5 * level)) & 0x1f
    }

    #[test]
    fn hash_folding_matches_cpython() {
        assert_eq!(hamt_hash(0x1234_5678), 0x1234_5678);
        assert_eq!(hamt_hash(0x0000_0001_0000_0001), 0);
        assert_eq!(hamt_hash(-1), 0);
        assert_eq!(hamt_hash(0xffff_ffff), -2); // folds to -1
    }

    #[test]
    fn finds_keys_through_bitmap_array_and_collision_nodes() {
        let mut m = Image::new();
        let (key, hash) = (0xabc0u64, 0x0a5f_3c21i32);
        let other = 0xdef0u64;
        // Root bitmap: an unrelated key, and a sub-node where our key lives.
        let coll = m.collision(hash, &[(other, 7), (key, 42)]);
        let arr = m.array(&[(idx(hash, 2), coll)]);
        let sub = m.bitmap(&[(idx(hash, 1), 0, arr), ((idx(hash, 1) + 1) % 32, other, 9)]);
        let root = m.bitmap(&[(idx(hash, 0), 0, sub), ((idx(hash, 0) + 3) % 32, other, 1)]);
        assert_eq!(hamt_find(&m.mem, &TYPES, root, key, hash), Ok(Some(42)));
        // Same hash, different key in a collision node: not found.
        assert_eq!(hamt_find(&m.mem, &TYPES, root, 0x1, hash), Ok(None));
        // Missing bit at the root.
        assert_eq!(hamt_find(&m.mem, &TYPES, root, key, hash ^ 0x4), Ok(None));
        // A direct hit in a bitmap node.
        let flat = m.bitmap(&[(idx(hash, 0), key, 5)]);
        assert_eq!(hamt_find(&m.mem, &TYPES, flat, key, hash), Ok(Some(5)));
        assert_eq!(hamt_find(&m.mem, &TYPES, flat, other, hash), Ok(None));
    }

    #[test]
    fn rejects_garbage_nodes_and_cycles() {
        let mut m = Image::new();
        let hash = 0x21;
        // Wrong type.
        let bad = m.alloc(&[1, 0x9999, 0, 0, 0]);
        assert_eq!(
            hamt_find(&m.mem, &TYPES, bad, 1, hash),
            Err(ContextError::Invalid)
        );
        // Size disagreeing with the bitmap.
        let lying = m.alloc(&[1, TYPES.bitmap, 6, 1 << idx(hash, 0), 0, 0]);
        assert_eq!(
            hamt_find(&m.mem, &TYPES, lying, 1, hash),
            Err(ContextError::Invalid)
        );
        // A sub-node pointing at itself: bounded by the depth cap.
        let a = m.array(&[]);
        for i in 0..32 {
            m.mem.write_u64(a + 16 + i * 8, a);
        }
        assert_eq!(
            hamt_find(&m.mem, &TYPES, a, 1, hash),
            Err(ContextError::TooDeep)
        );
        // Unmapped child.
        let dangling = m.array(&[(idx(hash, 0), 0xdead_0000)]);
        assert!(matches!(
            hamt_find(&m.mem, &TYPES, dangling, 1, hash),
            Err(ContextError::Read(_))
        ));
        // Oversized collision node.
        let huge = m.alloc(&[1, TYPES.collision, 1000, hash as u64]);
        assert_eq!(
            hamt_find(&m.mem, &TYPES, huge, 1, hash),
            Err(ContextError::Invalid)
        );
    }

    #[test]
    fn resolves_span_and_task_from_a_thread_context() {
        let mut m = Image::new();
        let version = PythonVersion::new(3, 12);
        let off = tstate_context(version).unwrap();
        let span_var = SlotVar {
            var: 0x5000,
            hash: 0x1111_2222_3333_4444,
            value_type: SLOT_TYPE,
            data_offset: 16,
        };
        let task_var = SlotVar {
            var: 0x6000,
            hash: 77,
            ..span_var
        };
        let active = ActiveSpan {
            ctx: SpanContext {
                trace_id: TraceId::from_u128(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10).unwrap(),
                span_id: SpanId::from_u64(0xaa).unwrap(),
                local_root_span_id: SpanId::from_u64(0xbb).unwrap(),
            },
            route: LabelId(5),
        };
        let slot = m.slot(SlotData::span(&active));
        let tag = m.slot(SlotData::task(1));
        let (hs, ht) = (hamt_hash(span_var.hash), hamt_hash(task_var.hash));
        assert_ne!(idx(hs, 0), idx(ht, 0));
        let root = m.bitmap(&[
            (idx(hs, 0), span_var.var, slot),
            (idx(ht, 0), task_var.var, tag),
        ]);
        let hamt = m.alloc(&[1, TYPES.hamt, root, 0, 2]);
        let ctx = m.alloc(&[1, TYPES.context, 0, hamt, 0, 0]);
        let mut tstate = vec![0u64; off / 8 + 2];
        tstate[off / 8] = ctx;
        let ts = m.alloc(&tstate);
        let mut no_ctx = vec![0u64; off / 8 + 2];
        no_ctx[0] = 1;
        let ts_empty = m.alloc(&no_ctx);

        let mut r = ContextReader::new(version);
        assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Unknown); // not configured
        r.target = Some(ContextTarget {
            types: TYPES,
            otel: OtelTarget::default(),
            span: span_var,
            task: task_var,
        });
        let id = r.names.intern("handler");
        assert_eq!(id, 1);
        assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Known(Some(active)));
        assert_eq!(r.task_name(), Some("handler"));
        assert_eq!(r.resolve(&m.mem, ts_empty), ContextSpan::Known(None));
        assert_eq!(r.task_name(), None);
        // A value of another type (None, after a detach) means no span.
        m.mem.write_u64(slot + 8, 0x1234);
        assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Known(None));
        // Right type, wrong magic: garbage, counted, no span.
        m.mem.write_u64(slot + 8, SLOT_TYPE);
        m.mem.write_u64(slot + 16, 0);
        assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Unknown);
        // A context of the wrong type.
        m.mem.write_u64(ctx + 8, 0x4321);
        assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Unknown);
        // The thread entered another context while its frames were copied: dropped.
        m.mem.write_u64(ctx + 8, TYPES.context);
        let mut other = vec![0u64; off / 8 + 2];
        other[off / 8] = 0x7777_0000; // another context (only compared)
        let ts_other = m.alloc(&other);
        r.before(&m.mem, ts_other);
        assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Switched);
        // A thread's first context, created lazily, is not a switch.
        r.before(&m.mem, ts_empty);
        assert_ne!(r.resolve(&m.mem, ts), ContextSpan::Switched);
        r.before(&m.mem, ts);
        assert_ne!(r.resolve(&m.mem, ts), ContextSpan::Switched);
        // Same context, but a span was entered or left while the frames were copied (every
        // ContextVar.set installs a new HAMT): dropped too.
        r.before(&m.mem, ts);
        m.mem.write_u64(ctx + CONTEXT_VARS as u64, 0x8888_0000);
        assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Switched);
        m.mem.write_u64(ctx + CONTEXT_VARS as u64, hamt);
        r.before(&m.mem, ts);
        assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Unknown); // the slot's magic is still 0
        let s = r.counters.snapshot();
        assert_eq!(s.switched, 2);
        assert_eq!(
            (s.lookups, s.spans, s.no_span, s.tasks, s.invalid),
            (10, 1, 2, 2, 5)
        );
    }

    #[test]
    fn task_names_are_capped() {
        let names = TaskNames::default();
        for i in 0..MAX_TASK_NAMES {
            assert_eq!(names.intern(&format!("t{i}")), i as u32 + 1);
        }
        assert_eq!(names.intern("t0"), 1);
        assert_eq!(names.intern("one-too-many"), 0);
        let mut buf = NameBuf::new();
        names.lookup(0, &mut buf);
        assert_eq!(buf.as_str(), OTHER_TASK);
        names.lookup(2, &mut buf);
        assert_eq!(buf.as_str(), "t1");
    }

    const OTEL_CONTEXT_TYPE: u64 = 0xe0_0000;
    const SPAN_KEY: u64 = 0xe1_0000;

    impl Image {
        /// A combined dict of `layout` holding `entries` (key, value), with its keys object;
        /// `deleted` leaves a hole (key NULL, or 3.9's dummy with a NULL value) first.
        fn dict(&mut self, layout: DictLayout, ty: u64, entries: &[(u64, u64)], hole: bool) -> u64 {
            let mut all: Vec<(u64, u64)> = Vec::new();
            if hole {
                all.push((if layout == DictLayout::Py39 { 0x77 } else { 0 }, 0));
            }
            all.extend_from_slice(entries);
            let n = all.len() as u64;
            let mut keys: Vec<u64> = match layout {
                // refcnt, dk_size 8, lookup, usable, nentries; then 8 one-byte indices.
                DictLayout::Py39 => vec![1, 8, 0, 8 - n, n, 0],
                // refcnt, log2_size 3 | log2_index_bytes 3 << 8 | kind UNICODE << 16,
                // usable, nentries; then 8 one-byte indices.
                DictLayout::Py311 => vec![1, 3 | 3 << 8 | 1 << 16, 8 - n, n, 0],
            };
            for (k, v) in all {
                if layout == DictLayout::Py39 {
                    keys.push(0x1234); // me_hash
                }
                keys.push(k);
                keys.push(v);
            }
            let keys = self.alloc(&keys);
            self.alloc(&[1, ty, n, 0, keys, 0])
        }
    }

    #[test]
    fn finds_the_span_key_in_a_context_dict_of_every_layout() {
        for layout in [DictLayout::Py39, DictLayout::Py311] {
            let mut m = Image::new();
            let d = m.dict(
                layout,
                OTEL_CONTEXT_TYPE,
                &[(0x10, 1), (SPAN_KEY, 0xabc)],
                true,
            );
            let mut head = [0u8; DICT_HEAD];
            m.mem.read(d, &mut head).unwrap();
            assert_eq!(
                dict_find(&m.mem, layout, &head, SPAN_KEY),
                Ok(Some(0xabc)),
                "{layout:?}"
            );
            assert_eq!(
                dict_find(&m.mem, layout, &head, 0x99),
                Ok(None),
                "{layout:?}"
            );
            let empty = m.dict(layout, OTEL_CONTEXT_TYPE, &[], false);
            m.mem.read(empty, &mut head).unwrap();
            assert_eq!(
                dict_find(&m.mem, layout, &head, SPAN_KEY),
                Ok(None),
                "{layout:?}"
            );
        }
    }

    #[test]
    fn a_split_or_oversized_dict_is_invalid_not_guessed() {
        let mut m = Image::new();
        let d = m.dict(
            DictLayout::Py311,
            OTEL_CONTEXT_TYPE,
            &[(SPAN_KEY, 5)],
            false,
        );
        let mut head = [0u8; DICT_HEAD];
        m.mem.read(d, &mut head).unwrap();
        let mut split = head;
        split[DICT_VALUES..DICT_VALUES + 8].copy_from_slice(&0x5000u64.to_le_bytes());
        assert_eq!(
            dict_find(&m.mem, DictLayout::Py311, &split, SPAN_KEY),
            Err(ContextError::Invalid)
        );
        let keys = field_u64(&head, DICT_KEYS);
        m.mem.write_u64(keys + 24, MAX_CONTEXT_ENTRIES + 1);
        assert_eq!(
            dict_find(&m.mem, DictLayout::Py311, &head, SPAN_KEY),
            Err(ContextError::Invalid)
        );
        // A readable keys header whose entries would lie past the top of the address space.
        let top = u64::MAX - 100;
        let mut wrapping = head;
        wrapping[DICT_KEYS..DICT_KEYS + 8].copy_from_slice(&top.to_le_bytes());
        let mut py39 = vec![0u8; 48];
        py39[8..16].copy_from_slice(&(1u64 << 32).to_le_bytes()); // dk_size
        m.mem.insert(top, py39);
        assert_eq!(
            dict_find(&m.mem, DictLayout::Py39, &wrapping, SPAN_KEY),
            Err(ContextError::Invalid)
        );
        let mut py311 = vec![0u8; 48];
        py311[8..11].copy_from_slice(&[32, 35, 1]); // log2 size, log2 index bytes, kind
        m.mem.insert(top, py311);
        assert_eq!(
            dict_find(&m.mem, DictLayout::Py311, &wrapping, SPAN_KEY),
            Err(ContextError::Invalid)
        );
        let mut dangling = head;
        dangling[DICT_KEYS..DICT_KEYS + 8].copy_from_slice(&0xdead_0000u64.to_le_bytes());
        assert!(matches!(
            dict_find(&m.mem, DictLayout::Py311, &dangling, SPAN_KEY),
            Err(ContextError::Read(_))
        ));
    }

    /// OpenTelemetry's context variable in the images of the tests below.
    const OTEL: OtelTarget = OtelTarget {
        var: 0x7000,
        hash: 0x55,
        context_type: OTEL_CONTEXT_TYPE,
        span_key: SPAN_KEY,
    };

    #[test]
    fn the_span_comes_from_opentelemetrys_context_when_our_processor_started_it() {
        let mut m = Image::new();
        let version = PythonVersion::new(3, 12);
        let off = tstate_context(version).unwrap();
        let otel = OTEL;
        let slot_var = SlotVar {
            var: 0x5000,
            hash: 0x1111_2222_3333_4444,
            value_type: SLOT_TYPE,
            data_offset: 16,
        };
        let active = |id: u64| ActiveSpan {
            ctx: SpanContext {
                trace_id: TraceId::from_u128(7).unwrap(),
                span_id: SpanId::from_u64(id).unwrap(),
                local_root_span_id: SpanId::from_u64(1).unwrap(),
            },
            route: LabelId(3),
        };
        let (ours, foreign, handed) = (0xa000u64, 0xb000u64, m.slot(SlotData::span(&active(9))));
        let table = Arc::new(SpanObjectTable::with_slots(64));
        assert_eq!(table.insert(ours, active(2), true), Insert::Listed);
        let thread = |m: &mut Image, span: Option<u64>, slot: Option<u64>| {
            let entries: Vec<(u64, u64)> = span.map(|s| (SPAN_KEY, s)).into_iter().collect();
            let ctx_dict = m.dict(DictLayout::Py311, OTEL_CONTEXT_TYPE, &entries, false);
            let (ho, hs) = (hamt_hash(otel.hash), hamt_hash(slot_var.hash));
            assert_ne!(idx(ho, 0), idx(hs, 0));
            let mut pairs = vec![(idx(ho, 0), otel.var, ctx_dict)];
            if let Some(s) = slot {
                pairs.push((idx(hs, 0), slot_var.var, s));
            }
            let root = m.bitmap(&pairs);
            let hamt = m.alloc(&[1, TYPES.hamt, root, 0, pairs.len() as u64]);
            let ctx = m.alloc(&[1, TYPES.context, 0, hamt, 0, 0]);
            let mut tstate = vec![0u64; off / 8 + 2];
            tstate[off / 8] = ctx;
            m.alloc(&tstate)
        };
        let with_ours = thread(&mut m, Some(ours), None);
        let with_foreign = thread(&mut m, Some(foreign), None);
        let without = thread(&mut m, None, None);
        let in_worker = thread(&mut m, None, Some(handed));
        let ours_in_worker = thread(&mut m, Some(ours), Some(handed));

        let mut r = ContextReader::new(version);
        r.target = Some(ContextTarget {
            types: TYPES,
            otel,
            span: slot_var,
            task: SlotVar::default(),
        });
        r.span_objects = Some(table.clone());
        assert_eq!(
            r.resolve(&m.mem, with_ours),
            ContextSpan::Known(Some(active(2)))
        );
        // A span our processor did not start is not attributed, and is counted.
        assert_eq!(r.resolve(&m.mem, with_foreign), ContextSpan::Known(None));
        assert_eq!(r.counters.snapshot().untracked, 1);
        assert_eq!(r.resolve(&m.mem, without), ContextSpan::Known(None));
        // A run_in_executor worker runs under the span it was handed...
        assert_eq!(
            r.resolve(&m.mem, in_worker),
            ContextSpan::Known(Some(active(9)))
        );
        // ...unless it made a span of its own current.
        assert_eq!(
            r.resolve(&m.mem, ours_in_worker),
            ContextSpan::Known(Some(active(2)))
        );
        // Once the table lets the object go, its samples carry no span.
        table.remove(ours);
        assert_eq!(r.resolve(&m.mem, with_ours), ContextSpan::Known(None));
        // A value that is not an OpenTelemetry Context is not read as one.
        let not_a_context = m.dict(DictLayout::Py311, 0x1, &[(SPAN_KEY, ours)], false);
        let root = m.bitmap(&[(idx(hamt_hash(otel.hash), 0), otel.var, not_a_context)]);
        let hamt = m.alloc(&[1, TYPES.hamt, root, 0, 1]);
        let ctx = m.alloc(&[1, TYPES.context, 0, hamt, 0, 0]);
        let mut tstate = vec![0u64; off / 8 + 2];
        tstate[off / 8] = ctx;
        let ts = m.alloc(&tstate);
        assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Unknown);
        assert_eq!(r.counters.snapshot().invalid, 1);
    }

    /// A span that starts and ends while a thread's frames are copied leaves no span current
    /// both before and after the copy, and its context's variables may even be reallocated at
    /// their old address; but its frames may be in the copy. The span processor counts the
    /// boundary, and the sample is dropped as switched.
    #[test]
    fn a_span_that_began_and_ended_during_the_copy_drops_the_sample() {
        let mut m = Image::new();
        let version = PythonVersion::new(3, 12);
        let off = tstate_context(version).unwrap();
        let otel = OTEL;
        // A thread with no span current: its context holds an empty OpenTelemetry Context.
        let ctx_dict = m.dict(DictLayout::Py311, OTEL_CONTEXT_TYPE, &[], false);
        let root = m.bitmap(&[(idx(hamt_hash(otel.hash), 0), otel.var, ctx_dict)]);
        let hamt = m.alloc(&[1, TYPES.hamt, root, 0, 1]);
        let ctx = m.alloc(&[1, TYPES.context, 0, hamt, 0, 0]);
        let mut tstate = vec![0u64; off / 8 + 2];
        tstate[off / 8] = ctx;
        let ts = m.alloc(&tstate);
        let (me, other) = (0x7f00_1234_5700u64, 0x7f00_9876_5700u64);
        let table = Arc::new(SpanObjectTable::with_slots(64));

        let mut r = ContextReader::new(version);
        r.target = Some(ContextTarget {
            types: TYPES,
            otel,
            span: SlotVar::default(),
            task: SlotVar::default(),
        });
        r.span_objects = Some(table.clone());
        let copy = |r: &mut ContextReader, during: &dyn Fn()| {
            let boundaries = r.span_boundaries(me);
            let found = r.look_before(&m.mem, ts);
            during();
            r.expect_after(found, boundaries);
            r.resolve(&m.mem, ts)
        };

        assert_eq!(copy(&mut r, &|| {}), ContextSpan::Known(None));
        // A span started and ended on the thread: the same context on both sides.
        let both = || {
            table.span_boundary(me);
            table.span_boundary(me);
        };
        assert_eq!(copy(&mut r, &both), ContextSpan::Switched);
        assert_eq!(r.counters.snapshot().switched, 1);
        // Only the end of a span seen before the copy began.
        assert_eq!(
            copy(&mut r, &|| table.span_boundary(me)),
            ContextSpan::Switched
        );
        // Another thread's spans do not drop this thread's samples (unless their ids share a
        // counter, which these do not).
        assert_ne!(table.span_boundaries(other), table.span_boundaries(me));
        assert_eq!(
            copy(&mut r, &|| table.span_boundary(other)),
            ContextSpan::Known(None)
        );
        // A resolve with no count before it (a thread that did not run) does not compare.
        table.span_boundary(me);
        assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Known(None));
    }
}
