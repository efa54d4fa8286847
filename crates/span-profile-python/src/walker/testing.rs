//! Builds fake interpreter memory images for tests and fuzz targets: a `_PyRuntime`, an
//! interpreter, thread states, frames, code objects, strings and line tables laid out exactly
//! as the given CPython version would, inside a [`FakeMemory`].
//!
//! Not part of the stable API. The test-only memory types are reached from here:
//! [`FakeMemory`], an address space of byte regions, and [`ReadExt`], typed reads on any
//! reader.

pub use super::memory::{FakeMemory, ReadExt};

use super::layout::{
    FrameKind, GilAt, Layout, LineTableKind, PythonVersion, GIL_LAST_HOLDER, GIL_LOCKED, OB_REFCNT,
};
use super::objects::TypeAddresses;
use super::target::Target;

/// A page of this process that no read may touch: an anonymous `PROT_NONE` mapping, reserved
/// and leaked, so tests running in parallel cannot map something else there (as they could
/// over an unmapped page). Reads of it fault, whichever reader does them.
pub fn forbidden_page() -> u64 {
    // SAFETY: (1) An anonymous private mapping of one page with no address hint; the result is
    // checked. It is never dereferenced by Rust code.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of one PROT_NONE page");
    p as u64
}

/// Fake type-object addresses used by images (never mapped; only compared).
pub const FAKE_TYPES: TypeAddresses = TypeAddresses {
    code: 0xc0de_0000,
    unicode: 0x5717_0000,
    bytes: 0xb7e5_0000,
    frame: 0xf7a3_0000,
};

/// A memory image under construction.
#[derive(Debug)]
pub struct ImageBuilder {
    /// The memory so far.
    pub mem: FakeMemory,
    layout: &'static Layout,
    next: u64,
    runtime: u64,
    interp: u64,
    /// Thread states in list order (head first).
    threads: Vec<u64>,
    /// The last `co_version` given (3.12+).
    code_versions: u32,
    /// Where the GIL's state is (`_gil_runtime_state`).
    gil: u64,
}

fn put(buf: &mut [u8], off: usize, v: u64) {
    if let Some(dst) = buf.get_mut(off..off + 8) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
}

fn put_i32(buf: &mut [u8], off: usize, v: i32) {
    if let Some(dst) = buf.get_mut(off..off + 4) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
}

/// One frame to lay out: function name, qualified name, file, first line, and the line the
/// frame is executing (between `firstlineno` and `firstlineno + 60`).
#[derive(Debug, Clone)]
pub struct FakeFrame {
    /// `co_name`.
    pub name: String,
    /// `co_qualname` (3.11+).
    pub qualname: String,
    /// `co_filename`.
    pub file: String,
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// The executing line.
    pub line: i32,
}

impl FakeFrame {
    /// A frame of `name` (qualname `Mod.name`) in `file`.
    pub fn new(name: &str, file: &str, firstlineno: i32, line: i32) -> Self {
        Self {
            name: name.into(),
            qualname: format!("Mod.{name}"),
            file: file.into(),
            firstlineno,
            line,
        }
    }
}

impl ImageBuilder {
    /// An image for `version` (3.9–3.13) with a runtime and one interpreter, no threads.
    pub fn new(version: PythonVersion) -> Option<Self> {
        let layout = Layout::for_version(version)?;
        let mut b = Self {
            mem: FakeMemory::new(),
            layout,
            next: 0x10_0000,
            runtime: 0,
            interp: 0,
            threads: Vec::new(),
            code_versions: 0,
            gil: 0,
        };
        let gil_in_interp = match layout.gil {
            GilAt::InterpPointer(off) => off + 8,
            GilAt::Runtime(_) => 0,
        };
        let interp_size =
            (layout.interp_next.max(layout.interp_threads_head) + 8).max(gil_in_interp);
        b.interp = b.alloc(vec![0; interp_size]);
        let mut runtime = if layout.version == PythonVersion::new(3, 13) {
            super::layout::debug_offsets_image_313()
        } else {
            Vec::new()
        };
        runtime.resize(runtime.len().max(layout.runtime_interpreters_head + 8), 0);
        if let GilAt::Runtime(off) = layout.gil {
            runtime.resize(runtime.len().max(off + GIL_LOCKED + 8), 0);
        }
        put(&mut runtime, layout.runtime_interpreters_head, b.interp);
        b.runtime = b.alloc(runtime);
        b.gil = match layout.gil {
            GilAt::Runtime(off) => b.runtime + off as u64,
            GilAt::InterpPointer(off) => {
                let gil = b.alloc(vec![0; GIL_LOCKED + 8]);
                b.mem.write_u64(b.interp + off as u64, gil);
                gil
            }
        };
        Some(b)
    }

