//! The frame walk of one thread: the chain from its innermost frame outwards, taken from a
//! copy of its data stack where the frames lie in it (3.11+) and read one by one elsewhere,
//! then its code objects proven or copied through the [`CodeCache`] (ADR 0020).
//! [`FrameWalk`] holds the buffers, reused from thread to thread; [`FrameSource`] lends it what
//! the walker reads with.

use span_profile_core::RawFrame;

use super::code::{CodeCache, CopyLimits, HeaderCheck, Resolved, UNKNOWN_CODE_ID};
use super::layout::{FrameKind, Layout, OB_REFCNT};
use super::memory::{field_i32, field_u64, field_u8, MemoryReader, ReadError};
use super::objects::{type_matches, ObjectError, TypeAddresses};
use super::stats::{bump, WalkerCounters};
use super::threads::MAX_OUTSIDE;

/// Largest struct copy (frame, code header).
const BUF: usize = 256;
/// Bytes set aside up front for the content comparisons of one stack (it grows if needed).
const COMPARE_BUF: usize = 16 * 1024;
/// Most bytes of a thread's live data stack copied per walk (the innermost frames; frames below
/// are read one by one).
const STACK_COPY: usize = 64 * 1024;
/// `sizeof(_PyStackChunk)` header before `data[]`: previous, size, top.
const CHUNK_HEADER: u64 = 24;
/// `_PyStackChunk.size` (bytes, header included).
const CHUNK_SIZE: usize = 8;

/// One frame collected before its code object is resolved.
#[derive(Debug, Clone, Copy, Default)]
struct FrameSlot {
    code: u64,
    lasti: i64,
    line: Option<u32>,
}

/// How a thread's frame chain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StackEnd {
    /// At the thread's outermost frame: the stack is whole.
    Whole,
    /// At the depth cap (or out of steps): the outer frames are missing.
    Cut,
    /// At a frame that cannot be a thread's outermost one: a generator's or coroutine's frame
    /// (by its code's flags, or on 3.11+ by its owner), or the 3.12 trampoline. The thread
    /// was resuming or suspending it while the chain was read (its `previous` is set and
    /// cleared as it runs), so the callers are missing: reported as truncated (ADR 0020).
    Torn,
    /// Changed by its thread while it was read: the chain reached a frame object already freed
    /// (3.9/3.10: its reference count is 0; past it lies a stale `f_back`, another code's old
    /// caller or the free list's next entry), and the frames before it are kept; or the leaf
    /// frame, read again at once or after the walk, no longer held the code and the caller
    /// link copied (a frame being written as it was copied, a C-stack slot reused), and none
    /// are. The walker reads the chain again, twice at most (ADR 0020, decision 6).
    Moved,
}

/// `_PyInterpreterFrame.owner` of a generator's or coroutine's frame
/// (`FRAME_OWNED_BY_GENERATOR`, 3.11–3.13).
const OWNED_BY_GENERATOR: u8 = 1;

/// Why one thread's walk stopped early.
pub(super) enum ThreadFailure {
    Invalid,
    Cycle,
}

impl From<ReadError> for ThreadFailure {
    fn from(_: ReadError) -> Self {
        Self::Invalid
    }
}

impl From<ObjectError> for ThreadFailure {
    fn from(_: ObjectError) -> Self {
        Self::Invalid
    }
}

/// What one frame walk reads with and writes to, lent by the walker for the walk.
pub(super) struct FrameSource<'a, R> {
    pub(super) reader: &'a R,
    pub(super) layout: &'static Layout,
    pub(super) types: &'a TypeAddresses,
    /// Frames per stack (`WalkerConfig::max_depth`).
    pub(super) max_depth: usize,
    /// Caps of the copies of a new code object's names and line table.
    pub(super) limits: CopyLimits,
    pub(super) cache: &'a mut CodeCache,
    pub(super) counters: &'a WalkerCounters,
}

