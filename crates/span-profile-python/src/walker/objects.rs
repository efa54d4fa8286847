//! Copying `str` and `bytes` objects out of interpreter memory (on a code object's first sight
//! only, so these may allocate).

use super::layout::{
    Layout, BYTES_SIZE, BYTES_SVAL, OB_TYPE, UNICODE_ASCII_BIT, UNICODE_COMPACT_BIT,
    UNICODE_KIND_MASK, UNICODE_KIND_SHIFT,
};
use super::memory::{field_i64, field_u64, field_u8, MemoryReader, ReadError};

/// A string length beyond this is garbage, not a name: the read is refused. Only
/// `max_chars` characters are ever copied, so a long but real name (Python allows megabytes)
/// costs no more than a short one and is cut, not refused: the bound only rejects lengths no
/// str in a real heap can have (1 TiB).
pub(crate) const MAX_PLAUSIBLE_STR: i64 = 1 << 40;

/// Why an object could not be copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjectError {
    Read(ReadError),
    /// `ob_type` is not the expected type.
    WrongType,
    /// A length or state field fails validation.
    Invalid,
}

impl From<ReadError> for ObjectError {
    fn from(e: ReadError) -> Self {
        Self::Read(e)
    }
}

/// Addresses of the type objects used to validate what the walker reads; 0 disables a check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeAddresses {
    /// `&PyCode_Type` (`id(types.CodeType)`).
    pub code: u64,
    /// `&PyUnicode_Type` (`id(str)`).
    pub unicode: u64,
    /// `&PyBytes_Type` (`id(bytes)`).
    pub bytes: u64,
    /// `&PyFrame_Type` (`id(types.FrameType)`), checked on 3.9/3.10 frames.
    pub frame: u64,
}

pub(crate) fn type_matches(expected: u64, obj_header: &[u8]) -> bool {
    expected == 0 || field_u64(obj_header, OB_TYPE) == expected
}

/// The fixed part of a `str` object, validated: what both a copy and a print start from.
struct StrHead {
    length: i64,
    kind: u8,
    compact: bool,
    ascii: bool,
}

impl StrHead {
    /// Where a compact string's characters start, from the object's address; `None` for a
    /// legacy string, whose characters are behind a pointer.
    fn inline_data(&self, layout: &Layout) -> Option<usize> {
        match (self.compact, self.ascii) {
            (true, true) => Some(layout.unicode_ascii_size),
            (true, false) => Some(layout.unicode_compact_size),
            (false, _) => None,
        }
    }
}

/// Reads and validates the fixed part every `str` has (compact non-ASCII and legacy strings
/// have more after it, read only when needed: a small object may end right after it).
fn str_head(
    reader: &dyn MemoryReader,
    layout: &Layout,
    types: &TypeAddresses,
    addr: u64,
) -> Result<StrHead, ObjectError> {
    let mut head = [0u8; 64];
    let head = head
        .get_mut(..layout.unicode_ascii_size)
        .ok_or(ObjectError::Invalid)?;
    reader.read(addr, head)?;
    if !type_matches(types.unicode, head) {
        return Err(ObjectError::WrongType);
    }
    let length = field_i64(head, layout.unicode_length);
    if !(0..=MAX_PLAUSIBLE_STR).contains(&length) {
        return Err(ObjectError::Invalid);
    }
    let state = field_u8(head, layout.unicode_state);
    if let Some(ready) = layout.unicode_ready_bit {
        if state & ready == 0 {
            return Err(ObjectError::Invalid);
        }
    }
    let kind = (state >> UNICODE_KIND_SHIFT) & UNICODE_KIND_MASK;
    let compact = state & UNICODE_COMPACT_BIT != 0;
    let ascii = state & UNICODE_ASCII_BIT != 0;
    if !matches!(kind, 1 | 2 | 4) || (ascii && kind != 1) {
        return Err(ObjectError::Invalid);
    }
    Ok(StrHead {
        length,
        kind,
        compact,
        ascii,
    })
}