    /// The layout in use.
    pub fn version(&self) -> PythonVersion {
        self.layout.version
    }

    /// Places `bytes` at a fresh address (16-aligned, with unmapped gaps between regions).
    pub fn alloc(&mut self, bytes: Vec<u8>) -> u64 {
        let addr = self.next;
        self.next = (addr + bytes.len() as u64 + 0x100 + 15) & !15;
        self.mem.insert(addr, bytes);
        addr
    }

    /// A `str` object (compact ASCII, or compact with the smallest kind that fits).
    pub fn str_obj(&mut self, s: &str) -> u64 {
        let l = self.layout;
        let max = s.chars().map(u32::from).max().unwrap_or(0);
        let (kind, ascii) = match max {
            0..=0x7f => (1u8, true),
            0x80..=0xff => (1, false),
            0x100..=0xffff => (2, false),
            _ => (4, false),
        };
        let header = if ascii {
            l.unicode_ascii_size
        } else {
            l.unicode_compact_size
        };
        let n = s.chars().count();
        let mut buf = vec![0u8; header + (n + 1) * usize::from(kind)];
        put(&mut buf, 8, FAKE_TYPES.unicode);
        put(&mut buf, l.unicode_length, n as u64);
        let mut state = (kind << 2) | 0x20 | if ascii { 0x40 } else { 0 };
        if let Some(r) = l.unicode_ready_bit {
            state |= r;
        }
        buf[l.unicode_state] = state;
        for (i, c) in s.chars().enumerate() {
            let at = header + i * usize::from(kind);
            let v = u32::from(c).to_le_bytes();
            buf[at..at + usize::from(kind)].copy_from_slice(&v[..usize::from(kind)]);
        }
        self.alloc(buf)
    }

    /// A `bytes` object.
    pub fn bytes_obj(&mut self, data: &[u8]) -> u64 {
        let mut buf = vec![0u8; 32 + data.len() + 1];
        put(&mut buf, 8, FAKE_TYPES.bytes);
        put(&mut buf, 16, data.len() as u64);
        buf[32..32 + data.len()].copy_from_slice(data);
        self.alloc(buf)
    }

    /// The instruction offset (version units) a fake frame executes at.
    const LASTI_UNITS: i64 = 3;

    /// A line table that maps the fake frame's offset to `line - firstlineno` lines below the
    /// first.
    fn linetable(&self, delta: i32) -> Vec<u8> {
        let d = delta.clamp(0, 60) as u8;
        match self.layout.linetable_kind {
            // bytes 0.. → +d
            LineTableKind::Lnotab => vec![0, d],
            // bytes [0, 254) → +d
            LineTableKind::Linetable310 => vec![254, d],
            // code 13 (line delta only), 8 code units, svarint(+d) = 2d
            LineTableKind::Locations311 => vec![0x80 | (13 << 3) | 7, 2 * d],
        }
    }

    /// A code object for `f`; returns its address.
    pub fn code(&mut self, f: &FakeFrame) -> u64 {
        let l = self.layout;
        let name = self.str_obj(&f.name);
        let qualname = self.str_obj(&f.qualname);
        let file = self.str_obj(&f.file);
        let table = self.linetable(f.line - f.firstlineno);
        let table = self.bytes_obj(&table);
        let size = l
            .code_read_size()
            .max(l.code_code_adaptive.unwrap_or(0) + 128);
        let mut buf = vec![0u8; size];
        put(&mut buf, 8, FAKE_TYPES.code);
        if let Some(o) = l.code_size {
            put(&mut buf, o, 64);
        }
        put_i32(&mut buf, l.code_firstlineno, f.firstlineno);
        put(&mut buf, l.code_name, name);
        if let Some(o) = l.code_qualname {
            put(&mut buf, o, qualname);
        }
        put(&mut buf, l.code_filename, file);
        put(&mut buf, l.code_linetable, table);
        if let Some(o) = l.code_version {
            // As CPython numbers code objects: each one its own version.
            self.code_versions += 1;
            put_i32(&mut buf, o, self.code_versions as i32);
        }
        self.alloc(buf)
    }

