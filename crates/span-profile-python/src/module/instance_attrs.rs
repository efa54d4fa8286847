//! A span's SDK fields (`_context`, `_parent`, `_name`, `_start_time`, `_end_time`,
//! `_attributes`) read straight from the object's own attribute values, where CPython keeps
//! them inline: 3.11, 3.12 and 3.13 (ADR 0018). Elsewhere, and for any class this does not
//! recognise, the field is read with `getattr`, as before.
//!
//! On those versions an instance of an ordinary Python class keeps its attributes in an array
//! of values beside the object, in the order of its class's shared keys
//! (`PyHeapTypeObject.ht_cached_keys`). A `getattr` looks the name up in the type (for a
//! descriptor), then in those keys, then reads the value. Here the key's index is learned once
//! per class, checked against `getattr` on that first object, and kept while the class's
//! version tag and keys object stay the same; each read is then a load from the array, which
//! takes instructions off every span (docs/benchmarks.md, "What the span hooks cost").
//!
//! Every read is under the GIL, of an object the caller holds, so nothing it reads can change
//! or go away during it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU8, AtomicUsize, Ordering::Relaxed};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::Interned;

extern "C" {
    // Exported by every CPython 3.x: the type's attribute (a borrowed reference, no error
    // set), through the type's method cache, or null.
    fn _PyType_Lookup(tp: *mut ffi::PyTypeObject, name: *mut ffi::PyObject) -> *mut ffi::PyObject;
}

/// Where this interpreter keeps an object's inline values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Not known here: every field is read with `getattr`.
    Unknown = 0,
    /// 3.11: a pointer to the values array in the word four before the object.
    Py311 = 1,
    /// 3.12: the word three before the object is the values array's address minus one (its
    /// low bit set), or a dict (low bit clear) once one was made.
    Py312 = 2,
    /// 3.13: the values follow the object, at `tp_basicsize`, behind an 8-byte header whose
    /// fourth byte says whether they are still valid.
    Py313 = 3,
}

static LAYOUT: AtomicU8 = AtomicU8::new(Layout::Unknown as u8);

/// `Py_TPFLAGS_MANAGED_DICT` (3.11 and later).
const MANAGED_DICT: std::ffi::c_ulong = 1 << 4;
/// `Py_TPFLAGS_INLINE_VALUES` (3.13 and later).
const INLINE_VALUES: std::ffi::c_ulong = 1 << 2;
/// `DICT_KEYS_SPLIT`: the shared keys of a class's instances.
const SPLIT_KEYS: u8 = 2;
/// Shared keys with more entries than this are not scanned.
const MAX_KEYS: isize = 64;

/// Picks the layout for the running interpreter (the one the extension was built for,
/// ADR 0012). Called once, at import. A free-threaded build is not one of them: its objects
/// can change under a reader that holds no GIL.
pub(crate) fn init(py: Python<'_>) {
    let v = py.version_info();
    let free_threaded = py
        .import("sysconfig")
        .and_then(|m| m.call_method1("get_config_var", ("Py_GIL_DISABLED",)))
        .and_then(|flag| flag.is_truthy())
        .unwrap_or(true);
    let layout = match (v.major, v.minor) {
        _ if free_threaded => Layout::Unknown,
        (3, 11) => Layout::Py311,
        (3, 12) => Layout::Py312,
        (3, 13) => Layout::Py313,
        _ => Layout::Unknown,
    };
    LAYOUT.store(layout as u8, Relaxed);
}

fn layout() -> Layout {
    match LAYOUT.load(Relaxed) {
        1 => Layout::Py311,
        2 => Layout::Py312,
        3 => Layout::Py313,
        _ => Layout::Unknown,
    }
}

/// No index known for the class in [`Field::class`].
const NO_INDEX: usize = usize::MAX;

/// One field of the SDK's span: its private attribute, the public property to fall back to,
/// and where the last class seen keeps the attribute. The atomics are only ever touched under
/// the GIL; they are atomics so that the statics are `Sync`.
pub(crate) struct Field {
    private_name: &'static str,
    private: Interned,
    public: Interned,
    /// The class the index was learned for, with its version tag and shared keys then.
    class: AtomicPtr<ffi::PyTypeObject>,
    version: AtomicU32,
    keys: AtomicPtr<c_void>,
    index: AtomicUsize,
}

impl std::fmt::Debug for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Field")
            .field("index", &self.learned_index())
            .finish_non_exhaustive()
    }
}

