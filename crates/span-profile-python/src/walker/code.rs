//! The walker's cache of resolved code objects: names, file and line table, copied once on first
//! sight. A frame then costs a header read per tick, to prove the address still holds the same
//! code object (by `co_version` on 3.12+, else by comparing the name, file and line table with
//! what was copied: ADR 0020), and a line-table lookup in local memory.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use span_profile_core::Frame;

use super::layout::{Layout, LineTableKind};
use super::linetable::line_for;
use super::memory::{field_i32, field_i64, field_u32, field_u64, MemoryReader};
use super::objects::{
    bytes_print, read_bytes, read_str, str_print, type_matches, ObjectError, ObjectPrint,
    TypeAddresses,
};

/// The raw-frame id reported when the cache is full and a new code object cannot be added.
pub(crate) const UNKNOWN_CODE_ID: u64 = u64::MAX;

/// `co_flags` of a generator's, coroutine's or async generator's code (`CO_GENERATOR`,
/// `CO_COROUTINE`, `CO_ITERABLE_COROUTINE`, `CO_ASYNC_GENERATOR`): its frame is linked into
/// the chain only while it runs, so it is never a thread's outermost frame.
const SUSPENDABLE_FLAGS: i32 = 0x20 | 0x80 | 0x100 | 0x200;

/// The name of the code CPython 3.12 gives its C-stack shim frames: never a Python caller, so
/// never a frame of a stack nor its root.
pub(crate) const TRAMPOLINE_NAME: &str = "<interpreter trampoline>";

/// A multiply-shift hasher for code addresses (they are already well spread; SipHash would cost
/// more than the rest of the frame).
#[derive(Default, Clone, Copy)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;

/// The header fields that must stay equal for a cached entry to describe the code object now
/// at its address: the first line, the number of code units (3.11+), the addresses of name,
/// file and line table, and `co_version` (3.12+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    firstlineno: i32,
    code_units: i64,
    name: u64,
    filename: u64,
    linetable: u64,
    /// `co_version`: unique to each code object an interpreter creates (a counter that stops
    /// at 0 once it wraps); 0 when the version has none.
    version: u32,
}

impl Identity {
    fn of(layout: &Layout, header: &[u8]) -> Self {
        Self {
            firstlineno: field_i32(header, layout.code_firstlineno),
            code_units: layout
                .code_size
                .map_or(-1, |off| field_i64(header, off).max(0)),
            name: field_u64(header, layout.code_qualname.unwrap_or(layout.code_name)),
            filename: field_u64(header, layout.code_filename),
            linetable: field_u64(header, layout.code_linetable),
            version: layout.code_version.map_or(0, |off| field_u32(header, off)),
        }
    }
}

/// The content of an entry's name, file and line table as they were copied: what an address
/// whose header matches is checked against when the header alone cannot tell two code objects
/// apart (3.9–3.11, or a `co_version` of 0). Names and files are freed and their memory reused
/// as readily as code objects are, so addresses prove nothing (ADR 0020).
#[derive(Debug)]
struct Prints {
    name: ObjectPrint,
    file: ObjectPrint,
    linetable: ObjectPrint,
}

#[derive(Debug)]
struct CodeEntry {
    identity: Identity,
    function: Box<str>,
    file: Box<str>,
    linetable: Box<[u8]>,
    /// `None` when the identity holds a version, which is proof enough.
    prints: Option<Box<Prints>>,
    /// Code of `span_profile`'s own Python package, or the interpreter's trampoline: its
    /// frames are left out of stacks.
    hidden: bool,
    /// Code whose frame cannot be a thread's outermost one: a generator's or coroutine's
    /// ([`SUSPENDABLE_FLAGS`]) or the trampoline. A chain that ends there was read while the
    /// frame was being linked or unlinked: a torn root (`frames.rs`, ADR 0020).
    cannot_root: bool,
    /// The last (offset, line) computed, as most samples of a frame repeat its offset.
    memo: Option<(i64, u32)>,
    /// The tick in which this entry was last proven to describe the object at its address.
    checked: u64,
}

/// Caps for what is copied on first sight.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopyLimits {
    pub(crate) max_string_chars: usize,
    pub(crate) max_linetable_bytes: usize,
}

