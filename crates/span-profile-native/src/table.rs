//! The process-wide thread table: one slot per registered thread, each with a preallocated
//! single-producer single-consumer ring of samples.
//!
//! - The **producer** of a slot's ring is the signal handler running on that slot's thread. A
//!   signal handler is not re-entered for its own signal (the signal is blocked while its
//!   handler runs, no `SA_NODEFER`), and only the owning thread's handler writes, so there is
//!   exactly one producer.
//! - The **consumer** is [`crate::NativeWalker::walk`] on the sampler thread, which holds
//!   [`Table::lock`] for the whole drain; registration and deregistration take the same lock,
//!   so slot bookkeeping never races with a drain. The handler never takes the lock.
//! - Memory: `MAX_THREADS * RING` entries of `MAX_DEPTH` frames, allocated zeroed once (the
//!   pages of slots never used are never touched, so they cost address space, not RSS).

use std::cell::UnsafeCell;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

use span_profile_core::ActiveSpanRegistry;

/// Frames kept per sample; deeper stacks are cut and reported as truncated.
pub(crate) const MAX_DEPTH: usize = 96;
/// Samples a thread may have waiting for the sampler. With CPU and wall sampling at 100 Hz a
/// busy thread produces about one per tick, so 16 absorbs a sampler that is ~150 ms late.
pub(crate) const RING: u32 = 16;
/// Threads registered at once. Registration beyond it fails and is counted.
pub(crate) const MAX_THREADS: usize = 1024;

/// Slot states.
pub(crate) const FREE: u32 = 0;
/// Being filled by a registering thread (under the lock).
pub(crate) const CLAIMED: u32 = 1;
/// Registered: the handler may write, the walker drains and signals it.
pub(crate) const ACTIVE: u32 = 2;
/// Deregistered while a walker is attached: the walker drains what is left, then frees it.
pub(crate) const RETIRING: u32 = 3;

/// Entry flags (bit 1 was "on CPU", replaced by [`Entry::cpu_ns`]).
pub(crate) const F_TRUNCATED: u32 = 2;
/// The handler read the registry (the span fields are meaningful, possibly "no span").
pub(crate) const F_SPAN_READ: u32 = 4;
/// The handler found a current span.
pub(crate) const F_HAS_SPAN: u32 = 8;

/// Generations are 24 bits wide in a signal's value.
pub(crate) const GEN_MASK: u32 = 0x00ff_ffff;
/// Marks a signal value as ours: the top 16 bits.
pub(crate) const MAGIC: u64 = 0x5350; // "SP"

/// Packs slot and generation into the 64-bit value a signal carries.
pub(crate) fn encode(index: usize, gen: u32) -> u64 {
    (MAGIC << 48) | (u64::from(gen & GEN_MASK) << 24) | (index as u64 & 0x00ff_ffff)
}

/// The slot index and generation of one of our signal values, or `None` for a foreign one.
pub(crate) fn decode(value: u64) -> Option<(usize, u32)> {
    if value >> 48 != MAGIC {
        return None;
    }
    Some((
        (value & 0x00ff_ffff) as usize,
        ((value >> 24) as u32) & GEN_MASK,
    ))
}

/// One sample as the handler leaves it. Plain data; all-zero is a valid value.
#[repr(C)]
pub(crate) struct Entry {
    pub(crate) len: u32,
    pub(crate) flags: u32,
    pub(crate) weight: u32,
    pub(crate) route: u32,
    /// CPU time the sample stands for, in nanoseconds.
    pub(crate) cpu_ns: u64,
    pub(crate) trace_hi: u64,
    pub(crate) trace_lo: u64,
    pub(crate) span: u64,
    pub(crate) root: u64,
    /// Leaf first: the interrupted pc, then return addresses minus one (call sites).
    pub(crate) frames: [u64; MAX_DEPTH],
}

/// Bytes of a thread name kept in its slot.
pub(crate) const NAME_LEN: usize = 32;

/// One registered thread.
pub(crate) struct Slot {
    pub(crate) state: AtomicU32,
    pub(crate) gen: AtomicU32,
    pub(crate) tid: AtomicI32,
    /// `ExecutionKey::current_thread()` of the thread, cached at registration.
    pub(crate) key: AtomicU64,
    pub(crate) stack_lo: AtomicUsize,
    pub(crate) stack_hi: AtomicUsize,
    /// The thread's CPU-clock timer (`timer_t` is a pointer on glibc), valid if `has_timer`.
    pub(crate) timer: AtomicUsize,
    pub(crate) has_timer: AtomicBool,
    /// A wall signal was sent and not yet handled: do not queue another.
    pub(crate) wall_pending: AtomicBool,
    /// Ticks whose wall signal was not sent because the previous one was still pending (the
    /// thread did not run: preempted, or the signal masked). The next wall sample stands for
    /// them too (walker adds, handler takes).
    pub(crate) wall_owed: AtomicU32,
    /// The thread's CPU clock at its last wall signal (handler-owned).
    pub(crate) last_wall_cpu: AtomicU64,
    /// Ring indices, wrapping: `head` is written by the handler only, `tail` by the walker.
    pub(crate) head: AtomicU32,
    pub(crate) tail: AtomicU32,
    pub(crate) name_len: AtomicUsize,
    /// Written under the lock while `CLAIMED`, read by the walker (under the lock) after.
    name: UnsafeCell<[u8; NAME_LEN]>,
}

