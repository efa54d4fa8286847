//! Per-version struct layouts of CPython 3.9–3.13 (GIL builds, x86_64 Linux, release builds).
//!
//! Only the fields the walker reads are written down. Every value was obtained by compiling
//! `offsetof(...)` against the installed headers of each interpreter
//! (`include/python3.X/{cpython,internal}/*.h`, built with `Py_BUILD_CORE`); the header and
//! struct each offset comes from is named next to it. On 3.13 the same values are cross-checked
//! at start-up against `_Py_DebugOffsets` at the start of `_PyRuntime` ([`check_debug_offsets`]).

use super::memory::{field_u64, MemoryReader, ReadError};

/// A CPython minor version this walker knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PythonVersion {
    /// Always 3.
    pub major: u8,
    /// 9 to 13.
    pub minor: u8,
}

impl PythonVersion {
    /// `major.minor`.
    pub const fn new(major: u8, minor: u8) -> Self {
        Self { major, minor }
    }
}

impl std::fmt::Display for PythonVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// How a thread's frames are linked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameKind {
    /// 3.9/3.10: `PyFrameObject` chain through `f_back`; `f_lasti` is a byte offset (3.9) or a
    /// code-unit index (3.10).
    FrameObject,
    /// 3.11/3.12: `_PyInterpreterFrame` chain through `previous`, `prev_instr` points at the
    /// last executed code unit.
    PrevInstr,
    /// 3.13: `_PyInterpreterFrame`, `instr_ptr` points at the current code unit.
    InstrPtr,
}

/// Which line-table encoding `co_linetable`/`co_lnotab` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineTableKind {
    /// 3.9 `co_lnotab`: (byte delta, signed line delta) pairs.
    Lnotab,
    /// 3.10 `co_linetable`: (byte delta, signed line delta or -128 = none) pairs.
    Linetable310,
    /// 3.11+ location table (PEP 657 varint entries in code units).
    Locations311,
}

/// The offsets (bytes) the walker uses for one minor version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) version: PythonVersion,
    // _PyRuntimeState (internal/pycore_runtime.h)
    pub(crate) runtime_interpreters_head: usize,
    // PyInterpreterState (internal/pycore_interp.h)
    pub(crate) interp_next: usize,
    pub(crate) interp_threads_head: usize,
    // PyThreadState (cpython/pystate.h)
    pub(crate) tstate_next: usize,
    pub(crate) tstate_interp: usize,
    /// `frame` (3.9/3.10), `cframe` (3.11/3.12) or `current_frame` (3.13).
    pub(crate) tstate_frame: usize,
    /// `_PyCFrame.current_frame` when frames hang off `tstate->cframe` (3.11/3.12).
    pub(crate) cframe_current_frame: Option<usize>,
    pub(crate) tstate_thread_id: usize,
    pub(crate) tstate_native_thread_id: Option<usize>,
    /// `datastack_chunk` and `datastack_top` (3.11+): the thread's frame stack, copied in one
    /// read (`_PyStackChunk { previous, size, top, data[] }`, pycore_frame.h).
    pub(crate) tstate_datastack: Option<(usize, usize)>,
    // Frames: PyFrameObject (3.9/3.10, frameobject.h / cpython/frameobject.h) or
    // _PyInterpreterFrame (3.11+, internal/pycore_frame.h).
    pub(crate) frame_kind: FrameKind,
    pub(crate) frame_previous: usize,
    pub(crate) frame_code: usize,
    /// `f_lasti` (i32) on 3.9/3.10, `prev_instr`/`instr_ptr` (pointer) on 3.11+.
    pub(crate) frame_instr: usize,
    /// `owner` (u8) on 3.11+.
    pub(crate) frame_owner: Option<usize>,
    /// `f_trace` on 3.9 and `f_lineno` on 3.9/3.10 (line valid while tracing).
    pub(crate) frame_trace: Option<usize>,
    pub(crate) frame_lineno: Option<usize>,
    /// Bytes to copy per frame (covers every field above).
    pub(crate) frame_read_size: usize,
    /// `FRAME_OWNED_BY_CSTACK` (3.12+): C-stack shim frames, not Python code.
    pub(crate) owner_cstack: Option<u8>,
    // PyCodeObject (code.h / cpython/code.h)
    /// `ob_size` (number of code units) on 3.11+.
    pub(crate) code_size: Option<usize>,
    pub(crate) code_firstlineno: usize,
    pub(crate) code_filename: usize,
    pub(crate) code_name: usize,
    pub(crate) code_qualname: Option<usize>,
    /// `co_flags` (int): whether the code is a generator's or coroutine's (`CO_GENERATOR`...).
    pub(crate) code_flags: usize,
    /// `co_lnotab` (3.9) or `co_linetable` (3.10+).
    pub(crate) code_linetable: usize,
    /// `co_code_adaptive`: where the bytecode starts inside the code object (3.11+).
    pub(crate) code_code_adaptive: Option<usize>,
    /// `co_version` (u32, 3.12+): a number unique to each code object, from a counter the
    /// interpreter increments per code object created (it stops at 0 if it ever wraps).
    pub(crate) code_version: Option<usize>,
    pub(crate) linetable_kind: LineTableKind,
    // PyASCIIObject / PyCompactUnicodeObject / PyUnicodeObject (cpython/unicodeobject.h)
    pub(crate) unicode_length: usize,
    pub(crate) unicode_state: usize,
    pub(crate) unicode_ascii_size: usize,
    pub(crate) unicode_compact_size: usize,
    pub(crate) unicode_data: usize,
    /// The `ready` state bit (3.9–3.11; strings are always ready from 3.12).
    pub(crate) unicode_ready_bit: Option<u8>,
    /// Where the GIL's state (`struct _gil_runtime_state`, internal/pycore_gil.h) is.
    pub(crate) gil: GilAt,
}