impl<R> FrameSource<'_, R> {
    /// The frame's instruction offset in the unit [`super::linetable`] expects.
    fn lasti(&self, f: &[u8], code: u64) -> i64 {
        let l = self.layout;
        match l.frame_kind {
            FrameKind::FrameObject => i64::from(field_i32(f, l.frame_instr)),
            FrameKind::PrevInstr | FrameKind::InstrPtr => {
                let instr = field_u64(f, l.frame_instr);
                let base = code.wrapping_add(l.code_code_adaptive.unwrap_or(0) as u64);
                // Code units are 2 bytes; a pointer before the start (-1 unit on 3.11/3.12 for
                // a frame that has not started) yields a negative offset.
                (instr.wrapping_sub(base) as i64).div_euclid(2)
            }
        }
    }

    /// On 3.9/3.10 the frame's own `f_lineno` is authoritative while tracing.
    fn explicit_line(&self, f: &[u8]) -> Option<u32> {
        let l = self.layout;
        let lineno = field_i32(f, l.frame_lineno?);
        let valid = match l.frame_trace {
            Some(t) => field_u64(f, t) != 0,
            None => lineno != 0,
        };
        if valid {
            u32::try_from(lineno).ok()
        } else {
            None
        }
    }

    fn flush_cache_events(&mut self) {
        let ev = std::mem::take(&mut self.cache.events);
        bump(&self.counters.code_misses, ev.misses);
        bump(&self.counters.code_replaced, ev.replaced);
        bump(&self.counters.code_cache_full, ev.full);
    }
}

/// Whether the frame at `leaf`, read now, still holds `link`: the code and the caller link the
/// walk took from it. A frame that is the same code at the same place under the same caller is
/// the same stack, whichever call it is.
fn leaf_holds<R: MemoryReader>(src: &FrameSource<'_, R>, leaf: u64, link: (u64, u64)) -> bool {
    let l = src.layout;
    let lo = l.frame_code.min(l.frame_previous);
    let hi = l.frame_code.max(l.frame_previous) + 8;
    let mut buf = [0u8; 64];
    let Some(b) = buf.get_mut(..hi - lo) else {
        return true;
    };
    if src.reader.read(leaf.wrapping_add(lo as u64), b).is_err() {
        return false;
    }
    (
        field_u64(b, l.frame_code - lo),
        field_u64(b, l.frame_previous - lo),
    ) == link
}

/// The buffers of one thread's frame walk, sized once for the walker's depth cap.
#[derive(Debug)]
pub(super) struct FrameWalk {
    /// The walked thread's frames, leaf first: the sample's stack.
    pub(super) frames: Vec<RawFrame>,
    /// Frames of the thread being walked, before their code objects are resolved.
    slots: Vec<FrameSlot>,
    /// Code-object addresses, header copies and read results of those frames (batched read).
    code_addrs: Vec<u64>,
    code_bufs: Vec<u8>,
    code_ok: Vec<bool>,
    /// Entries whose content is compared this walk, the reads that compare them (three per
    /// entry), the bytes read and the reads' results (one batched read).
    compare: Vec<u32>,
    compare_reads: Vec<(u64, usize)>,
    compare_buf: Vec<u8>,
    compare_ok: Vec<bool>,
    /// The copy of the walked thread's live data stack.
    stack_buf: Vec<u8>,
    /// Frames expected outside the data stack (from the thread's last walk), read together
    /// up front, and the ones actually read one by one in this walk.
    pub(super) prefetch_addrs: [u64; MAX_OUTSIDE],
    pub(super) prefetch_n: usize,
    prefetch_buf: Vec<u8>,
    prefetch_ok: [bool; MAX_OUTSIDE],
    pub(super) outside: [u64; MAX_OUTSIDE],
    pub(super) outside_n: usize,
}

impl FrameWalk {
    /// Buffers for stacks of up to `max_depth` frames of the version `layout` describes.
    pub(super) fn new(layout: &Layout, max_depth: usize) -> Self {
        Self {
            frames: Vec::with_capacity(max_depth),
            slots: Vec::with_capacity(max_depth),
            code_addrs: Vec::with_capacity(max_depth),
            code_bufs: vec![0; max_depth.saturating_mul(layout.code_read_size().min(BUF))],
            code_ok: vec![false; max_depth],
            compare: Vec::with_capacity(max_depth),
            compare_reads: Vec::with_capacity(3 * max_depth),
            compare_buf: Vec::with_capacity(COMPARE_BUF),
            compare_ok: vec![false; 3 * max_depth],
            stack_buf: if layout.tstate_datastack.is_some() {
                vec![0; STACK_COPY]
            } else {
                Vec::new()
            },
            prefetch_addrs: [0; MAX_OUTSIDE],
            prefetch_n: 0,
            prefetch_buf: vec![0; MAX_OUTSIDE * layout.frame_read_size.min(BUF)],
            prefetch_ok: [false; MAX_OUTSIDE],
            outside: [0; MAX_OUTSIDE],
            outside_n: 0,
        }
    }

