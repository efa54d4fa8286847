//! The walker's cache of resolved code objects: names, file and line table, copied once on first
//! sight; a frame then costs one header read (to confirm the address still holds the same code
//! object) and a line-table lookup in local memory.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use span_profile_core::Frame;

use super::layout::{Layout, LineTableKind};
use super::linetable::line_for;
use super::memory::{field_i32, field_i64, field_u64, MemoryReader};
use super::objects::{read_bytes, read_str, type_matches, ObjectError, TypeAddresses};

/// The raw-frame id reported when the cache is full and a new code object cannot be added.
pub(crate) const UNKNOWN_CODE_ID: u64 = u64::MAX;

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

/// What must stay equal for a cached entry to describe the code object now at its address:
/// the first line and the addresses of name, file and line table (a new code object reusing
/// the address would have to reuse all four to be mistaken for the old one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    firstlineno: i32,
    name: u64,
    filename: u64,
    linetable: u64,
}

#[derive(Debug)]
struct CodeEntry {
    identity: Identity,
    /// Number of code units (3.11+), to validate instruction offsets; -1 when unknown.
    code_units: i64,
    function: Box<str>,
    file: Box<str>,
    linetable: Box<[u8]>,
    /// The last (offset, line) computed, as most samples of a frame repeat its offset.
    memo: Option<(i64, u32)>,
    /// The tick at which the header at this address last matched `identity`.
    checked: u64,
}

/// Ticks during which a code address whose header matched is trusted without reading the
/// header again (about 0.3 s at 100 Hz). A live frame holds a reference to its code object,
/// so the object cannot be freed while a frame runs it; the re-check only bounds how long a
/// freed and reallocated address could be reported under the old name.
pub(crate) const REVALIDATE_TICKS: u64 = 32;

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
    /// The walker's current tick (set before each walk), stamped on checked entries.
    pub(crate) tick: u64,
}

impl CodeCache {
    pub(crate) fn new(capacity: usize) -> Self {
        let initial = capacity.min(1024);
        Self {
            entries: Vec::with_capacity(initial),
            by_addr: AddrMap::with_capacity_and_hasher(initial, Default::default()),
            capacity,
            events: CacheEvents::default(),
            tick: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry for `addr` if its header was checked within [`REVALIDATE_TICKS`] of the
    /// current tick.
    pub(crate) fn recent(&self, addr: u64) -> Option<u32> {
        let tick = self.tick;
        let &idx = self.by_addr.get(&addr)?;
        let e = self.entries.get(idx as usize)?;
        (tick.wrapping_sub(e.checked) < REVALIDATE_TICKS).then_some(idx)
    }

    /// Resolves the code object at `addr` whose first `layout.code_read_size()` bytes are
    /// `header`: a cache hit if the identity matches, otherwise copies names and line table.
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
        let identity = Identity {
            firstlineno: field_i32(header, layout.code_firstlineno),
            name: field_u64(header, layout.code_qualname.unwrap_or(layout.code_name)),
            filename: field_u64(header, layout.code_filename),
            linetable: field_u64(header, layout.code_linetable),
        };
        let existing = self.by_addr.get(&addr).copied();
        if let Some(idx) = existing {
            if let Some(e) = self
                .entries
                .get_mut(idx as usize)
                .filter(|e| e.identity == identity)
            {
                e.checked = tick;
                return Ok(Resolved::Entry(idx));
            }
        }
        if self.entries.len() >= self.capacity {
            self.events.full += 1;
            return Ok(Resolved::Full);
        }
        if identity.name == 0 || identity.filename == 0 || identity.linetable == 0 {
            return Err(ObjectError::Invalid);
        }
        let function = read_str(
            reader,
            layout,
            types,
            identity.name,
            limits.max_string_chars,
        )?;
        let file = read_str(
            reader,
            layout,
            types,
            identity.filename,
            limits.max_string_chars,
        )?;
        let linetable = read_bytes(
            reader,
            types,
            identity.linetable,
            limits.max_linetable_bytes,
        )?;
        let code_units = layout
            .code_size
            .map_or(-1, |off| field_i64(header, off).max(0));
        let idx = u32::try_from(self.entries.len()).map_err(|_| ObjectError::Invalid)?;
        self.entries.push(CodeEntry {
            identity,
            code_units,
            function: function.into_boxed_str(),
            file: file.into_boxed_str(),
            linetable,
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
        if e.code_units >= 0 && lasti >= e.code_units {
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