impl Field {
    pub(crate) const fn new(private: &'static str, public: &'static str) -> Self {
        Self {
            private_name: private,
            private: Interned::new(private),
            public: Interned::new(public),
            class: AtomicPtr::new(std::ptr::null_mut()),
            version: AtomicU32::new(0),
            keys: AtomicPtr::new(std::ptr::null_mut()),
            index: AtomicUsize::new(NO_INDEX),
        }
    }

    /// The field of `span`: its inline value if its class is known, else the private attribute
    /// by `getattr`, else the public one.
    pub(crate) fn of<'py>(&self, span: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(v) = self.inline(span) {
            return Ok(v);
        }
        let py = span.py();
        match span.getattr_opt(self.private.get(py))? {
            Some(v) => Ok(v),
            None => span.getattr(self.public.get(py)),
        }
    }

    /// The private attribute's name.
    pub(crate) fn name(&self) -> &'static str {
        self.private_name
    }

    /// The index this field was found at for the class last seen, if one was (for the specs).
    pub(crate) fn learned_index(&self) -> Option<usize> {
        Some(self.index.load(Relaxed)).filter(|&i| i != NO_INDEX)
    }

    /// The private attribute's value from `span`'s inline values, if its class is the one the
    /// index was learned (and checked) for and the value is there.
    fn inline<'py>(&self, span: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
        let layout = layout();
        if layout == Layout::Unknown {
            return None;
        }
        let obj = span.as_ptr();
        // SAFETY: `span` is alive and the GIL is held (`Bound`), so its type object is alive
        // and no other thread changes it during this call.
        let tp = unsafe { ffi::Py_TYPE(obj) };
        let (version, keys) = class_state(tp)?;
        if self.class.load(Relaxed) != tp
            || self.version.load(Relaxed) != version
            || self.keys.load(Relaxed) != keys
        {
            self.learn(span, tp, version, keys, layout);
        }
        let index = self.index.load(Relaxed);
        if index == NO_INDEX {
            return None;
        }
        // SAFETY: `span`'s class is `tp`, whose shared keys are the `keys` the index was learned
        // and checked for (above), so the object has an inline values array of that layout with
        // more than `index` slots.
        let value = unsafe { inline_value(obj, tp, layout, index) }?;
        // SAFETY: `value` is an attribute value the object holds a reference to; the GIL is
        // held, so it stays alive while the new strong reference is taken.
        Some(unsafe { Bound::from_borrowed_ptr(span.py(), value) })
    }

    /// Learns where `tp`'s instances keep the private attribute: its index in the shared keys
    /// `keys`, kept only if reading `span` there gives the very object `getattr` does. Else no
    /// index, until the class, its version or its keys change.
    fn learn(
        &self,
        span: &Bound<'_, PyAny>,
        tp: *mut ffi::PyTypeObject,
        version: u32,
        keys: *mut c_void,
        layout: Layout,
    ) {
        self.class.store(tp, Relaxed);
        self.version.store(version, Relaxed);
        self.keys.store(keys, Relaxed);
        self.index.store(NO_INDEX, Relaxed);
        let name = self.private.get(span.py());
        // SAFETY: `tp` is `span`'s live type and `name` a live `str`, under the GIL.
        // `_PyType_Lookup` returns a borrowed reference or null and sets no error.
        if !unsafe { _PyType_Lookup(tp, name.as_ptr()) }.is_null() {
            // A class attribute (a descriptor, maybe a property) of that name: `getattr` may
            // not read the instance's value, so neither does this.
            return;
        }
        // SAFETY: `keys` is `tp`'s shared-keys object (`class_state`), alive while `tp` is.
        let Some(index) = (unsafe { key_index(keys, name.as_ptr()) }) else {
            return;
        };
        // SAFETY: as in `inline`: `span`'s class is `tp`, with these keys.
        let found = unsafe { inline_value(span.as_ptr(), tp, layout, index) };
        let expected = span.getattr_opt(name).ok().flatten();
        if let (Some(f), Some(e)) = (found, &expected) {
            if f == e.as_ptr() {
                self.index.store(index, Relaxed);
            }
        }
    }
}