    /// A frame executing `code`, linked to `previous` (0 for the outermost); `owner` is the
    /// 3.11+ owner byte (0 = thread).
    pub fn frame(&mut self, code: u64, previous: u64, owner: u8) -> u64 {
        let l = self.layout;
        let mut buf = vec![0u8; l.frame_read_size + 16];
        put(&mut buf, l.frame_previous, previous);
        put(&mut buf, l.frame_code, code);
        match l.frame_kind {
            FrameKind::FrameObject => {
                // Live: its thread's chain holds a reference to it.
                put(&mut buf, OB_REFCNT, 1);
                put(&mut buf, 8, FAKE_TYPES.frame);
                let lasti = if l.linetable_kind == LineTableKind::Lnotab {
                    Self::LASTI_UNITS * 2
                } else {
                    Self::LASTI_UNITS
                };
                put_i32(&mut buf, l.frame_instr, lasti as i32);
            }
            FrameKind::PrevInstr | FrameKind::InstrPtr => {
                let base = code + l.code_code_adaptive.unwrap_or(0) as u64;
                put(&mut buf, l.frame_instr, base + 2 * Self::LASTI_UNITS as u64);
                if let Some(o) = l.frame_owner {
                    buf[o] = owner;
                }
            }
        }
        self.alloc(buf)
    }

    /// Lays out a stack (outermost first in `frames`) and returns the address of the leaf frame
    /// (0 for an empty stack). On 3.12+ a C-stack shim frame is placed below the outermost.
    pub fn stack(&mut self, frames: &[FakeFrame]) -> u64 {
        let mut prev = 0;
        if let Some(cstack) = self.layout.owner_cstack {
            let shim_code = self.code(&FakeFrame::new("<shim>", "<shim>", 1, 1));
            prev = self.frame(shim_code, 0, cstack);
        }
        for f in frames {
            let code = self.code(f);
            prev = self.frame(code, prev, 0);
        }
        prev
    }

    /// Adds a thread (appended to the list) whose current frame is `leaf`; returns the thread
    /// state's address.
    pub fn thread(&mut self, thread_id: u64, native_id: u64, leaf: u64) -> u64 {
        let l = self.layout;
        let frame_field = match l.cframe_current_frame {
            Some(off) => {
                let mut cframe = vec![0u8; off + 16];
                put(&mut cframe, off, leaf);
                self.alloc(cframe)
            }
            None => leaf,
        };
        let mut buf = vec![0u8; l.tstate_read_size() + 64];
        put(&mut buf, l.tstate_interp, self.interp);
        put(&mut buf, l.tstate_frame, frame_field);
        put(&mut buf, l.tstate_thread_id, thread_id);
        if let Some(o) = l.tstate_native_thread_id {
            put(&mut buf, o, native_id);
        }
        let addr = self.alloc(buf);
        match self.threads.last() {
            Some(&prev) => {
                self.mem.write_u64(prev + l.tstate_next as u64, addr);
            }
            None => {
                self.mem
                    .write_u64(self.interp + l.interp_threads_head as u64, addr);
            }
        }
        self.threads.push(addr);
        addr
    }

    /// Sets the GIL's state: held by the thread state `holder` (`locked`), or last held by it.
    pub fn set_gil(&mut self, holder: u64, locked: bool) {
        self.mem
            .write_u64(self.gil + GIL_LAST_HOLDER as u64, holder);
        self.mem.write(
            self.gil + GIL_LOCKED as u64,
            &i32::from(locked).to_le_bytes(),
        );
    }

    /// Where the interpreter's thread-list head is.
    pub fn threads_head_addr(&self) -> u64 {
        self.interp + self.layout.interp_threads_head as u64
    }

    /// Where field `next` of thread state `tstate` is (to corrupt it in tests).
    pub fn tstate_next_addr(&self, tstate: u64) -> u64 {
        tstate + self.layout.tstate_next as u64
    }