    /// Copies the live part of a thread's current data-stack chunk (3.11+) into
    /// `self.stack_buf` in one read. Returns the remote address the copy starts at and its
    /// length, or `None` (no chunk, implausible pointers, or a failed read: frames are then
    /// read one by one).
    fn copy_datastack<R: MemoryReader>(
        &mut self,
        src: &FrameSource<'_, R>,
        chunk: u64,
        top: u64,
    ) -> Option<(u64, usize)> {
        if chunk == 0 || top <= chunk.checked_add(CHUNK_HEADER)? {
            return None;
        }
        let live = usize::try_from(top - chunk).ok()?;
        let (lo, len) = if live <= STACK_COPY {
            (chunk, live)
        } else {
            (top - STACK_COPY as u64, STACK_COPY)
        };
        let buf = self.stack_buf.get_mut(..len)?;
        src.reader.read(lo, buf).ok()?;
        // With the header in the copy, `top` must lie inside the chunk it claims.
        if lo == chunk && field_u64(buf, CHUNK_SIZE) < live as u64 {
            return None;
        }
        bump(&src.counters.stack_copies, 1);
        Some((lo, len))
    }

    /// Walks the frame chain from `frame` into `self.frames`, leaf first. Returns how the
    /// chain ended: whole, cut at the depth cap, torn at a root no thread can have, or changed
    /// by its thread while read.
    ///
    /// Two passes: the chain is followed first, taking frames from the copied data stack when
    /// they lie in it (3.11+) and reading the others one by one; then the headers of all the
    /// frames' code objects are read in one batched read and resolved through the cache.
    pub(super) fn walk_frames<R: MemoryReader>(
        &mut self,
        src: &mut FrameSource<'_, R>,
        frame: u64,
        chunk: u64,
        top: u64,
    ) -> Result<StackEnd, ThreadFailure> {
        let l = src.layout;
        self.frames.clear();
        self.slots.clear();
        let fsize = l.frame_read_size.min(BUF);
        let window = self.copy_datastack(src, chunk, top);
        self.outside_n = 0;
        if self.prefetch_n > 0 {
            // The frames the last walk had to read one by one (C-stack shims, generators) are
            // usually still there: read them together. Each is used only if the chain leads to
            // its address, and validated like any other frame.
            let n = self.prefetch_n.min(MAX_OUTSIDE);
            src.reader.read_scatter(
                self.prefetch_addrs.get(..n).unwrap_or_default(),
                fsize,
                &mut self.prefetch_buf,
                &mut self.prefetch_ok,
            );
        }
        let mut fbuf = [0u8; BUF];
        self.load_frame(src, frame, window, &mut fbuf[..fsize])?;
        // Read again at once: a frame being written as it was copied shows here, before the
        // walk's work.
        let leaf_link = (
            field_u64(&fbuf, l.frame_code),
            field_u64(&fbuf, l.frame_previous),
        );
        if !leaf_holds(src, frame, leaf_link) {
            return Ok(StackEnd::Moved);
        }
        // Read again after the walk too: a frame pushed where a popped one lay takes its new
        // caller last (3.11/3.12: after its arguments), and a C-stack shim's slot (3.12+) is
        // overwritten by the thread's next C call; both were seen to hold still through the
        // read at once. Code and caller are compared; a generator's caller is cleared as it
        // yields, so a generator leaf that yielded during the walk is read again too.
        let mut cur = frame;
        let mut last = 0u64;
        // Cut at the depth cap, or out of steps (a long run of shims), unless the chain ends.
        let mut truncated = true;
        // The owner of the frame the chain ended at (3.11+).
        let mut root_owner = None;
        // The chain reached a freed frame object (3.9/3.10), or the leaf did not hold.
        let mut moved = false;
        // Shim frames do not count towards the depth; bound the total work anyway.
        let max_steps = src.max_depth.saturating_mul(2).saturating_add(8);
        for _ in 0..max_steps {
            if self.slots.len() >= src.max_depth {
                break;
            }
            let f = &fbuf[..fsize];
            let code = field_u64(f, l.frame_code);
            let previous = field_u64(f, l.frame_previous);
            if previous != 0 && (previous == cur || previous == last) {
                return Err(ThreadFailure::Cycle);
            }
            if l.frame_kind == FrameKind::FrameObject {
                if !type_matches(src.types.frame, f) {
                    return Err(ThreadFailure::Invalid);
                }
                // A freed frame keeps its type and code: only its count tells.
                if field_u64(f, OB_REFCNT) == 0 {
                    moved = true;
                    break;
                }
            }
            let owner = l.frame_owner.map(|o| field_u8(f, o));
            let is_shim = l.owner_cstack.is_some() && owner == l.owner_cstack;
            if is_shim || code == 0 {
                bump(&src.counters.shim_frames, u64::from(is_shim));
                if code == 0 && !is_shim {
                    return Err(ThreadFailure::Invalid);
                }
            } else {
                let slot = FrameSlot {
                    code,
                    lasti: src.lasti(f, code),
                    line: src.explicit_line(f),
                };
                self.slots.push(slot);
            }
            if previous == 0 {
                truncated = false;
                root_owner = owner;
                break;
            }
            self.load_frame(src, previous, window, &mut fbuf[..fsize])?;
            last = cur;
            cur = previous;
        }
        if !leaf_holds(src, frame, leaf_link) {
            self.slots.clear();
            moved = true;
        }
        let outermost_cannot_root = self.resolve_slots(src)?;
        Ok(if moved {
            StackEnd::Moved
        } else if truncated {
            StackEnd::Cut
        } else if outermost_cannot_root || root_owner == Some(OWNED_BY_GENERATOR) {
            StackEnd::Torn
        } else {
            StackEnd::Whole
        })
    }