/// Where a thread's GIL (`struct _gil_runtime_state`) lies. Offsets measured with `offsetof`
/// against each version's internal headers (`Py_BUILD_CORE`), and checked in the running
/// interpreter before use ([`super::PythonWalker::check_gil_holder`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GilAt {
    /// In `_PyRuntimeState` at this offset (`ceval.gil`, 3.9–3.11: one GIL per process).
    Runtime(usize),
    /// Pointed to by the `PyInterpreterState` field at this offset (`ceval.gil`, 3.12+: one
    /// per interpreter, or shared).
    InterpPointer(usize),
}

/// `_gil_runtime_state.last_holder` (the thread state that took the GIL last) and `.locked`
/// (an int, nonzero while held), every version: after `unsigned long interval`.
pub(crate) const GIL_LAST_HOLDER: usize = 8;
pub(crate) const GIL_LOCKED: usize = 16;

/// `PyObject.ob_refcnt` (object.h), every version: 0 in an object already freed that
/// CPython keeps for reuse (a 3.9/3.10 frame object on its code's zombie slot or the free list
/// keeps its type, code and a stale `f_back`).
pub(crate) const OB_REFCNT: usize = 0;
/// `PyObject.ob_type` (object.h), every version.
pub(crate) const OB_TYPE: usize = 8;
/// `PyBytesObject.ob_size` / `ob_sval` (cpython/bytesobject.h), every version.
pub(crate) const BYTES_SIZE: usize = 16;
pub(crate) const BYTES_SVAL: usize = 32;
/// `PyASCIIObject.state` bit fields (same bit positions 3.9–3.13: `interned:2, kind:3,
/// compact:1, ascii:1, ready:1` (ready until 3.11)); measured by setting each bit field.
pub(crate) const UNICODE_KIND_SHIFT: u8 = 2;
pub(crate) const UNICODE_KIND_MASK: u8 = 0x7;
pub(crate) const UNICODE_COMPACT_BIT: u8 = 0x20;
pub(crate) const UNICODE_ASCII_BIT: u8 = 0x40;

