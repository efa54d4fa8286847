//! The span-object table (ADR 0011): what the sampler labels a sample with when a given SDK
//! span object is OpenTelemetry's current span, by the object's address.
//!
//! The span processor inserts an object as its span starts and removes it once nothing else
//! references it (`module/span_objects.rs`); the sampler looks an address up for every sampled
//! thread or task whose context holds a span. A lookup is lock-free and allocation-free.
//!
//! Each slot is a seqlock over atomics. Its sequence word is also its writers' claim: a writer
//! makes it odd by compare-and-swap before touching the slot, so writers of different
//! addresses never mix their words in one slot. A reader that sees an odd or changed sequence
//! retries, and after a few attempts counts the lookup in [`SpanObjectTable::contended`] and
//! gives no span.
//!
//! **Memory.** The slots are allocated zeroed, and zero is an empty slot, so a slot's page
//! becomes resident only when a slot on it is first written. An object's home slot follows
//! its address: the interpreter allocates span objects from pools of same-sized blocks, so
//! the objects in use map to a few runs of slots and the table touches a few of its pages,
//! not all of them. The address bits above the table's span are mixed into the home, so
//! pools at the same offset of different address blocks do not pile up on the same slots.
//!
//! **Span boundaries.** The table also counts, per thread, the spans started and ended on it
//! ([`SpanObjectTable::span_boundary`]). The sampler reads the count before and after it copies
//! a thread's frames: if it moved, a span began or ended during the copy, and the frames may
//! belong to a span that the context read before and after it no longer shows (the context's
//! variables freed and reallocated at the same address: no span, a span, no span again).

use std::sync::atomic::{fence, AtomicU64, Ordering};

use span_profile_core::{ActiveSpan, AtomicActiveSpan};

/// Slots a lookup looks at from its home: bounds a miss.
pub const OBJECT_PROBE: usize = 8;
/// Lookups that find the slot mid-write this many times in a row give up.
const READ_ATTEMPTS: usize = 4;
/// Python objects are 16-byte aligned: the low four address bits carry nothing.
const ALIGN_BITS: u32 = 4;
/// Span-boundary counters, each thread's chosen by a hash of its id. Threads that share one
/// only drop more samples (a boundary on one looks like a boundary on the other), never fewer.
const BOUNDARY_SLOTS: usize = 256;

/// One thread's span-boundary count, on its own cache line: the threads that bump them do not
/// share lines.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Boundaries(AtomicU64);

/// One listed object. Zero in every word is an empty slot.
#[derive(Debug)]
#[repr(C)]
struct Slot {
    /// The seqlock: odd while a writer holds the slot.
    seq: AtomicU64,
    /// The object's address; 0 when empty.
    addr: AtomicU64,
    span: AtomicActiveSpan,
}

impl Slot {
    /// Claims the slot for writing if it is free of other writers; returns the even sequence
    /// it had.
    fn claim(&self) -> Option<u64> {
        let s = self.seq.load(Ordering::Relaxed);
        if s & 1 == 1 {
            return None;
        }
        // Acquire: this writer sees the previous writer's stores. The odd value orders before
        // the data stores that follow through the Release fence in `write`.
        self.seq
            .compare_exchange(s, s.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
            .ok()
    }

    /// Writes `addr` and `value` into a slot claimed at sequence `s`, and releases it.
    fn write(&self, s: u64, addr: u64, value: Option<ActiveSpan>) {
        // Release fence: a reader that sees any of the stores below also sees the odd
        // sequence (or a newer one) on its re-check, and retries (the seqlock writer protocol).
        fence(Ordering::Release);
        self.addr.store(addr, Ordering::Relaxed);
        self.span.store_relaxed(value);
        self.unclaim(s);
    }

    /// Releases a slot claimed at sequence `s`. Always moves the sequence on, so a reader
    /// that overlapped the claim retries even when nothing was written.
    fn unclaim(&self, s: u64) {
        // Release: the data stores are visible before the even sequence that publishes them.
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// The slot's value if it holds `addr`: `Err(())` while a writer holds it.
    fn read(&self, addr: u64) -> Result<Option<ActiveSpan>, ()> {
        // Acquire: pairs with the writer's Release store of an even sequence.
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return Err(());
        }
        let a = self.addr.load(Ordering::Relaxed);
        let value = self.span.load_relaxed();
        // Acquire fence: the loads above complete before the re-check, so an unchanged
        // sequence means no writer touched the slot in between.
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != s1 {
            return Err(());
        }
        if a != addr {
            return Ok(None);
        }
        Ok(value)
    }
}

/// What [`SpanObjectTable::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insert {
    /// The address was listed; its entry now holds the new value.
    Updated,
    /// The address is listed anew.
    Listed,
    /// Not listed: no free slot near its home, new entries were not allowed, or address 0.
    Full,
}

