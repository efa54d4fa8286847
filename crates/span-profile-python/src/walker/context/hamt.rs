//! CPython's HAMT, the immutable map behind `contextvars`: its node types ([`HamtTypes`]),
//! its key hash ([`hamt_hash`]) and a bounded, validated lookup ([`hamt_find`]).

use super::error::ContextError;
use crate::walker::layout::{
    CONTEXT_VARS, HAMT_ARRAY_ARRAY, HAMT_BITMAP_ARRAY, HAMT_BITMAP_BITMAP, HAMT_COLLISION_ARRAY,
    HAMT_COLLISION_HASH, HAMT_MAX_DEPTH, HAMT_ROOT, OB_SIZE, OB_TYPE,
};
use crate::walker::memory::{field_u64, MemoryReader};
use crate::walker::target::dlsym;

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
            context: dlsym("PyContext_Type\0")?,
            hamt: dlsym("_PyHamt_Type\0")?,
            bitmap: dlsym("_PyHamt_BitmapNode_Type\0")?,
            array: dlsym("_PyHamt_ArrayNode_Type\0")?,
            collision: dlsym("_PyHamt_CollisionNode_Type\0")?,
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

/// `hamt_hash` of Python/hamt.c: the 64-bit `Py_hash_t` folded to 32 bits by XOR, with -1
/// mapped to -2.
pub(crate) fn hamt_hash(py_hash: i64) -> i32 {
    let folded = (py_hash as i32) ^ ((py_hash >> 32) as i32);
    if folded == -1 {
        -2
    } else {
        folded
    }
}

/// Most key/value slots read from one collision node.
const MAX_COLLISION_SLOTS: usize = 64;

/// Bytes of a HAMT node header (every node kind's fixed fields fit).
const NODE_HEAD: usize = 32;
/// Bytes read per HAMT node: the header and the first 8 key/value pairs of a bitmap node.
const NODE_READ: usize = HAMT_BITMAP_ARRAY + 8 * 16;

/// Looks `key` (an object address, compared by identity as ContextVars are) up in the HAMT
/// whose root node is `node`; `hash` is [`hamt_hash`] of the key. Returns the value's address.
/// Node types are told apart by `types`, which must all be known (non-zero).
pub(crate) fn hamt_find(
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