const UNICODE_39_311: (usize, usize, usize, usize, usize) = (
    16, // PyASCIIObject.length
    32, // PyASCIIObject.state
    48, // sizeof(PyASCIIObject) (has `wstr` until 3.11)
    72, // sizeof(PyCompactUnicodeObject)
    72, // PyUnicodeObject.data
);
const UNICODE_312: (usize, usize, usize, usize, usize) = (
    16, // PyASCIIObject.length
    32, // PyASCIIObject.state
    40, // sizeof(PyASCIIObject) (`wstr` removed in 3.12)
    56, // sizeof(PyCompactUnicodeObject)
    56, // PyUnicodeObject.data
);

/// CPython 3.9.
pub(crate) const PY39: Layout = Layout {
    version: PythonVersion::new(3, 9),
    runtime_interpreters_head: 32, // _PyRuntimeState.interpreters.head
    interp_next: 0,                // PyInterpreterState.next
    interp_threads_head: 8,        // PyInterpreterState.tstate_head
    tstate_next: 8,                // PyThreadState.next
    tstate_interp: 16,             // PyThreadState.interp
    tstate_frame: 24,              // PyThreadState.frame
    cframe_current_frame: None,
    tstate_thread_id: 176, // PyThreadState.thread_id
    tstate_native_thread_id: None,
    tstate_datastack: None,
    frame_kind: FrameKind::FrameObject,
    frame_previous: 24, // PyFrameObject.f_back
    frame_code: 32,     // PyFrameObject.f_code
    frame_instr: 104,   // PyFrameObject.f_lasti (int, byte offset)
    frame_owner: None,
    frame_trace: Some(80),   // PyFrameObject.f_trace
    frame_lineno: Some(108), // PyFrameObject.f_lineno
    frame_read_size: 112,
    owner_cstack: None,
    code_size: None,
    code_firstlineno: 40, // PyCodeObject.co_firstlineno
    code_filename: 104,   // PyCodeObject.co_filename
    code_name: 112,       // PyCodeObject.co_name
    code_qualname: None,
    code_flags: 36,      // PyCodeObject.co_flags
    code_linetable: 120, // PyCodeObject.co_lnotab
    code_code_adaptive: None,
    code_version: None,
    linetable_kind: LineTableKind::Lnotab,
    unicode_length: UNICODE_39_311.0,
    unicode_state: UNICODE_39_311.1,
    unicode_ascii_size: UNICODE_39_311.2,
    unicode_compact_size: UNICODE_39_311.3,
    unicode_data: UNICODE_39_311.4,
    unicode_ready_bit: Some(0x80),
    gil: GilAt::Runtime(352), // _PyRuntimeState.ceval.gil (3.10 too)
};

/// CPython 3.10: as 3.9 except the fields listed.
pub(crate) const PY310: Layout = Layout {
    version: PythonVersion::new(3, 10),
    frame_instr: 96, // PyFrameObject.f_lasti (int, now a code-unit index)
    frame_trace: None,
    frame_lineno: Some(100), // PyFrameObject.f_lineno (non-zero only while tracing)
    frame_read_size: 104,
    code_linetable: 120, // PyCodeObject.co_linetable (replaces co_lnotab)
    linetable_kind: LineTableKind::Linetable310,
    ..PY39
};