/// The version tag and shared keys of `tp`, if its instances keep their attributes in inline
/// values and `getattr` reads them there: a heap type with a managed dict (and, on 3.13,
/// inline values), the generic attribute lookup, a valid version tag and shared keys. These
/// are the checks CPython's own specialised `LOAD_ATTR_INSTANCE_VALUE` relies on.
fn class_state(tp: *mut ffi::PyTypeObject) -> Option<(u32, *mut c_void)> {
    // SAFETY: `tp` is a live type object (the caller's object's type) and the GIL is held.
    // A heap type's object is a `PyHeapTypeObject` (checked before the cast).
    unsafe {
        let flags = (*tp).tp_flags;
        if flags & ffi::Py_TPFLAGS_HEAPTYPE == 0 || flags & MANAGED_DICT == 0 {
            return None;
        }
        if layout() == Layout::Py313 && flags & INLINE_VALUES == 0 {
            return None;
        }
        // A class with its own `__getattribute__` or `__getattr__` may not answer from the
        // instance's values.
        let generic: ffi::getattrofunc = ffi::PyObject_GenericGetAttr;
        if (*tp).tp_getattro.map(|f| f as usize) != Some(generic as usize) {
            return None;
        }
        let version = (*tp).tp_version_tag;
        let keys = (*tp.cast::<ffi::PyHeapTypeObject>()).ht_cached_keys;
        (version != 0 && !keys.is_null()).then_some((version, keys))
    }
}

/// The index of the key `name` (by identity: attribute names are interned) among the entries
/// of the split keys object `keys`, if it is there.
///
/// # Safety
///
/// `keys` is a live `PyDictKeysObject` of CPython 3.11–3.13 and the GIL is held.
unsafe fn key_index(keys: *mut c_void, name: *mut ffi::PyObject) -> Option<usize> {
    // The keys object's head, the same on 3.11–3.13 (`Include/internal/pycore_dict.h`):
    // dk_refcnt (8 bytes), dk_log2_size (1), dk_log2_index_bytes (1), dk_kind (1), padding,
    // dk_version (4), dk_usable (8), dk_nentries (8) at 24, then dk_indices at 32, of
    // 1 << dk_log2_index_bytes bytes, then the entries: a key and a value pointer each.
    let k = keys.cast::<u8>();
    // SAFETY: the head is 32 bytes of a live keys object (this function's contract).
    let (log2_index_bytes, kind, nentries) =
        unsafe { (*k.add(9), *k.add(10), k.add(24).cast::<isize>().read()) };
    if kind != SPLIT_KEYS || log2_index_bytes > 16 || !(0..=MAX_KEYS).contains(&nentries) {
        return None;
    }
    // SAFETY: a split keys object holds `nentries` entries of two pointers each after its
    // indices, which are `1 << dk_log2_index_bytes` bytes (checked small above).
    unsafe {
        let entries = k
            .add(32 + (1usize << log2_index_bytes))
            .cast::<*mut ffi::PyObject>();
        (0..nentries as usize).find(|&i| *entries.add(2 * i) == name)
    }
}

/// The value at `index` of `obj`'s inline values, or `None` if the object has none now (a
/// dict was made from them) or the slot is empty (the attribute is not set).
///
/// # Safety
///
/// `obj` is alive, its type `tp` passed [`class_state`] for `layout`, and `index` is below the
/// entries of `tp`'s shared keys; the GIL is held.
unsafe fn inline_value(
    obj: *mut ffi::PyObject,
    tp: *mut ffi::PyTypeObject,
    layout: Layout,
    index: usize,
) -> Option<*mut ffi::PyObject> {
    let words = obj.cast::<usize>();
    // SAFETY: a managed-dict object has its dict/values words in the pre-header before it
    // (3.11: four words, 3.12: three) and, on 3.13 with inline values, its values right after
    // its `tp_basicsize` bytes; each holds as many slots as the class's shared keys can (more
    // than `index`). All of it is the object's own memory.
    unsafe {
        let values: *const *mut ffi::PyObject = match layout {
            Layout::Unknown => return None,
            Layout::Py311 => {
                let p = words.sub(4).read();
                if p == 0 {
                    return None;
                }
                p as *const _
            }
            Layout::Py312 => {
                let p = words.sub(3).read();
                if p & 1 == 0 {
                    return None;
                }
                (p + 1) as *const _
            }
            Layout::Py313 => {
                let basicsize = usize::try_from((*tp).tp_basicsize).ok()?;
                let head = obj.cast::<u8>().add(basicsize);
                if *head.add(3) == 0 {
                    return None;
                }
                head.add(8).cast()
            }
        };
        let v = *values.add(index);
        (!v.is_null()).then_some(v)
    }
}