/// Outcome of resolving a code header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// A cache index.
    Entry(u32),
    /// The cache is full; report [`UNKNOWN_CODE_ID`].
    Full,
}

/// What a fresh header says about the cached entry at its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderCheck {
    /// The entry describes the object: proven this tick.
    Proven(u32),
    /// The header matches; the content must be compared ([`CodeCache::content_reads`]).
    CompareContent(u32),
    /// No entry, or a different header: copy the object anew ([`CodeCache::resolve`]).
    Copy,
}

/// Counts the cache reports back to the walker.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CacheEvents {
    pub(crate) misses: u64,
    pub(crate) replaced: u64,
    pub(crate) full: u64,
}

#[derive(Debug)]
pub(crate) struct CodeCache {
    entries: Vec<CodeEntry>,
    by_addr: AddrMap<u32>,
    capacity: usize,
    pub(crate) events: CacheEvents,
    /// The walker's current tick (set before each walk), stamped on proven entries. Ticks
    /// start at 1, so 0 is never current.
    pub(crate) tick: u64,
    /// Code whose file starts with this is hidden (`span_profile`'s package directory).
    hidden_prefix: Option<Box<str>>,
}

impl CodeCache {
    pub(crate) fn new(capacity: usize, hidden_prefix: Option<&str>) -> Self {
        let initial = capacity.min(1024);
        Self {
            entries: Vec::with_capacity(initial),
            by_addr: AddrMap::with_capacity_and_hasher(initial, Default::default()),
            capacity,
            events: CacheEvents::default(),
            tick: 0,
            hidden_prefix: hidden_prefix.filter(|p| !p.is_empty()).map(Into::into),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry for `addr` if it was proven in this tick (a frame holds a reference to its
    /// code object, so within one tick the object cannot have been replaced under a frame).
    pub(crate) fn current(&self, addr: u64) -> Option<u32> {
        let &idx = self.by_addr.get(&addr)?;
        let e = self.entries.get(idx as usize)?;
        (e.checked == self.tick).then_some(idx)
    }

    /// Whether entry `idx` is code of ours (or the trampoline), left out of stacks.
    pub(crate) fn is_hidden(&self, idx: u32) -> bool {
        self.entries.get(idx as usize).is_some_and(|e| e.hidden)
    }

    /// Whether entry `idx` is code whose frame cannot be a thread's outermost frame (see
    /// `CodeEntry::cannot_root`).
    pub(crate) fn cannot_root(&self, idx: u32) -> bool {
        self.entries
            .get(idx as usize)
            .is_some_and(|e| e.cannot_root)
    }

    /// Compares the header just read at `addr` with the entry cached for it. A header whose
    /// identity has a version proves the entry; one without needs its content compared.
    pub(crate) fn check_header(
        &mut self,
        layout: &Layout,
        types: &TypeAddresses,
        addr: u64,
        header: &[u8],
    ) -> HeaderCheck {
        if !type_matches(types.code, header) {
            return HeaderCheck::Copy;
        }
        let identity = Identity::of(layout, header);
        let tick = self.tick;
        let Some(&idx) = self.by_addr.get(&addr) else {
            return HeaderCheck::Copy;
        };
        match self.entries.get_mut(idx as usize) {
            Some(e) if e.identity == identity => {
                if e.checked == tick || e.prints.is_none() {
                    e.checked = tick;
                    HeaderCheck::Proven(idx)
                } else {
                    HeaderCheck::CompareContent(idx)
                }
            }
            _ => HeaderCheck::Copy,
        }
    }

    /// The reads that check entry `idx`'s content: name, file and line table, in that order,
    /// appended to `out` (nothing for an entry that needs none).
    pub(crate) fn content_reads(&self, idx: u32, out: &mut Vec<(u64, usize)>) {
        let Some(e) = self.entries.get(idx as usize) else {
            return;
        };
        if let Some(p) = &e.prints {
            out.push((e.identity.name, p.name.len()));
            out.push((e.identity.filename, p.file.len()));
            out.push((e.identity.linetable, p.linetable.len()));
        }
    }

    /// Checks entry `idx` against the three reads [`CodeCache::content_reads`] asked for
    /// (`fresh`, each `None` if its read failed); a match proves the entry for this tick.
    /// Zeroes the volatile fields of the buffers.
    pub(crate) fn compare_content(&mut self, idx: u32, fresh: [Option<&mut [u8]>; 3]) -> bool {
        let tick = self.tick;
        let Some(e) = self.entries.get_mut(idx as usize) else {
            return false;
        };
        let Some(p) = &e.prints else {
            return false;
        };
        let [name, file, table] = fresh;
        let same = name.is_some_and(|b| p.name.matches(b))
            && file.is_some_and(|b| p.file.matches(b))
            && table.is_some_and(|b| p.linetable.matches(b));
        if same {
            e.checked = tick;
        }
        same
    }

    /// Copies the code object at `addr`, whose first `layout.code_read_size()` bytes are
    /// `header`, into a new entry for the address (the one it had, if any, stays for the ids
    /// already handed out), unless the entry there is proven this tick.
    pub(crate) fn resolve(
        &mut self,
        reader: &dyn MemoryReader,
        layout: &Layout,
        types: &TypeAddresses,
        limits: CopyLimits,
        addr: u64,
        header: &[u8],
    ) -> Result<Resolved, ObjectError> {
        let tick = self.tick;
        if !type_matches(types.code, header) {
            return Err(ObjectError::WrongType);
        }
        if let Some(idx) = self.current(addr) {
            return Ok(Resolved::Entry(idx));
        }
        let identity = Identity::of(layout, header);
        let existing = self.by_addr.get(&addr).copied();
        if self.entries.len() >= self.capacity {
            self.events.full += 1;
            return Ok(Resolved::Full);
        }
        if identity.name == 0 || identity.filename == 0 || identity.linetable == 0 {
            return Err(ObjectError::Invalid);
        }
        let max_chars = limits.max_string_chars;
        let function = read_str(reader, layout, types, identity.name, max_chars)?;
        let file = read_str(reader, layout, types, identity.filename, max_chars)?;
        let linetable = read_bytes(
            reader,
            types,
            identity.linetable,
            limits.max_linetable_bytes,
        )?;
        let prints = if identity.version == 0 {
            Some(Box::new(Prints {
                name: str_print(reader, layout, types, identity.name, max_chars)?,
                file: str_print(reader, layout, types, identity.filename, max_chars)?,
                linetable: bytes_print(reader, types, identity.linetable)?,
            }))
        } else {
            None
        };
        let trampoline = function == TRAMPOLINE_NAME;
        let hidden = trampoline
            || self
                .hidden_prefix
                .as_deref()
                .is_some_and(|p| file.starts_with(p));
        let suspendable = field_i32(header, layout.code_flags) & SUSPENDABLE_FLAGS != 0;
        let idx = u32::try_from(self.entries.len()).map_err(|_| ObjectError::Invalid)?;
        self.entries.push(CodeEntry {
            identity,
            function: function.into_boxed_str(),
            file: file.into_boxed_str(),
            linetable,
            prints,
            hidden,
            cannot_root: trampoline || suspendable,
            memo: None,
            checked: tick,
        });
        self.by_addr.insert(addr, idx);
        self.events.misses += 1;
        if existing.is_some() {
            self.events.replaced += 1;
        }
        Ok(Resolved::Entry(idx))
    }

    /// The line of entry `idx` at instruction offset `lasti` (version units, see
    /// [`line_for`]); 0 when unknown.
    pub(crate) fn line(&mut self, idx: u32, kind: LineTableKind, lasti: i64) -> u32 {
        let Some(e) = self.entries.get_mut(idx as usize) else {
            return 0;
        };
        if let Some((at, line)) = e.memo {
            if at == lasti {
                return line;
            }
        }
        if e.identity.code_units >= 0 && lasti >= e.identity.code_units {
            return 0;
        }
        let line = line_for(kind, &e.linetable, e.identity.firstlineno, lasti).unwrap_or(0);
        e.memo = Some((lasti, line));
        line
    }

    /// The frame of a raw id; unknown ids become `<unknown>`.
    pub(crate) fn symbolize(&self, id: u64, line: u32) -> Frame {
        match usize::try_from(id).ok().and_then(|i| self.entries.get(i)) {
            Some(e) => Frame::new(&*e.function, &*e.file, line),
            None => Frame::new("<unknown>", "", line),
        }
    }
}
