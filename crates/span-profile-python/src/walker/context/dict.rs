//! `dict` reads: the keys layouts of 3.9 to 3.13 ([`DictLayout`]), a bounded scan for one key
//! ([`dict_find`]), and the span object in OpenTelemetry's `Context` ([`OtelTarget`],
//! [`otel_span_object`]).

use super::error::ContextError;
use crate::walker::layout::{PythonVersion, OB_TYPE};
use crate::walker::memory::{field_u64, MemoryReader};

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
pub(super) const DICT_KEYS: usize = 32;
pub(super) const DICT_VALUES: usize = 40;
/// Bytes read of a dict object and of its keys object's header.
pub(super) const DICT_HEAD: usize = 48;
/// Most entries scanned in a context dict (OpenTelemetry contexts hold a handful of keys).
pub(crate) const MAX_CONTEXT_ENTRIES: u64 = 32;

/// The value stored under `key` (an object address, compared by identity) in the combined
/// `dict` whose first `DICT_HEAD` bytes are `head`, by a scan of its entries. `Ok(None)`:
/// not there. A split table, an implausible size or more than [`MAX_CONTEXT_ENTRIES`] entries
/// is [`ContextError::Invalid`].
pub(crate) fn dict_find(
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