/// CPython 3.11.
pub(crate) const PY311: Layout = Layout {
    version: PythonVersion::new(3, 11),
    runtime_interpreters_head: 40, // _PyRuntimeState.interpreters.head
    interp_next: 0,                // PyInterpreterState.next
    interp_threads_head: 16,       // PyInterpreterState.threads.head
    tstate_next: 8,                // PyThreadState.next
    tstate_interp: 16,             // PyThreadState.interp
    tstate_frame: 56,              // PyThreadState.cframe
    cframe_current_frame: Some(8), // _PyCFrame.current_frame (after use_tracing)
    tstate_thread_id: 152,         // PyThreadState.thread_id
    tstate_native_thread_id: Some(160), // PyThreadState.native_thread_id
    tstate_datastack: Some((296, 304)), // PyThreadState.datastack_chunk, .datastack_top
    frame_kind: FrameKind::PrevInstr,
    frame_previous: 48,    // _PyInterpreterFrame.previous
    frame_code: 32,        // _PyInterpreterFrame.f_code
    frame_instr: 56,       // _PyInterpreterFrame.prev_instr
    frame_owner: Some(69), // _PyInterpreterFrame.owner (after is_entry at 68)
    frame_trace: None,
    frame_lineno: None,
    frame_read_size: 72,
    owner_cstack: None, // 3.11 has no shim frames
    code_size: Some(16),
    code_firstlineno: 72, // PyCodeObject.co_firstlineno
    code_filename: 112,   // PyCodeObject.co_filename
    code_name: 120,       // PyCodeObject.co_name
    code_qualname: Some(128),
    code_flags: 48,                // PyCodeObject.co_flags (3.12, 3.13 too)
    code_linetable: 136,           // PyCodeObject.co_linetable
    code_code_adaptive: Some(184), // PyCodeObject.co_code_adaptive
    code_version: None,
    linetable_kind: LineTableKind::Locations311,
    unicode_length: UNICODE_39_311.0,
    unicode_state: UNICODE_39_311.1,
    unicode_ascii_size: UNICODE_39_311.2,
    unicode_compact_size: UNICODE_39_311.3,
    unicode_data: UNICODE_39_311.4,
    unicode_ready_bit: Some(0x80),
    gil: GilAt::Runtime(360), // _PyRuntimeState.ceval.gil
};

/// CPython 3.12: as 3.11 except the fields listed.
pub(crate) const PY312: Layout = Layout {
    version: PythonVersion::new(3, 12),
    interp_threads_head: 72,            // PyInterpreterState.threads.head
    cframe_current_frame: Some(0),      // _PyCFrame.current_frame (use_tracing removed)
    tstate_thread_id: 136,              // PyThreadState.thread_id
    tstate_native_thread_id: Some(144), // PyThreadState.native_thread_id
    tstate_datastack: Some((232, 240)), // PyThreadState.datastack_chunk, .datastack_top (3.13 too)
    frame_previous: 8,                  // _PyInterpreterFrame.previous
    frame_code: 0,                      // _PyInterpreterFrame.f_code
    frame_owner: Some(70),              // _PyInterpreterFrame.owner
    owner_cstack: Some(3),              // FRAME_OWNED_BY_CSTACK
    code_firstlineno: 68,               // PyCodeObject.co_firstlineno
    code_code_adaptive: Some(192),      // PyCodeObject.co_code_adaptive
    code_version: Some(92),             // PyCodeObject.co_version (3.13 too)
    unicode_length: UNICODE_312.0,
    unicode_state: UNICODE_312.1,
    unicode_ascii_size: UNICODE_312.2,
    unicode_compact_size: UNICODE_312.3,
    unicode_data: UNICODE_312.4,
    unicode_ready_bit: None,
    gil: GilAt::InterpPointer(384), // PyInterpreterState.ceval.gil
    ..PY311
};

/// CPython 3.13: as 3.12 except the fields listed.
pub(crate) const PY313: Layout = Layout {
    version: PythonVersion::new(3, 13),
    runtime_interpreters_head: 632, // _PyRuntimeState.interpreters.head (after debug offsets)
    interp_next: 7264,              // PyInterpreterState.next (after the embedded ceval state)
    interp_threads_head: 7344,      // PyInterpreterState.threads.head
    tstate_frame: 72,               // PyThreadState.current_frame (no more cframe)
    cframe_current_frame: None,
    tstate_thread_id: 152,              // PyThreadState.thread_id
    tstate_native_thread_id: Some(160), // PyThreadState.native_thread_id
    frame_kind: FrameKind::InstrPtr,
    frame_code: 0,                 // _PyInterpreterFrame.f_executable
    frame_instr: 56,               // _PyInterpreterFrame.instr_ptr
    code_code_adaptive: Some(200), // PyCodeObject.co_code_adaptive
    gil: GilAt::InterpPointer(16), // PyInterpreterState.ceval.gil (ceval comes first)
    ..PY312
};