/// Copies the `str` at `addr`, keeping at most `max_chars` characters (longer strings are cut
/// and end in `…`).
pub(crate) fn read_str(
    reader: &dyn MemoryReader,
    layout: &Layout,
    types: &TypeAddresses,
    addr: u64,
    max_chars: usize,
) -> Result<String, ObjectError> {
    let head = str_head(reader, layout, types, addr)?;
    let (length, kind, ascii) = (head.length, head.kind, head.ascii);
    let data = match head.inline_data(layout) {
        Some(off) => addr.wrapping_add(off as u64),
        None => {
            let mut p = [0u8; 8];
            reader.read(addr.wrapping_add(layout.unicode_data as u64), &mut p)?;
            match u64::from_le_bytes(p) {
                0 => return Err(ObjectError::Invalid),
                p => p,
            }
        }
    };
    let chars = (length as usize).min(max_chars);
    let mut raw = vec![0u8; chars * usize::from(kind)];
    reader.read(data, &mut raw)?;
    let mut out = String::with_capacity(chars + 3);
    match kind {
        1 if ascii => {
            if !raw.is_ascii() {
                return Err(ObjectError::Invalid);
            }
            out.extend(raw.iter().map(|&b| char::from(b)));
        }
        1 => out.extend(raw.iter().map(|&b| char::from(b))),
        2 => out.extend(
            raw.chunks_exact(2)
                .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
                .map(|u| char::from_u32(u).unwrap_or(char::REPLACEMENT_CHARACTER)),
        ),
        _ => out.extend(
            raw.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .map(|u| char::from_u32(u).unwrap_or(char::REPLACEMENT_CHARACTER)),
        ),
    }
    if (length as usize) > chars {
        out.push('…');
    }
    Ok(out)
}

/// Copies the contents of the `bytes` object at `addr`, refusing more than `max_len` bytes.
pub(crate) fn read_bytes(
    reader: &dyn MemoryReader,
    types: &TypeAddresses,
    addr: u64,
    max_len: usize,
) -> Result<Box<[u8]>, ObjectError> {
    let mut head = [0u8; BYTES_SVAL];
    reader.read(addr, &mut head)?;
    if !type_matches(types.bytes, &head) {
        return Err(ObjectError::WrongType);
    }
    let len = usize::try_from(field_i64(&head, BYTES_SIZE)).map_err(|_| ObjectError::Invalid)?;
    if len > max_len {
        return Err(ObjectError::Invalid);
    }
    let mut out = vec![0u8; len].into_boxed_slice();
    reader.read(addr.wrapping_add(BYTES_SVAL as u64), &mut out)?;
    Ok(out)
}

/// Most bytes of an object's content a print keeps: a longer string or line table is compared
/// on its first `MAX_PRINT` bytes (and its length) only.
pub(crate) const MAX_PRINT: usize = 4096;

/// What identifies the content of a `str` or `bytes` object: its bytes as copied, but for the
/// fields that change while the object lives (reference count, cached hash, `str`'s interned
/// bits and cached UTF-8 or wide copies), which are zeroed. An address that still holds an
/// object with this print holds the same characters or bytes, whatever object it now is
/// (ADR 0020): that is what a cached name or line table is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectPrint {
    bytes: Box<[u8]>,
    /// Zeroed: `0..8` and this range; and, for a `str`, the state byte at `.1` keeps only its
    /// kind, compact and ascii bits.
    volatile: (u16, u16),
    state_at: Option<u16>,
}

/// The `str` state bits a print keeps (`interned` changes when a string is interned later).
const STR_STATE_KEPT: u8 =
    (UNICODE_KIND_MASK << UNICODE_KIND_SHIFT) | UNICODE_COMPACT_BIT | UNICODE_ASCII_BIT;

impl ObjectPrint {
    /// How many bytes to read at the object's address to check it.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    fn normalize(bytes: &mut [u8], volatile: (u16, u16), state_at: Option<u16>) {
        let state = state_at.and_then(|at| bytes.get(usize::from(at)).copied());
        for b in bytes.iter_mut().take(8) {
            *b = 0;
        }
        let (from, to) = (usize::from(volatile.0), usize::from(volatile.1));
        for b in bytes.get_mut(from..to).unwrap_or_default() {
            *b = 0;
        }
        if let (Some(at), Some(state)) = (state_at, state) {
            if let Some(b) = bytes.get_mut(usize::from(at)) {
                *b = state & STR_STATE_KEPT;
            }
        }
    }

    /// Whether `fresh` (`self.len()` bytes just read at the object's address) is an object
    /// with the same content. Zeroes the volatile fields of `fresh`.
    pub(crate) fn matches(&self, fresh: &mut [u8]) -> bool {
        if fresh.len() != self.bytes.len() {
            return false;
        }
        Self::normalize(fresh, self.volatile, self.state_at);
        *fresh == *self.bytes
    }
}