/// A fixed table from span-object addresses to what their samples carry (ADR 0011; the design
/// is in `walker/object_table.rs`'s module docs).
///
/// ```
/// use span_profile::walker::{Insert, SpanObjectTable};
/// use span_profile_core::{labels::LabelId, ActiveSpan, SpanContext, SpanId, TraceId};
///
/// let table = SpanObjectTable::with_slots(1024);
/// let span = ActiveSpan {
///     ctx: SpanContext {
///         trace_id: TraceId::from_u128(1).unwrap(),
///         span_id: SpanId::from_u64(2).unwrap(),
///         local_root_span_id: SpanId::from_u64(2).unwrap(),
///     },
///     route: LabelId(0),
/// };
/// assert_eq!(table.insert(0x7f00_1230, span, true), Insert::Listed);
/// assert_eq!(table.get(0x7f00_1230), Some(span));
/// table.remove(0x7f00_1230);
/// assert_eq!(table.get(0x7f00_1230), None);
/// ```
#[derive(Debug)]
pub struct SpanObjectTable {
    slots: Box<[Slot]>,
    mask: usize,
    /// log2 of the slot count.
    bits: u32,
    contended: AtomicU64,
    boundaries: Box<[Boundaries]>,
}

impl SpanObjectTable {
    /// A table of `slots` slots (rounded up to a power of two, at least 64). At most
    /// [`OBJECT_PROBE`] objects whose homes are near each other fit; size it at about twice
    /// the objects listed at once.
    pub fn with_slots(slots: usize) -> Self {
        let n = slots.max(64).next_power_of_two();
        Self {
            slots: zeroed_slots(n),
            mask: n - 1,
            bits: n.trailing_zeros(),
            contended: AtomicU64::new(0),
            boundaries: (0..BOUNDARY_SLOTS).map(|_| Boundaries::default()).collect(),
        }
    }

    /// Counts a span started or ended on the thread whose `threading.get_ident()` (its
    /// `pthread_t`, `tstate->thread_id`) is `thread_id`. Call it before the span becomes
    /// current and after it stops being current: lock-free, one atomic add.
    pub fn span_boundary(&self, thread_id: u64) {
        // Release: the sampler that sees the new count also sees the span's start or end.
        self.boundary_slot(thread_id)
            .fetch_add(1, Ordering::Release);
    }

    /// The span boundaries counted on `thread_id`'s counter so far (shared with the threads
    /// whose ids hash alike). Equal before and after a copy of the thread's frames: no span
    /// of its started or ended in between.
    pub fn span_boundaries(&self, thread_id: u64) -> u64 {
        self.boundary_slot(thread_id).load(Ordering::Acquire)
    }