impl Slot {
    fn new() -> Self {
        Self {
            state: AtomicU32::new(FREE),
            gen: AtomicU32::new(0),
            tid: AtomicI32::new(0),
            key: AtomicU64::new(0),
            stack_lo: AtomicUsize::new(0),
            stack_hi: AtomicUsize::new(0),
            timer: AtomicUsize::new(0),
            has_timer: AtomicBool::new(false),
            wall_pending: AtomicBool::new(false),
            wall_owed: AtomicU32::new(0),
            last_wall_cpu: AtomicU64::new(0),
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
            name_len: AtomicUsize::new(0),
            name: UnsafeCell::new([0; NAME_LEN]),
        }
    }

    /// Stores the thread's name, cut to [`NAME_LEN`] bytes on a char boundary. Caller holds
    /// the table lock and the slot is `CLAIMED`.
    pub(crate) fn set_name(&self, name: &str) {
        let mut n = name.len().min(NAME_LEN);
        while !name.is_char_boundary(n) {
            n -= 1;
        }
        // SAFETY: (1) the caller holds the table lock, and the name is only read by the walker
        // under that lock, so no reference to the bytes exists while we write them; (2) the
        // handler never reads the name.
        unsafe { (&mut *self.name.get())[..n].copy_from_slice(&name.as_bytes()[..n]) };
        self.name_len.store(n, Ordering::Relaxed);
    }

    /// Copies the name into `out`; caller holds the table lock.
    pub(crate) fn name_into<'a>(&self, out: &'a mut [u8; NAME_LEN]) -> &'a str {
        let n = self.name_len.load(Ordering::Relaxed).min(NAME_LEN);
        // SAFETY: the caller holds the table lock, under which alone the name is written.
        *out = unsafe { *self.name.get() };
        std::str::from_utf8(&out[..n]).unwrap_or("native")
    }
}

span_profile_core::counters! {
    /// Process-wide counters, written by signal handlers (`Relaxed`: independent statistics).
    pub(crate) struct Counters(pub(crate)) {
        /// Samples the handler wrote.
        samples,
        /// Samples lost because the thread's ring was full (the walker was late).
        ring_full,
        /// Our signals that arrived for a slot no longer registered (thread gone, reused tid).
        stray_signals,
        /// Signals that were not ours, passed to the previous handler.
        foreign_signals,
        /// Wall signals that found the thread running, left to the CPU timer.
        wall_covered_by_cpu,
        /// Registrations refused because every slot was taken.
        register_full,
        /// Timer create/arm failures.
        timer_errors,
        /// Wall signals that could not be sent.
        send_errors,
        /// Ticks no sample stands for because a sample's weight hit its cap: a wall signal that
        /// waited through more than 100,000 ticks (the thread had it masked), or more than 1,000
        /// CPU timer expirations merged into one signal.
        capped_ticks,
    }
    /// Process-wide counters of the native walker.
    #[non_exhaustive]
    pub struct NativeStats + {
        /// Threads registered now.
        registered_threads: usize,
    }
}

/// A lock that is a single atomic, so that a `fork` child can reset it.
pub(crate) struct SpinLock(AtomicBool);

/// Holds a [`SpinLock`].
pub(crate) struct SpinGuard<'a>(&'a SpinLock);

impl SpinLock {
    const fn new() -> Self {
        Self(AtomicBool::new(false))
    }
    /// Waits for the lock, yielding. Only registration, deregistration and attach wait; each
    /// holder keeps it for a bounded, short time.
    pub(crate) fn lock(&self) -> SpinGuard<'_> {
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            std::thread::yield_now();
        }
    }
    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_>> {
        // Acquire on success: what the previous holder wrote under the lock is visible.
        self.0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| SpinGuard(self))
    }
    /// For the `fork` child only, where the holder no longer exists.
    pub(crate) fn force_unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        // Release: our writes under the lock happen before the next holder's Acquire.
        self.0 .0.store(false, Ordering::Release);
    }
}