impl Layout {
    /// The layout of a supported version, or `None`.
    pub(crate) fn for_version(v: PythonVersion) -> Option<&'static Layout> {
        match (v.major, v.minor) {
            (3, 9) => Some(&PY39),
            (3, 10) => Some(&PY310),
            (3, 11) => Some(&PY311),
            (3, 12) => Some(&PY312),
            (3, 13) => Some(&PY313),
            _ => None,
        }
    }

    /// The offsets of the `PyThreadState` fields the thread list reads (8 bytes each).
    fn tstate_fields(&self) -> [usize; 7] {
        let (chunk, top) = self.tstate_datastack.unwrap_or((0, 0));
        [
            self.tstate_next,
            self.tstate_interp,
            self.tstate_frame,
            self.tstate_thread_id,
            self.tstate_native_thread_id.unwrap_or(0),
            chunk,
            top,
        ]
    }

    /// Bytes of a `PyThreadState` to copy (covers every field the walker reads).
    pub(crate) fn tstate_read_size(&self) -> usize {
        self.tstate_fields().into_iter().max().unwrap_or(0) + 8
    }

    /// The offsets of the `PyThreadState` fields the thread list needs to find, follow and
    /// name a thread: not its frame pointer or data stack, read only for a thread walked.
    fn tstate_list_fields(&self) -> [usize; 4] {
        [
            self.tstate_next,
            self.tstate_interp,
            self.tstate_thread_id,
            self.tstate_native_thread_id
                .unwrap_or(self.tstate_thread_id),
        ]
    }

    /// The bytes of a `PyThreadState` that hold the fields the thread list needs
    /// ([`Layout::tstate_list_fields`]), as a `start..end` offset range: on 3.12, 144 bytes
    /// where the whole copy is 248. One copy of the range, not one per field: what a copy
    /// costs is mostly reaching the thread state's memory at all, not its length.
    pub(crate) fn tstate_list_span(&self) -> std::ops::Range<usize> {
        let f = self.tstate_list_fields();
        let start = f.into_iter().min().unwrap_or(0);
        let end = f.into_iter().max().unwrap_or(0) + 8;
        start..end
    }

    /// Bytes of a `PyCodeObject` to copy (the header fields, not the bytecode).
    pub(crate) fn code_read_size(&self) -> usize {
        let last = [
            self.code_firstlineno,
            self.code_filename,
            self.code_name,
            self.code_qualname.unwrap_or(0),
            self.code_linetable,
            self.code_version.unwrap_or(0),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        last + 8
    }
}