    /// Fills `out` with the frame at `addr`: from the data-stack copy when it lies inside it,
    /// else with a read.
    fn load_frame<R: MemoryReader>(
        &mut self,
        src: &FrameSource<'_, R>,
        addr: u64,
        window: Option<(u64, usize)>,
        out: &mut [u8],
    ) -> Result<(), ThreadFailure> {
        if let Some((lo, len)) = window {
            if addr >= lo {
                let off = usize::try_from(addr - lo).unwrap_or(usize::MAX);
                if let Some(src) = off
                    .checked_add(out.len())
                    .filter(|&end| end <= len)
                    .and_then(|end| self.stack_buf.get(off..end))
                {
                    out.copy_from_slice(src);
                    return Ok(());
                }
            }
        }
        if let Some(o) = self.outside.get_mut(self.outside_n) {
            *o = addr;
            self.outside_n += 1;
        }
        let n = self.prefetch_n.min(MAX_OUTSIDE);
        let len = out.len();
        if let Some(i) = self.prefetch_addrs[..n].iter().position(|&a| a == addr) {
            if self.prefetch_ok.get(i) == Some(&true) {
                if let Some(src) = self.prefetch_buf.get(i * len..(i + 1) * len) {
                    out.copy_from_slice(src);
                    return Ok(());
                }
            }
        }
        bump(&src.counters.frame_reads, 1);
        src.reader.read(addr, out)?;
        Ok(())
    }