    /// Frees the frame object `frame` as CPython 3.9/3.10 does, keeping it for reuse: its
    /// reference count drops to 0, and its type, code and `f_back` stay. False on 3.11+,
    /// whose frames are not objects.
    pub fn free_frame(&mut self, frame: u64) -> bool {
        self.layout.frame_kind == FrameKind::FrameObject
            && self.mem.write_u64(frame + OB_REFCNT as u64, 0)
    }

    /// Where the current frame pointer of thread state `tstate` is (in its `cframe` on 3.11
    /// and 3.12).
    pub fn current_frame_addr(&self, tstate: u64) -> u64 {
        let field = tstate + self.layout.tstate_frame as u64;
        match self.layout.cframe_current_frame {
            Some(off) => self.mem.read_u64(field).expect("a thread of this image") + off as u64,
            None => field,
        }
    }

    /// The frame `frame` links to (its `previous`).
    pub fn frame_previous(&self, frame: u64) -> u64 {
        self.mem
            .read_u64(self.frame_previous_addr(frame))
            .expect("a frame of this image")
    }

    /// Where the `previous` link of `frame` is.
    pub fn frame_previous_addr(&self, frame: u64) -> u64 {
        frame + self.layout.frame_previous as u64
    }

    /// Where the code pointer of `frame` is.
    pub fn frame_code_addr(&self, frame: u64) -> u64 {
        frame + self.layout.frame_code as u64
    }

    /// Where `co_name` (3.9/3.10) or `co_qualname` (3.11+) of `code` is.
    pub fn code_name_addr(&self, code: u64) -> u64 {
        code + self.layout.code_qualname.unwrap_or(self.layout.code_name) as u64
    }

    /// Where `co_version` of `code` is (3.12+).
    pub fn code_version_addr(&self, code: u64) -> Option<u64> {
        self.layout.code_version.map(|o| code + o as u64)
    }

    /// Where the characters of the compact ASCII str at `s` start.
    pub fn str_data_addr(&self, s: u64) -> u64 {
        s + self.layout.unicode_ascii_size as u64
    }

    /// Where the cached hash and the state byte of the str at `s` are.
    pub fn str_hash_and_state_addr(&self, s: u64) -> (u64, u64) {
        (
            s + self.layout.unicode_length as u64 + 8,
            s + self.layout.unicode_state as u64,
        )
    }

    /// The address of `code`'s name (qualified name on 3.11+) and line table.
    pub fn code_name_and_table(&self, code: u64) -> (u64, u64) {
        let field = |at: u64| {
            let mut b = [0u8; 8];
            super::memory::MemoryReader::read(&self.mem, at, &mut b).expect("a field of code");
            u64::from_le_bytes(b)
        };
        (
            field(self.code_name_addr(code)),
            field(code + self.layout.code_linetable as u64),
        )
    }

    /// Where `length` of the str at `s` is.
    pub fn str_length_addr(&self, s: u64) -> u64 {
        s + self.layout.unicode_length as u64
    }

    /// The target describing this image.
    pub fn target(&self) -> Target {
        Target {
            version: self.layout.version,
            runtime: self.runtime,
            interpreter: 0,
            types: FAKE_TYPES,
        }
    }
}

/// One reported stack, copied out of the sink call.
#[derive(Debug, Clone)]
pub struct OwnedSample {
    /// `key.thread`.
    pub thread: u64,
    /// Raw frames, leaf first.
    pub frames: Vec<span_profile_core::RawFrame>,
    /// The depth cap cut the stack.
    pub truncated: bool,
    /// CPU time the sample stands for (its thread's use since its previous sample).
    pub cpu_ns: u64,
    /// Thread name.
    pub name: String,
}

/// A sink that keeps everything it receives (allocates; not for allocation tests).
#[derive(Debug, Default)]
pub struct Collected {
    /// Stacks in the order reported.
    pub samples: Vec<OwnedSample>,
    /// Errors in the order reported.
    pub errors: Vec<span_profile_core::WalkError>,
}

impl span_profile_core::StackSink for Collected {
    fn sample(&mut self, s: &span_profile_core::RawSample<'_>) {
        self.samples.push(OwnedSample {
            thread: s.key.thread,
            frames: s.frames.to_vec(),
            truncated: s.truncated,
            cpu_ns: s.cpu_ns,
            name: s.thread_name.to_owned(),
        });
    }
    fn error(&mut self, e: span_profile_core::WalkError) {
        self.errors.push(e);
    }
}