/// The print of the `str` at `addr`, on its first `max_chars` characters (at most
/// [`MAX_PRINT`] bytes of them). A legacy (non-compact) string is printed on its header only.
pub(crate) fn str_print(
    reader: &dyn MemoryReader,
    layout: &Layout,
    types: &TypeAddresses,
    addr: u64,
    max_chars: usize,
) -> Result<ObjectPrint, ObjectError> {
    let head = str_head(reader, layout, types, addr)?;
    // A legacy string is printed on its fixed part only.
    let (data, content) = match head.inline_data(layout) {
        Some(off) => (
            off,
            (head.length as usize)
                .min(max_chars)
                .saturating_mul(usize::from(head.kind))
                .min(MAX_PRINT),
        ),
        None => (layout.unicode_ascii_size, 0),
    };
    let mut bytes = vec![0u8; data + content].into_boxed_slice();
    reader.read(addr, &mut bytes)?;
    let volatile = (
        u16::try_from(layout.unicode_length + 8).map_err(|_| ObjectError::Invalid)?,
        u16::try_from(data).map_err(|_| ObjectError::Invalid)?,
    );
    let state_at = Some(u16::try_from(layout.unicode_state).map_err(|_| ObjectError::Invalid)?);
    ObjectPrint::normalize(&mut bytes, volatile, state_at);
    Ok(ObjectPrint {
        bytes,
        volatile,
        state_at,
    })
}

/// The print of the `bytes` object at `addr`, on its first [`MAX_PRINT`] bytes.
pub(crate) fn bytes_print(
    reader: &dyn MemoryReader,
    types: &TypeAddresses,
    addr: u64,
) -> Result<ObjectPrint, ObjectError> {
    let mut head = [0u8; BYTES_SVAL];
    reader.read(addr, &mut head)?;
    if !type_matches(types.bytes, &head) {
        return Err(ObjectError::WrongType);
    }
    let len = usize::try_from(field_i64(&head, BYTES_SIZE)).map_err(|_| ObjectError::Invalid)?;
    let mut bytes = vec![0u8; BYTES_SVAL + len.min(MAX_PRINT)].into_boxed_slice();
    reader.read(addr, &mut bytes)?;
    // `ob_shash`, the cached hash (-1 until first hashed).
    let volatile = (BYTES_SIZE as u16 + 8, BYTES_SVAL as u16);
    ObjectPrint::normalize(&mut bytes, volatile, None);
    Ok(ObjectPrint {
        bytes,
        volatile,
        state_at: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walker::testing::{ImageBuilder, FAKE_TYPES};
    use crate::walker::PythonVersion;

    #[test]
    fn a_name_of_megabytes_is_cut_not_refused() {
        // Found by tests/python/test_fault_function_names.py: a 2 MiB function name made every
        // stack through it a walk error.
        let mut b = ImageBuilder::new(PythonVersion::new(3, 12)).unwrap();
        let name = "M".repeat(2 << 20);
        let addr = b.str_obj(&name);
        let layout = crate::walker::layout::Layout::for_version(PythonVersion::new(3, 12)).unwrap();
        let got = read_str(&b.mem, layout, &FAKE_TYPES, addr, 1024).unwrap();
        assert_eq!(got.chars().count(), 1025);
        assert!(got.ends_with('…') && got.starts_with("MMM"));
        // A negative length is still garbage.
        b.mem.write_u64(b.str_length_addr(addr), u64::MAX);
        assert_eq!(
            read_str(&b.mem, layout, &FAKE_TYPES, addr, 1024),
            Err(ObjectError::Invalid)
        );
    }
}