/// The process-wide table.
pub(crate) struct Table {
    pub(crate) slots: Box<[Slot]>,
    ring: Box<[UnsafeCell<Entry>]>,
    /// One past the highest slot ever claimed: the walker scans `0..high_water`.
    pub(crate) high_water: AtomicUsize,
    pub(crate) lock: SpinLock,
    /// A walker is attached (it will drain and free retiring slots).
    pub(crate) attached: AtomicBool,
    /// Bumped by every attach and by the `fork` child: a walker detaches only its own epoch.
    pub(crate) epoch: AtomicU64,
    /// CPU timer period; 0 when CPU sampling is off.
    pub(crate) cpu_period_ns: AtomicU64,
    /// The walker's last tick interval: a wall signal whose thread used at least half of it
    /// in CPU time counts as "running".
    pub(crate) wall_period_ns: AtomicU64,
    /// The signal number timers and wall signals use.
    pub(crate) signal: i32,
    /// The attached walker's registry (borrowed from its `Arc`), read by handlers.
    pub(crate) registry: AtomicPtr<ActiveSpanRegistry>,
    /// Handlers currently between loading `registry` and their last use of it.
    pub(crate) readers: AtomicUsize,
    pub(crate) counters: Counters,
}

// SAFETY: the `UnsafeCell`s are accessed under the protocols documented at the top of this
// module: ring entries by one producer (the owning thread's handler) and one consumer (the
// walker holding the lock), ordered by the Release/Acquire pair on `head` and `tail`; names
// under the lock only.
unsafe impl Sync for Table {}

/// `n` zeroed entries from `alloc_zeroed` (fresh zero pages for a large `n`: untouched pages
/// cost no memory).
fn zeroed_entries(n: usize) -> Box<[UnsafeCell<Entry>]> {
    let Ok(layout) = std::alloc::Layout::array::<UnsafeCell<Entry>>(n.max(1)) else {
        return Box::new([]);
    };
    // SAFETY: the layout has a non-zero size (n >= 1, `Entry` is not zero-sized).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<UnsafeCell<Entry>>();
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: (1) `p` is an allocation of the global allocator with the layout of
    // `[UnsafeCell<Entry>; n]`, as `Box` expects; (2) all-zero bytes are a valid `Entry`
    // (integers and an integer array) and `UnsafeCell` has the layout of its content.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n.max(1))) }
}

impl Table {
    pub(crate) fn new(signal: i32) -> Self {
        let n = MAX_THREADS * RING as usize;
        let ring = zeroed_entries(n);
        Self {
            slots: (0..MAX_THREADS).map(|_| Slot::new()).collect(),
            ring,
            high_water: AtomicUsize::new(0),
            lock: SpinLock::new(),
            attached: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            cpu_period_ns: AtomicU64::new(0),
            wall_period_ns: AtomicU64::new(10_000_000),
            signal,
            registry: AtomicPtr::new(std::ptr::null_mut()),
            readers: AtomicUsize::new(0),
            counters: Counters::default(),
        }
    }

    /// The ring entry `pos` of slot `index` (wrapping). Null if out of range.
    pub(crate) fn entry(&self, index: usize, pos: u32) -> *mut Entry {
        self.ring
            .get(index * RING as usize + (pos % RING) as usize)
            .map_or(std::ptr::null_mut(), UnsafeCell::get)
    }

    /// Returns a slot to the free list. Caller holds the lock, and the slot's thread no longer
    /// produces (it deregistered, or the process forked).
    pub(crate) fn free(&self, slot: &Slot) {
        slot.has_timer.store(false, Ordering::Relaxed);
        slot.wall_pending.store(false, Ordering::Relaxed);
        slot.wall_owed.store(0, Ordering::Relaxed);
        slot.head.store(0, Ordering::Relaxed);
        slot.tail.store(0, Ordering::Relaxed);
        slot.gen.store(
            slot.gen.load(Ordering::Relaxed).wrapping_add(1) & GEN_MASK,
            Ordering::Relaxed,
        );
        // Release: the reset fields are visible to whoever claims the slot next.
        slot.state.store(FREE, Ordering::Release);
    }

    /// Threads registered now.
    pub(crate) fn registered(&self) -> usize {
        let hw = self
            .high_water
            .load(Ordering::Acquire)
            .min(self.slots.len());
        self.slots[..hw]
            .iter()
            .filter(|s| s.state.load(Ordering::Relaxed) == ACTIVE)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_values_round_trip_and_foreign_ones_are_rejected() {
        let v = encode(1023, 0x12_3456);
        assert_eq!(decode(v), Some((1023, 0x12_3456)));
        assert_eq!(decode(encode(5, GEN_MASK + 3)), Some((5, 2)));
        assert_eq!(decode(42), None);
    }

    #[test]
    fn entries_wrap_within_their_slot() {
        let t = Table::new(0);
        assert_eq!(t.entry(3, 0), t.entry(3, RING));
        assert_ne!(t.entry(3, 0), t.entry(4, 0));
        assert!(t.entry(MAX_THREADS, 0).is_null());
    }
}