/// Why the offsets of the running interpreter could not be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The version is not one of 3.9–3.13.
    UnsupportedVersion(PythonVersion),
    /// `_Py_DebugOffsets` could not be read.
    Read(ReadError),
    /// `_PyRuntime` does not start with the `xdebugpy` cookie.
    NoDebugCookie,
    /// A free-threaded build, whose layouts differ.
    FreeThreaded,
    /// `_Py_DebugOffsets` disagrees with the compiled-in constant for `field`.
    Mismatch {
        /// Which offset.
        field: &'static str,
        /// What the interpreter publishes.
        runtime: u64,
        /// What this walker assumes.
        ours: u64,
    },
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnsupportedVersion(v) => write!(f, "unsupported CPython version {v}"),
            Self::Read(e) => write!(f, "cannot read _Py_DebugOffsets: {e}"),
            Self::NoDebugCookie => f.write_str("_PyRuntime does not start with \"xdebugpy\""),
            Self::FreeThreaded => f.write_str("free-threaded CPython builds are not supported"),
            Self::Mismatch {
                field,
                runtime,
                ours,
            } => write!(
                f,
                "layout mismatch for {field}: interpreter says {runtime}, walker assumes {ours}"
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

/// Offsets of the 3.13 `_Py_DebugOffsets` fields we compare (internal/pycore_runtime.h):
/// `cookie[8], version, free_threaded`, then groups of u64 each starting with `size`.
mod debug313 {
    pub(super) const FREE_THREADED: usize = 16;
    // runtime_state { size, finalizing, interpreters_head }
    pub(super) const RUNTIME_INTERPRETERS_HEAD: usize = 24 + 16;
    // interpreter_state { size, id, next, threads_head, ... 13 fields }
    const INTERP: usize = 24 + 3 * 8;
    pub(super) const INTERP_NEXT: usize = INTERP + 16;
    pub(super) const INTERP_THREADS_HEAD: usize = INTERP + 24;
    // thread_state { size, prev, next, interp, current_frame, thread_id, native_thread_id, .. }
    const TSTATE: usize = INTERP + 13 * 8;
    pub(super) const TSTATE_NEXT: usize = TSTATE + 16;
    pub(super) const TSTATE_INTERP: usize = TSTATE + 24;
    pub(super) const TSTATE_CURRENT_FRAME: usize = TSTATE + 32;
    pub(super) const TSTATE_THREAD_ID: usize = TSTATE + 40;
    pub(super) const TSTATE_NATIVE_THREAD_ID: usize = TSTATE + 48;
    // interpreter_frame { size, previous, executable, instr_ptr, localsplus, owner }
    const FRAME: usize = TSTATE + 9 * 8;
    pub(super) const FRAME_PREVIOUS: usize = FRAME + 8;
    pub(super) const FRAME_EXECUTABLE: usize = FRAME + 16;
    pub(super) const FRAME_INSTR_PTR: usize = FRAME + 24;
    pub(super) const FRAME_OWNER: usize = FRAME + 40;
    // code_object { size, filename, name, qualname, linetable, firstlineno, argcount,
    //               localsplusnames, localspluskinds, co_code_adaptive }
    const CODE: usize = FRAME + 6 * 8;
    pub(super) const CODE_FILENAME: usize = CODE + 8;
    pub(super) const CODE_NAME: usize = CODE + 16;
    pub(super) const CODE_QUALNAME: usize = CODE + 24;
    pub(super) const CODE_LINETABLE: usize = CODE + 32;
    pub(super) const CODE_FIRSTLINENO: usize = CODE + 40;
    pub(super) const CODE_CODE_ADAPTIVE: usize = CODE + 72;
    // pyobject { size, ob_type }, type_object { 4 }, tuple { 3 }, list { 3 }, dict { 3 },
    // float { 2 }, long { 3 }, bytes { size, ob_size, ob_sval }, unicode { size, state, length,
    // asciiobject_size }
    const PYOBJECT: usize = CODE + 10 * 8;
    pub(super) const OB_TYPE: usize = PYOBJECT + 8;
    const BYTES: usize = PYOBJECT + (2 + 4 + 3 + 3 + 3 + 2 + 3) * 8;
    pub(super) const BYTES_OB_SIZE: usize = BYTES + 8;
    pub(super) const BYTES_OB_SVAL: usize = BYTES + 16;
    const UNICODE: usize = BYTES + 3 * 8;
    pub(super) const UNICODE_STATE: usize = UNICODE + 8;
    pub(super) const UNICODE_LENGTH: usize = UNICODE + 16;
    pub(super) const UNICODE_ASCII_SIZE: usize = UNICODE + 24;
    pub(super) const END: usize = UNICODE + 32;
}

/// Every `_Py_DebugOffsets` field the walker relies on: (name, where it is in the debug
/// offsets, the value this walker assumes). Fields the layout lacks are `u64::MAX`.
fn debug_expectations(l: &Layout) -> [(&'static str, usize, u64); 24] {
    use debug313 as d;
    let opt = |o: Option<usize>| o.map_or(u64::MAX, |v| v as u64);
    [
        (
            "runtime.interpreters_head",
            d::RUNTIME_INTERPRETERS_HEAD,
            l.runtime_interpreters_head as u64,
        ),
        ("interp.next", d::INTERP_NEXT, l.interp_next as u64),
        (
            "interp.threads_head",
            d::INTERP_THREADS_HEAD,
            l.interp_threads_head as u64,
        ),
        ("tstate.next", d::TSTATE_NEXT, l.tstate_next as u64),
        ("tstate.interp", d::TSTATE_INTERP, l.tstate_interp as u64),
        (
            "tstate.current_frame",
            d::TSTATE_CURRENT_FRAME,
            l.tstate_frame as u64,
        ),
        (
            "tstate.thread_id",
            d::TSTATE_THREAD_ID,
            l.tstate_thread_id as u64,
        ),
        (
            "tstate.native_thread_id",
            d::TSTATE_NATIVE_THREAD_ID,
            opt(l.tstate_native_thread_id),
        ),
        ("frame.previous", d::FRAME_PREVIOUS, l.frame_previous as u64),
        ("frame.executable", d::FRAME_EXECUTABLE, l.frame_code as u64),
        ("frame.instr_ptr", d::FRAME_INSTR_PTR, l.frame_instr as u64),
        ("frame.owner", d::FRAME_OWNER, opt(l.frame_owner)),
        ("code.filename", d::CODE_FILENAME, l.code_filename as u64),
        ("code.name", d::CODE_NAME, l.code_name as u64),
        ("code.qualname", d::CODE_QUALNAME, opt(l.code_qualname)),
        ("code.linetable", d::CODE_LINETABLE, l.code_linetable as u64),
        (
            "code.firstlineno",
            d::CODE_FIRSTLINENO,
            l.code_firstlineno as u64,
        ),
        (
            "code.co_code_adaptive",
            d::CODE_CODE_ADAPTIVE,
            opt(l.code_code_adaptive),
        ),
        ("pyobject.ob_type", d::OB_TYPE, OB_TYPE as u64),
        ("bytes.ob_size", d::BYTES_OB_SIZE, BYTES_SIZE as u64),
        ("bytes.ob_sval", d::BYTES_OB_SVAL, BYTES_SVAL as u64),
        ("unicode.state", d::UNICODE_STATE, l.unicode_state as u64),
        ("unicode.length", d::UNICODE_LENGTH, l.unicode_length as u64),
        (
            "unicode.asciiobject_size",
            d::UNICODE_ASCII_SIZE,
            l.unicode_ascii_size as u64,
        ),
    ]
}

/// On 3.13, reads `_Py_DebugOffsets` at `runtime` (the start of `_PyRuntime`) and checks every
/// offset the walker uses against it. Other versions have no debug offsets: `Ok(())`.
pub(crate) fn check_debug_offsets(
    reader: &dyn MemoryReader,
    runtime: u64,
    layout: &Layout,
) -> Result<(), LayoutError> {
    if layout.version != PY313.version {
        return Ok(());
    }
    let mut buf = [0u8; debug313::END];
    reader.read(runtime, &mut buf).map_err(LayoutError::Read)?;
    if &buf[..8] != b"xdebugpy" {
        return Err(LayoutError::NoDebugCookie);
    }
    if field_u64(&buf, debug313::FREE_THREADED) != 0 {
        return Err(LayoutError::FreeThreaded);
    }
    for (field, at, ours) in debug_expectations(layout) {
        let runtime_value = field_u64(&buf, at);
        if runtime_value != ours {
            return Err(LayoutError::Mismatch {
                field,
                runtime: runtime_value,
                ours,
            });
        }
    }
    Ok(())
}

/// Builds a 3.13 `_Py_DebugOffsets` image that agrees with [`PY313`] (tests, fake images).
pub(crate) fn debug_offsets_image_313() -> Vec<u8> {
    let mut buf = vec![0u8; debug313::END];
    buf[..8].copy_from_slice(b"xdebugpy");
    for (_, at, v) in debug_expectations(&PY313) {
        if let Some(dst) = buf.get_mut(at..at + 8) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
    }
    buf
}

// ---------------------------------------------------------------------------------------------
// Contexts and HAMTs (asyncio / contextvars span attribution, read by `super::context`).
// Measured with `offsetof` against each interpreter's headers built with `Py_BUILD_CORE`
// (cpython/pystate.h, internal/pycore_context.h, internal/pycore_hamt.h); the node structs live
// in Python/hamt.c and are written down from their definitions there, identical 3.9–3.13.
// ---------------------------------------------------------------------------------------------

/// `PyThreadState.context` (the `PyContext*` entered on the thread; null until first use).
pub(crate) fn tstate_context(v: PythonVersion) -> Option<usize> {
    match (v.major, v.minor) {
        (3, 9) | (3, 10) => Some(240),
        (3, 11) => Some(224),
        (3, 12) | (3, 13) => Some(208),
        _ => None,
    }
}

/// `PyContext.ctx_vars` (`PyHamtObject*`), every version.
pub(crate) const CONTEXT_VARS: usize = 24;
/// `PyHamtObject.h_root` (`PyHamtNode*`), every version.
pub(crate) const HAMT_ROOT: usize = 16;
/// `PyObject_VAR_HEAD.ob_size`, every version.
pub(crate) const OB_SIZE: usize = 16;
/// `PyHamtNode_Bitmap.b_bitmap` (u32) and `b_array` (key/value pairs; a null key marks a
/// sub-node in the value slot).
pub(crate) const HAMT_BITMAP_BITMAP: usize = 24;
pub(crate) const HAMT_BITMAP_ARRAY: usize = 32;
/// `PyHamtNode_Array.a_array` (32 child pointers, null for empty).
pub(crate) const HAMT_ARRAY_ARRAY: usize = 16;
/// `PyHamtNode_Collision.c_hash` (i32) and `c_array` (key/value pairs, `ob_size` slots).
pub(crate) const HAMT_COLLISION_HASH: usize = 24;
pub(crate) const HAMT_COLLISION_ARRAY: usize = 32;
/// `HAMT_MAX_TREE_DEPTH` in Python/hamt.c (32-bit hashes, 5 bits per level) plus one
/// collision level.
pub(crate) const HAMT_MAX_DEPTH: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walker::memory::FakeMemory;

    #[test]
    fn every_supported_version_has_a_layout() {
        for minor in 9..=13 {
            let l = Layout::for_version(PythonVersion::new(3, minor)).unwrap();
            assert_eq!(l.version.minor, minor);
            assert!(l.frame_read_size >= l.frame_instr + 4);
            assert!(l.code_read_size() <= 256);
        }
        assert!(Layout::for_version(PythonVersion::new(3, 14)).is_none());
        assert!(Layout::for_version(PythonVersion::new(2, 7)).is_none());
    }

    /// The listing's span of each version, from CPython's headers: `next` (8) to the thread id
    /// (3.9, 3.10) or `native_thread_id` (3.11+). On 3.11+ it stops short of the data stack
    /// (`datastack_chunk` at 296, 232 and 232), which only a walked thread needs; on 3.9 and
    /// 3.10 the thread id is the last field the listing ever read.
    #[test]
    fn the_thread_list_reads_the_fields_it_parses_and_no_more() {
        let spans = [
            (9, 8..184),
            (10, 8..184),
            (11, 8..168),
            (12, 8..152),
            (13, 8..168),
        ];
        for (minor, span) in spans {
            let l = Layout::for_version(PythonVersion::new(3, minor)).unwrap();
            assert_eq!(l.tstate_list_span(), span, "3.{minor}");
            assert!(span.end <= l.tstate_read_size(), "3.{minor}");
        }
    }

    #[test]
    fn debug_offsets_cross_check() {
        let mut m = FakeMemory::new();
        m.insert(0x10_000, debug_offsets_image_313());
        assert_eq!(check_debug_offsets(&m, 0x10_000, &PY313), Ok(()));
        // A different value for one field is refused.
        let at = 0x10_000 + debug313::TSTATE_THREAD_ID as u64;
        m.write_u64(at, 999);
        assert!(matches!(
            check_debug_offsets(&m, 0x10_000, &PY313),
            Err(LayoutError::Mismatch {
                field: "tstate.thread_id",
                runtime: 999,
                ..
            })
        ));
        m.write(0x10_000, b"notdebug");
        assert_eq!(
            check_debug_offsets(&m, 0x10_000, &PY313),
            Err(LayoutError::NoDebugCookie)
        );
        // Other versions have nothing to check.
        assert_eq!(check_debug_offsets(&m, 0x10_000, &PY312), Ok(()));
    }
}