    fn boundary_slot(&self, thread_id: u64) -> &AtomicU64 {
        // `pthread_t`s are addresses of similarly aligned blocks: mix every bit in.
        let i = (thread_id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % BOUNDARY_SLOTS;
        &self.boundaries[i].0
    }

    /// Where the slots are: their first byte and their length in bytes (to measure how much
    /// of the table is resident).
    pub fn memory(&self) -> (*const u8, usize) {
        (
            self.slots.as_ptr().cast::<u8>(),
            std::mem::size_of_val(&*self.slots),
        )
    }

    fn home(&self, addr: u64) -> usize {
        // Nearby objects get nearby slots (see the module docs); the block above the table's
        // span of addresses picks a mask to XOR in, which keeps each aligned run of slots
        // together and moves it as a whole.
        let low = addr >> ALIGN_BITS;
        let block = addr >> (ALIGN_BITS + self.bits);
        let scatter = block.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        ((low ^ scatter) as usize) & self.mask
    }

    fn probe(&self, addr: u64) -> impl Iterator<Item = &Slot> {
        let home = self.home(addr);
        (0..OBJECT_PROBE).map(move |i| &self.slots[(home + i) & self.mask])
    }

    /// Lists `addr` as `span`: updates its entry if it is listed, else (if `new` allows)
    /// takes the first free slot near its home. Nothing for address 0.
    ///
    /// Inserts and removes of different addresses may run at once; two inserts of one address
    /// must not (the span processor writes under the GIL), else it may be listed twice, each
    /// copy with one of the values, until [`remove`](Self::remove) clears both.
    pub fn insert(&self, addr: u64, span: ActiveSpan, new: bool) -> Insert {
        if addr == 0 {
            return Insert::Full;
        }
        // One pass: an update in place if listed (so an address is listed once), else the
        // first free slot seen.
        let mut free = None;
        for slot in self.probe(addr) {
            let a = slot.addr.load(Ordering::Relaxed);
            if a == addr {
                if let Some(s) = self.claim_holding(slot, addr) {
                    slot.write(s, addr, Some(span));
                    return Insert::Updated;
                }
            } else if a == 0 && free.is_none() {
                free = Some(slot);
            }
        }
        if !new {
            return Insert::Full;
        }
        // Another writer may take the free slot between the look and the claim: then the
        // window is looked at again.
        let candidates = free.into_iter().chain(self.probe(addr));
        for slot in candidates {
            if slot.addr.load(Ordering::Relaxed) == 0 {
                if let Some(s) = self.claim_holding(slot, 0) {
                    slot.write(s, addr, Some(span));
                    return Insert::Listed;
                }
            }
        }
        Insert::Full
    }

    /// Claims `slot` if it still holds `addr` once claimed (another writer may have taken it
    /// between the look and the claim). Spins while another writer holds it.
    fn claim_holding(&self, slot: &Slot, addr: u64) -> Option<u64> {
        loop {
            if let Some(s) = slot.claim() {
                if slot.addr.load(Ordering::Relaxed) == addr {
                    return Some(s);
                }
                slot.unclaim(s);
                return None;
            }
            std::hint::spin_loop();
        }
    }

    /// Unlists `addr`; nothing if it is not listed.
    pub fn remove(&self, addr: u64) {
        if addr == 0 {
            return;
        }
        for slot in self.probe(addr) {
            if slot.addr.load(Ordering::Relaxed) == addr {
                if let Some(s) = self.claim_holding(slot, addr) {
                    slot.write(s, 0, None);
                }
            }
        }
    }

    /// What samples carry while the object at `addr` is current, if it is listed. Lock-free
    /// and allocation-free: safe on the sampling path.
    pub fn get(&self, addr: u64) -> Option<ActiveSpan> {
        if addr == 0 {
            return None;
        }
        for slot in self.probe(addr) {
            // A quick skip of slots holding other objects, before the seqlock protocol.
            if slot.addr.load(Ordering::Relaxed) != addr {
                continue;
            }
            for _ in 0..READ_ATTEMPTS {
                match slot.read(addr) {
                    Ok(Some(v)) => return Some(v),
                    Ok(None) => break,
                    Err(()) => std::hint::spin_loop(),
                }
            }
            if slot.addr.load(Ordering::Relaxed) == addr {
                self.contended.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        None
    }

    /// Lookups that gave no span because writers kept the slot busy.
    pub fn contended(&self) -> u64 {
        self.contended.load(Ordering::Relaxed)
    }
}

/// `n` empty slots, allocated zeroed so that their pages stay untouched until written.
fn zeroed_slots(n: usize) -> Box<[Slot]> {
    let layout = std::alloc::Layout::array::<Slot>(n).expect("a slot table fits in memory");
    // The allocator returns zeroed memory without writing it when it comes fresh from the
    // kernel (calloc of a large block maps new pages). `Slot`'s alignment (8) is at most the
    // allocator's minimum, which is what lets `alloc_zeroed` call calloc rather than write
    // the zeros itself.
    const _: () = assert!(std::mem::align_of::<Slot>() <= 8);
    // SAFETY: `layout` has a non-zero size (n >= 64 and `Slot` is 56 bytes).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `ptr` is a live allocation of `layout`, which is `Layout::array::<Slot>(n)`,
    // from the global allocator: the layout `Box<[Slot]>` frees with. Every byte is zero.
    // `Slot` is `repr(C)` over `AtomicU64`s and an `AtomicActiveSpan`, which core guarantees
    // is five `AtomicU64`s (`repr(C)`), and all-zero bits are the valid `AtomicU64` 0; so
    // the memory holds `n` initialised slots, which the box now owns.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.cast::<Slot>(), n)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use span_profile_core::labels::LabelId;
    use span_profile_core::{SpanContext, SpanId, TraceId};

    fn span(id: u64) -> ActiveSpan {
        ActiveSpan {
            ctx: SpanContext {
                trace_id: TraceId::from_u128(u128::from(id) << 64 | 7).unwrap(),
                span_id: SpanId::from_u64(id).unwrap(),
                local_root_span_id: SpanId::from_u64(1).unwrap(),
            },
            route: LabelId(id as u32),
        }
    }

    #[test]
    fn an_object_is_found_while_listed_and_updated_in_place() {
        let t = SpanObjectTable::with_slots(64);
        assert_eq!(t.get(0x1000), None);
        assert_eq!(t.insert(0x1000, span(2), true), Insert::Listed);
        assert_eq!(t.insert(0x1010, span(3), true), Insert::Listed);
        assert_eq!(t.get(0x1000), Some(span(2)));
        assert_eq!(t.get(0x1010), Some(span(3)));
        // An update is allowed where a new entry is not.
        assert_eq!(t.insert(0x1000, span(4), false), Insert::Updated);
        assert_eq!(t.get(0x1000), Some(span(4)));
        assert_eq!(t.insert(0x1020, span(5), false), Insert::Full);
        assert_eq!(t.get(0x1020), None);
        let listed = t
            .slots
            .iter()
            .filter(|s| s.addr.load(Ordering::Relaxed) == 0x1000);
        assert_eq!(
            listed.count(),
            1,
            "an update does not list the address twice"
        );
        t.remove(0x1000);
        assert_eq!(t.get(0x1000), None);
        assert_eq!(t.get(0x1010), Some(span(3)));
    }

    #[test]
    fn address_zero_is_never_listed() {
        let t = SpanObjectTable::with_slots(64);
        assert_eq!(t.insert(0, span(2), true), Insert::Full);
        assert_eq!(t.get(0), None);
    }

    #[test]
    fn colliding_addresses_fill_the_probe_window_and_then_are_refused() {
        // Addresses a whole number of table spans apart share a home when the scatter of
        // their blocks agrees: search for more than a window's worth.
        let t = SpanObjectTable::with_slots(64);
        let span_bytes = 64u64 << ALIGN_BITS;
        let base = 0x4000_0000u64;
        let mut same = vec![base];
        let mut a = base;
        while same.len() <= OBJECT_PROBE {
            a += span_bytes;
            if t.home(a) == t.home(base) {
                same.push(a);
            }
        }
        for (i, &addr) in same.iter().take(OBJECT_PROBE).enumerate() {
            let r = t.insert(addr, span(i as u64 + 2), true);
            assert_eq!(r, Insert::Listed, "slot {i} of the window");
        }
        let r = t.insert(same[OBJECT_PROBE], span(99), true);
        assert_eq!(r, Insert::Full, "the window is full");
        for (i, &addr) in same.iter().take(OBJECT_PROBE).enumerate() {
            assert_eq!(t.get(addr), Some(span(i as u64 + 2)));
        }
        // A removal frees a slot for it.
        t.remove(same[3]);
        assert_eq!(t.insert(same[OBJECT_PROBE], span(99), true), Insert::Listed);
        assert_eq!(t.get(same[OBJECT_PROBE]), Some(span(99)));
    }

    #[test]
    fn objects_of_one_pool_take_a_run_of_slots() {
        // 256 objects of 64 bytes, one 16 KiB pool: 1,024 consecutive homes at most, so they
        // touch at most 1,024 slots' pages (57 KiB of a 917 KiB table), not the whole table.
        let t = SpanObjectTable::with_slots(16384);
        let pool = 0x7f12_3456_c000u64;
        let homes: Vec<usize> = (0..256).map(|i| t.home(pool + 64 * i)).collect();
        let (lo, hi) = (homes.iter().min().unwrap(), homes.iter().max().unwrap());
        assert!(hi - lo < 1024, "homes {lo}..{hi}");
        let mut distinct = homes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 256, "no two objects of a pool share a home");
    }

    #[test]
    fn readers_never_see_a_torn_value_while_writers_churn() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let t = Arc::new(SpanObjectTable::with_slots(64));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (t, stop) = (t.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let addr = 0x1000 + 16 * (w * 8 + i % 8);
                        t.insert(addr, span(2 + i % 1000), true);
                        if i.is_multiple_of(3) {
                            t.remove(addr);
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        for n in 0..200_000u64 {
            let addr = 0x1000 + 16 * (n % 16);
            if let Some(v) = t.get(addr) {
                // Every word of a value comes from one write: the id fixes the others.
                let id = v.ctx.span_id.to_u64();
                assert_eq!(v, span(id));
            }
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
    }
}