    /// Reads the code headers of `self.slots` in one batched read, proves the cached entries
    /// they match (comparing content where the header cannot tell, in one more batched read),
    /// copies the others, and pushes each frame into `self.frames`. Returns whether the
    /// outermost frame's code is one no thread's outermost frame can run
    /// ([`CodeCache::cannot_root`]).
    ///
    /// Every header is read on every tick: a code object can be freed and another allocated at
    /// its address between two ticks, with its name, file and line table at their old
    /// addresses too (ADR 0020).
    fn resolve_slots<R: MemoryReader>(
        &mut self,
        src: &mut FrameSource<'_, R>,
    ) -> Result<bool, ThreadFailure> {
        let l = src.layout;
        let csize = l.code_read_size().min(BUF);
        // Direct recursion repeats an address: it is read once.
        self.code_addrs.clear();
        for s in &self.slots {
            if self.code_addrs.last() != Some(&s.code) && src.cache.current(s.code).is_none() {
                self.code_addrs.push(s.code);
            }
        }
        src.reader.read_scatter(
            &self.code_addrs,
            csize,
            &mut self.code_bufs,
            &mut self.code_ok,
        );
        self.prove_cached(src, csize);
        let limits = src.limits;
        let mut next_read = 0usize;
        let mut outermost_cannot_root = false;
        for i in 0..self.slots.len() {
            let Some(&slot) = self.slots.get(i) else {
                return Err(ThreadFailure::Invalid);
            };
            let read = (self.code_addrs.get(next_read) == Some(&slot.code)).then(|| {
                next_read += 1;
                next_read - 1
            });
            let resolved = match (src.cache.current(slot.code), read) {
                (Some(idx), _) => Ok(Resolved::Entry(idx)),
                (None, Some(j)) => {
                    if self.code_ok.get(j) != Some(&true) {
                        return Err(ThreadFailure::Invalid);
                    }
                    let header = self
                        .code_bufs
                        .get(j * csize..(j + 1) * csize)
                        .ok_or(ThreadFailure::Invalid)?;
                    let r = src
                        .cache
                        .resolve(src.reader, l, src.types, limits, slot.code, header);
                    src.flush_cache_events();
                    r
                }
                // A repeat of an address whose copy found the cache full.
                (None, None) => Ok(Resolved::Full),
            };
            if i + 1 == self.slots.len() {
                outermost_cannot_root =
                    matches!(resolved, Ok(Resolved::Entry(idx)) if src.cache.cannot_root(idx));
            }
            let raw = match resolved {
                Ok(Resolved::Entry(idx)) if src.cache.is_hidden(idx) => None,
                Ok(Resolved::Entry(idx)) => {
                    let line = match slot.line {
                        Some(line) => line,
                        None => src.cache.line(idx, l.linetable_kind, slot.lasti),
                    };
                    Some(RawFrame {
                        id: u64::from(idx),
                        line,
                    })
                }
                Ok(Resolved::Full) => Some(RawFrame {
                    id: UNKNOWN_CODE_ID,
                    line: 0,
                }),
                // 3.13's `f_executable` may hold a non-code object for frames that run no
                // Python code; skip those rather than failing the whole stack.
                Err(ObjectError::WrongType) if l.frame_kind == FrameKind::InstrPtr => None,
                Err(e) => return Err(e.into()),
            };
            if let Some(raw) = raw {
                self.frames.push(raw);
            }
        }
        Ok(outermost_cannot_root)
    }

    /// Proves the cache entries the headers just read (`self.code_addrs`, `csize` bytes each)
    /// match: at once where the header carries a version, else by reading the entries' name,
    /// file and line table again, all in one batched read, and comparing them with the
    /// copies. Entries left unproven are copied anew by [`Self::resolve_slots`].
    fn prove_cached<R: MemoryReader>(&mut self, src: &mut FrameSource<'_, R>, csize: usize) {
        self.compare.clear();
        self.compare_reads.clear();
        for (j, &addr) in self.code_addrs.iter().enumerate() {
            if self.code_ok.get(j) != Some(&true) {
                continue;
            }
            let Some(header) = self.code_bufs.get(j * csize..(j + 1) * csize) else {
                continue;
            };
            let check = src.cache.check_header(src.layout, src.types, addr, header);
            if let HeaderCheck::CompareContent(idx) = check {
                if self.compare_reads.len() + 3 <= self.compare_ok.len() {
                    self.compare.push(idx);
                    src.cache.content_reads(idx, &mut self.compare_reads);
                }
            }
        }
        if self.compare.is_empty() {
            return;
        }
        // The buffer grows to the largest batch seen and stays (the steady state allocates
        // nothing). A batch is at most 3 reads of `MAX_PRINT` and a header per frame.
        let total: usize = self.compare_reads.iter().map(|r| r.1).sum();
        if self.compare_buf.len() < total {
            self.compare_buf.resize(total, 0);
        }
        src.reader.read_vectored(
            &self.compare_reads,
            &mut self.compare_buf,
            &mut self.compare_ok,
        );
        let mut at = 0usize;
        for (k, &idx) in self.compare.iter().enumerate() {
            let mut fresh: [Option<&mut [u8]>; 3] = [None, None, None];
            let mut rest = self.compare_buf.get_mut(at..).unwrap_or_default();
            for (n, f) in fresh.iter_mut().enumerate() {
                let r = 3 * k + n;
                let len = self.compare_reads.get(r).map_or(0, |r| r.1);
                if len > rest.len() {
                    break;
                }
                let (b, tail) = std::mem::take(&mut rest).split_at_mut(len);
                rest = tail;
                at += len;
                if self.compare_ok.get(r) == Some(&true) {
                    *f = Some(b);
                }
            }
            src.cache.compare_content(idx, fresh);
        }
    }
}
