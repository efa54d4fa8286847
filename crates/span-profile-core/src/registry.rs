//! The active-span registry: which span is current on each thread or task.
//!
//! Span hooks call [`ActiveSpanRegistry::enter`] and [`ActiveSpanRegistry::exit`]; the sampler
//! calls [`ActiveSpanRegistry::current`] for every sampled key. Hooks serialise per key on a
//! sharded mutex that the sampler never takes: the sampler reads a fixed table of slots, each a
//! seqlock over atomics, so a read never waits for a hook and never allocates.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::num::NonZeroU64;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::labels::LabelId;
use crate::{ExecutionKey, SpanContext, SpanId, TraceId};
use rustc_hash::FxBuildHasher as FxBuild;

/// What the registry publishes for a key: the innermost span and its route label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ActiveSpan {
    /// The span, with its trace and local root.
    pub ctx: SpanContext,
    /// The route of the local root, interned in the [`crate::SpanTable`];
    /// [`crate::labels::LabelValues::BACKGROUND`] when unknown.
    pub route: LabelId,
}

/// An `Option<ActiveSpan>` in five atomic words, for the data of a seqlock slot: the slot's
/// writer stores it and its readers load it between two reads of the slot's sequence, which
/// make the words one value. The words are the trace id's high and low halves, the span id,
/// the local root and the route; "no span" is all zeros.
///
/// Guaranteed layout: five `AtomicU64`s and nothing else (`repr(C)`), so zeroed memory is a
/// valid value holding no span (a table of slots can be allocated zeroed).
///
/// ```
/// use span_profile_core::{labels::LabelId, ActiveSpan, AtomicActiveSpan, SpanContext, SpanId, TraceId};
///
/// let a = ActiveSpan {
///     ctx: SpanContext {
///         trace_id: TraceId::from_u128(7).unwrap(),
///         span_id: SpanId::from_u64(2).unwrap(),
///         local_root_span_id: SpanId::from_u64(1).unwrap(),
///     },
///     route: LabelId(3),
/// };
/// let cell = AtomicActiveSpan::default();
/// assert_eq!(cell.load_relaxed(), None);
/// cell.store_relaxed(Some(a));
/// assert_eq!(cell.load_relaxed(), Some(a));
/// ```
#[derive(Debug, Default)]
#[repr(C)]
pub struct AtomicActiveSpan([AtomicU64; 5]);

impl AtomicActiveSpan {
    /// Stores `span` word by word (Relaxed: the seqlock's fences order the words).
    pub fn store_relaxed(&self, span: Option<ActiveSpan>) {
        let words = match span {
            Some(a) => {
                let t = a.ctx.trace_id.to_u128();
                [
                    (t >> 64) as u64,
                    t as u64,
                    a.ctx.span_id.to_u64(),
                    a.ctx.local_root_span_id.to_u64(),
                    u64::from(a.route.0),
                ]
            }
            None => [0; 5],
        };
        for (w, v) in self.0.iter().zip(words) {
            w.store(v, Ordering::Relaxed);
        }
    }

    /// Loads the words (Relaxed) and makes them a span; `None` if any id is zero.
    pub fn load_relaxed(&self) -> Option<ActiveSpan> {
        let [hi, lo, span, root, route] = self.0.each_ref().map(|w| w.load(Ordering::Relaxed));
        Some(ActiveSpan {
            ctx: SpanContext {
                trace_id: TraceId::from_u128((u128::from(hi) << 64) | u128::from(lo))?,
                span_id: SpanId::from_u64(span)?,
                local_root_span_id: SpanId::from_u64(root)?,
            },
            route: LabelId(route as u32),
        })
    }
}

/// How many slots a key may probe past its home slot. Keeps a miss bounded.
const PROBE: usize = 8;
const SHARDS: usize = 16;
/// A shard keeps the entries of keys whose stack emptied (their slot released) while it has
/// at most this many entries, so a thread that enters and leaves spans over and over does not
/// insert and remove its entry each time. Past it, emptied entries are removed: at most
/// `SHARDS * KEEP_EMPTY` idle entries stay, however many keys (tasks) come and go.
const KEEP_EMPTY: usize = 64;
/// Marks a slot whose `thread` word holds no key.
const EMPTY: u64 = u64::MAX;

/// One published entry. Every field is an atomic so that readers need no `unsafe`; `seq` is
/// the seqlock: odd while a writer is mid-update.
#[derive(Debug)]
struct Slot {
    seq: AtomicU64,
    /// Ownership word: 0 free, 1 claimed. Claimed by CAS so two keys never share a slot.
    owner: AtomicU64,
    thread: AtomicU64,
    task: AtomicU64,
    span: AtomicActiveSpan,
}

impl Slot {
    fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            owner: AtomicU64::new(0),
            thread: AtomicU64::new(EMPTY),
            task: AtomicU64::new(0),
            span: AtomicActiveSpan::default(),
        }
    }

    /// Publishes `value` (or "no span") for `key`. Callers hold the key's shard lock, so there
    /// is one writer per slot at a time.
    fn publish(&self, key: ExecutionKey, value: Option<ActiveSpan>) {
        let s = self.seq.load(Ordering::Relaxed);
        // Relaxed store of the odd value, then a Release fence: the fence orders the odd
        // sequence number before every data store below, so a reader that sees any new data
        // also sees an odd or newer sequence and retries (the seqlock writer protocol).
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.thread.store(key.thread, Ordering::Relaxed);
        self.task
            .store(key.task.map_or(0, NonZeroU64::get), Ordering::Relaxed);
        self.span.store_relaxed(value);
        // Release: the even sequence number is published after all data stores, so a reader
        // that Acquire-loads it first sees complete data.
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    fn clear(&self) {
        self.publish(
            ExecutionKey {
                thread: EMPTY,
                task: None,
            },
            None,
        );
    }

    /// Reads the slot if it holds `key`. `Err(())` when a writer was mid-update.
    fn read(&self, key: ExecutionKey) -> Result<Option<Option<ActiveSpan>>, ()> {
        // Acquire: pairs with the writer's final Release store of an even number.
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return Err(());
        }
        let thread = self.thread.load(Ordering::Relaxed);
        let task = self.task.load(Ordering::Relaxed);
        let value = self.span.load_relaxed();
        // Acquire fence: keeps the data loads above before the re-check of `seq` below, so if
        // the sequence is unchanged no writer touched the data in between.
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != s1 {
            return Err(());
        }
        if thread != key.thread || task != key.task.map_or(0, NonZeroU64::get) {
            return Ok(None);
        }
        Ok(Some(value))
    }
}

/// Spans held inline per key before spilling to the heap: nesting deeper than this is rare.
const INLINE_DEPTH: usize = 4;

/// A key's stack of entered spans: inline up to [`INLINE_DEPTH`], so entering a span on a new
/// key does not allocate in the common case.
#[derive(Debug, Clone, Default)]
struct SpanStack {
    inline: [Option<ActiveSpan>; INLINE_DEPTH],
    len: usize,
    spill: Vec<ActiveSpan>,
}

impl SpanStack {
    fn push(&mut self, a: ActiveSpan) {
        if self.len < INLINE_DEPTH {
            self.inline[self.len] = Some(a);
        } else {
            self.spill.push(a);
        }
        self.len += 1;
    }

    fn get(&self, i: usize) -> Option<ActiveSpan> {
        if i < INLINE_DEPTH {
            self.inline[i]
        } else {
            self.spill.get(i - INLINE_DEPTH).copied()
        }
    }

    fn last(&self) -> Option<ActiveSpan> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }

    /// Removes the innermost entry of `span_id`; false if absent.
    fn remove(&mut self, span_id: SpanId) -> bool {
        let Some(pos) = (0..self.len)
            .rev()
            .find(|&i| self.get(i).is_some_and(|a| a.ctx.span_id == span_id))
        else {
            return false;
        };
        for i in pos..self.len - 1 {
            let next = self.get(i + 1);
            if i < INLINE_DEPTH {
                self.inline[i] = next;
            } else if let (Some(slot), Some(n)) = (self.spill.get_mut(i - INLINE_DEPTH), next) {
                *slot = n;
            }
        }
        self.len -= 1;
        if self.len >= INLINE_DEPTH {
            self.spill.truncate(self.len - INLINE_DEPTH);
        } else {
            self.inline[self.len] = None;
            self.spill.clear();
        }
        true
    }

    /// Empties the stack. Entries at `len` and beyond are never read, so only `len` and the
    /// spill are reset (cheap on the hook path).
    fn clear(&mut self) {
        self.len = 0;
        self.spill.clear();
    }

    fn to_vec(&self) -> Vec<ActiveSpan> {
        (0..self.len).filter_map(|i| self.get(i)).collect()
    }
}

/// The hook-side state of one key: its stack of entered spans and its slot.
#[derive(Debug, Default)]
struct KeyState {
    stack: SpanStack,
    slot: Option<usize>,
}

/// Counters of the registry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegistryStats {
    /// Keys that currently have at least one entered span.
    pub active_keys: usize,
    /// Enters whose key found no free slot (the key's spans are invisible to the sampler).
    pub full: u64,
    /// Exits of a span that was not entered on that key.
    pub unmatched_exits: u64,
    /// Sampler reads that gave up because writers kept updating the slot.
    pub contended_reads: u64,
}

/// Which span is current on each [`ExecutionKey`].
///
/// - `enter`/`exit` form a stack per key, so nested spans work.
/// - An exit may come out of order (the span is removed wherever it sits in the stack) and
///   from any thread (keys are explicit).
/// - [`ActiveSpanRegistry::current`] never takes a lock that hooks hold and never allocates.
/// - A key whose stack empties releases its slot and its hook-side state, so memory stays
///   bounded as threads and tasks come and go.
///
/// ```
/// use span_profile_core::{ActiveSpan, ActiveSpanRegistry, ExecutionKey, SpanContext, SpanId, TraceId};
/// use span_profile_core::labels::LabelValues;
///
/// let reg = ActiveSpanRegistry::with_capacity(1024);
/// let key = ExecutionKey::thread(7);
/// let span = |id| ActiveSpan {
///     ctx: SpanContext {
///         trace_id: TraceId::from_u128(1).unwrap(),
///         span_id: SpanId::from_u64(id).unwrap(),
///         local_root_span_id: SpanId::from_u64(1).unwrap(),
///     },
///     route: LabelValues::BACKGROUND,
/// };
/// reg.enter(key, span(1));
/// reg.enter(key, span(2));
/// assert_eq!(reg.current(key).unwrap().ctx.span_id.to_u64(), 2);
/// reg.exit(key, SpanId::from_u64(2).unwrap());
/// assert_eq!(reg.current(key).unwrap().ctx.span_id.to_u64(), 1);
/// reg.exit(key, SpanId::from_u64(1).unwrap());
/// assert!(reg.current(key).is_none());
/// ```
#[derive(Debug)]
pub struct ActiveSpanRegistry {
    slots: Box<[Slot]>,
    mask: usize,
    shards: [Mutex<HashMap<ExecutionKey, KeyState, FxBuild>>; SHARDS],
    full: AtomicU64,
    unmatched: AtomicU64,
    contended: AtomicU64,
}

impl Default for ActiveSpanRegistry {
    fn default() -> Self {
        Self::with_capacity(4096)
    }
}

fn hash_key(key: ExecutionKey) -> u64 {
    // A fixed multiplicative mix: fast, and stable across runs (no random state needed, keys
    // are not attacker-chosen).
    let mut h = rustc_hash::FxHasher::default();
    key.hash(&mut h);
    h.finish()
}

impl ActiveSpanRegistry {
    /// A registry with room for about `capacity` keys with active spans at once (rounded up to
    /// a power of two; at least 64).
    pub fn with_capacity(capacity: usize) -> Self {
        let n = capacity.max(64).next_power_of_two();
        Self {
            slots: (0..n).map(|_| Slot::new()).collect(),
            mask: n - 1,
            shards: std::array::from_fn(|_| Mutex::new(HashMap::default())),
            full: AtomicU64::new(0),
            unmatched: AtomicU64::new(0),
            contended: AtomicU64::new(0),
        }
    }

    fn shard(&self, h: u64) -> std::sync::MutexGuard<'_, HashMap<ExecutionKey, KeyState, FxBuild>> {
        // A poisoned shard only means a hook panicked mid-update; the map is still coherent
        // (every mutation is a single insert/remove/push), so keep using it.
        let i = (h >> 60) as usize % SHARDS;
        self.shards[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn claim_slot(&self, h: u64) -> Option<usize> {
        let home = h as usize & self.mask;
        (0..PROBE).map(|i| (home + i) & self.mask).find(|&i| {
            self.slots[i]
                .owner
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Makes `span` the innermost current span of `key`.
    pub fn enter(&self, key: ExecutionKey, span: ActiveSpan) {
        let h = hash_key(key);
        let mut shard = self.shard(h);
        let state = shard.entry(key).or_default();
        state.stack.push(span);
        self.publish(h, key, state, span);
    }

    /// Publishes `top` as `key`'s current span, claiming a slot on first use.
    fn publish(&self, h: u64, key: ExecutionKey, state: &mut KeyState, top: ActiveSpan) {
        if state.slot.is_none() {
            state.slot = self.claim_slot(h);
            if state.slot.is_none() {
                self.full.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(i) = state.slot {
            self.slots[i].publish(key, Some(top));
        }
    }

    /// Removes `span_id` from `key`'s stack, wherever it is. The innermost remaining span
    /// becomes current. Unknown exits are counted and otherwise ignored.
    pub fn exit(&self, key: ExecutionKey, span_id: SpanId) {
        let h = hash_key(key);
        let mut shard = self.shard(h);
        let Some(state) = shard.get_mut(&key) else {
            self.unmatched.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if !state.stack.remove(span_id) {
            self.unmatched.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let top = state.stack.last();
        match (top, state.slot) {
            (Some(top), Some(i)) => self.slots[i].publish(key, Some(top)),
            (Some(_), None) => {}
            (None, slot) => {
                if let Some(i) = slot {
                    self.release(i);
                }
                state.slot = None;
                if shard.len() > KEEP_EMPTY {
                    shard.remove(&key);
                }
            }
        }
    }

    /// Replaces `key`'s whole stack with `span` (or empties it with `None`). For hooks that
    /// know the exact current span after every context switch, such as a runtime-context
    /// wrapper, rather than a sequence of enters and exits.
    pub fn set_current(&self, key: ExecutionKey, span: Option<ActiveSpan>) {
        match span {
            None => self.forget(key),
            Some(span) => {
                let h = hash_key(key);
                let mut shard = self.shard(h);
                let state = shard.entry(key).or_default();
                state.stack.clear();
                state.stack.push(span);
                self.publish(h, key, state, span);
            }
        }
    }

    /// Forgets every span of `key` (its thread ended, its task finished).
    pub fn forget(&self, key: ExecutionKey) {
        let h = hash_key(key);
        let mut shard = self.shard(h);
        let keep = shard.len() <= KEEP_EMPTY;
        let Some(state) = shard.get_mut(&key) else {
            return;
        };
        if let Some(i) = state.slot.take() {
            self.release(i);
        }
        if keep {
            state.stack.clear();
        } else {
            shard.remove(&key);
        }
    }

    fn release(&self, i: usize) {
        self.slots[i].clear();
        // Release: the cleared contents are visible before another key can claim the slot.
        self.slots[i].owner.store(0, Ordering::Release);
    }

    /// The current span of `key`, if any. Lock-free and allocation-free: safe on the
    /// sampling path. Gives `None` (and counts it) in the rare case that writers updated the
    /// slot during every one of a few attempts.
    pub fn current(&self, key: ExecutionKey) -> Option<ActiveSpan> {
        let home = hash_key(key) as usize & self.mask;
        for i in 0..PROBE {
            let slot = &self.slots[(home + i) & self.mask];
            // Fast skip of slots that hold another thread, without the seqlock protocol. A
            // key being published at this very instant may be missed: the sample is then
            // taken as if just before the enter, which is as true as just after.
            if slot.thread.load(Ordering::Relaxed) != key.thread {
                continue;
            }
            let mut attempts = 0;
            loop {
                match slot.read(key) {
                    Ok(Some(Some(v))) => return Some(v),
                    // A cleared slot holds no span; it matches only a key whose thread id is
                    // the empty marker itself, whose own slot may lie further on: probe on.
                    Ok(Some(None)) | Ok(None) => break,
                    Err(()) if attempts < 4 => {
                        attempts += 1;
                        std::hint::spin_loop();
                    }
                    Err(()) => {
                        self.contended.fetch_add(1, Ordering::Relaxed);
                        return None;
                    }
                }
            }
        }
        None
    }

    /// The span stack of `key`, outermost first (for tests and diagnostics; takes the lock).
    pub fn stack(&self, key: ExecutionKey) -> Vec<ActiveSpan> {
        self.shard(hash_key(key))
            .get(&key)
            .map(|s| s.stack.to_vec())
            .unwrap_or_default()
    }

    /// Counters; `active_keys` takes each shard's lock briefly.
    ///
    /// Entries kept for keys whose stack emptied are not active keys.
    pub fn stats(&self) -> RegistryStats {
        RegistryStats {
            active_keys: self
                .shards
                .iter()
                .map(|s| {
                    s.lock()
                        .map(|m| m.values().filter(|k| k.stack.len > 0).count())
                        .unwrap_or(0)
                })
                .sum(),
            ..self.loss_counters()
        }
    }

    /// The counters of what the registry lost (`active_keys` left at 0): three atomic loads,
    /// no lock, so the sampler can read them at every window close.
    pub fn loss_counters(&self) -> RegistryStats {
        RegistryStats {
            active_keys: 0,
            full: self.full.load(Ordering::Relaxed),
            unmatched_exits: self.unmatched.load(Ordering::Relaxed),
            contended_reads: self.contended.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn span(id: u64) -> ActiveSpan {
        ActiveSpan {
            ctx: SpanContext {
                trace_id: TraceId::from_u128(0xabc).unwrap(),
                span_id: SpanId::from_u64(id).unwrap(),
                local_root_span_id: SpanId::from_u64(1).unwrap(),
            },
            route: LabelId(5),
        }
    }
    fn sid(id: u64) -> SpanId {
        SpanId::from_u64(id).unwrap()
    }

    #[test]
    fn out_of_order_exit_keeps_the_innermost_remaining_span() {
        let r = ActiveSpanRegistry::default();
        let k = ExecutionKey::thread(1);
        r.enter(k, span(1));
        r.enter(k, span(2));
        r.enter(k, span(3));
        r.exit(k, sid(2));
        assert_eq!(r.current(k), Some(span(3)));
        r.exit(k, sid(3));
        assert_eq!(r.current(k), Some(span(1)));
    }

    #[test]
    fn deep_nesting_spills_and_unwinds_in_any_order() {
        let r = ActiveSpanRegistry::default();
        let k = ExecutionKey::thread(1);
        for i in 1..=20 {
            r.enter(k, span(i));
        }
        for i in [3, 15, 9, 20, 1] {
            r.exit(k, sid(i));
        }
        let ids: Vec<u64> = r.stack(k).iter().map(|a| a.ctx.span_id.to_u64()).collect();
        assert_eq!(ids, [2, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 16, 17, 18, 19]);
        assert_eq!(r.current(k), Some(span(19)));
        for i in ids.into_iter().rev() {
            r.exit(k, sid(i));
        }
        assert_eq!(r.current(k), None);
        assert_eq!(r.stats().active_keys, 0);
    }

    #[test]
    fn exit_from_another_thread_is_honoured() {
        let r = Arc::new(ActiveSpanRegistry::default());
        let k = ExecutionKey::thread(9);
        r.enter(k, span(4));
        let r2 = r.clone();
        std::thread::spawn(move || r2.exit(k, sid(4)))
            .join()
            .unwrap();
        assert_eq!(r.current(k), None);
    }

    #[test]
    fn keys_are_isolated_and_tasks_differ_from_their_thread() {
        let r = ActiveSpanRegistry::default();
        r.enter(ExecutionKey::thread(1), span(10));
        r.enter(ExecutionKey::task(1, 77), span(11));
        assert_eq!(r.current(ExecutionKey::thread(1)), Some(span(10)));
        assert_eq!(r.current(ExecutionKey::task(1, 77)), Some(span(11)));
        assert_eq!(r.current(ExecutionKey::thread(2)), None);
    }

    #[test]
    fn a_thread_id_equal_to_the_empty_marker_is_found_past_a_freed_slot() {
        // Thread id u64::MAX is also the empty-slot marker: a freed slot ahead of the key's
        // own slot in its probe sequence must not end the lookup.
        let r = ActiveSpanRegistry::with_capacity(64);
        let max = ExecutionKey::thread(u64::MAX);
        let home = hash_key(max) as usize & r.mask;
        let other = (0..u64::MAX)
            .map(ExecutionKey::thread)
            .find(|&k| hash_key(k) as usize & r.mask == home)
            .unwrap();
        r.enter(other, span(1));
        r.enter(max, span(2));
        r.exit(other, sid(1));
        assert_eq!(r.current(max), Some(span(2)));
    }

    #[test]
    fn unknown_exits_are_counted() {
        let r = ActiveSpanRegistry::default();
        r.exit(ExecutionKey::thread(1), sid(1));
        r.enter(ExecutionKey::thread(1), span(2));
        r.exit(ExecutionKey::thread(1), sid(3));
        assert_eq!(r.stats().unmatched_exits, 2);
        assert_eq!(r.current(ExecutionKey::thread(1)), Some(span(2)));
    }

    #[test]
    fn churn_of_keys_does_not_grow_memory() {
        let r = ActiveSpanRegistry::with_capacity(64);
        for t in 0..100_000u64 {
            let k = ExecutionKey::thread(t);
            r.enter(k, span(t + 1));
            r.exit(k, sid(t + 1));
        }
        let s = r.stats();
        assert_eq!(s.active_keys, 0);
        assert_eq!(s.full, 0);
        assert!(r.slots.iter().all(|s| s.owner.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_full_table_is_counted_and_the_keys_stack_still_works() {
        let r = ActiveSpanRegistry::with_capacity(64);
        for t in 0..1000u64 {
            r.enter(ExecutionKey::thread(t), span(t + 1));
        }
        assert!(r.stats().full > 0);
        assert_eq!(r.stats().active_keys, 1000);
        for t in 0..1000u64 {
            r.forget(ExecutionKey::thread(t));
        }
        assert_eq!(r.stats().active_keys, 0);
    }

    #[test]
    fn concurrent_readers_never_see_a_torn_value() {
        let r = Arc::new(ActiveSpanRegistry::default());
        let k = ExecutionKey::thread(3);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    // trace id, span id and local root always agree: all derived from i.
                    let a = ActiveSpan {
                        ctx: SpanContext {
                            trace_id: TraceId::from_u128(u128::from(i) << 64 | u128::from(i))
                                .unwrap(),
                            span_id: sid(i),
                            local_root_span_id: sid(i),
                        },
                        route: LabelId(i as u32),
                    };
                    r.enter(k, a);
                    r.exit(k, sid(i));
                    i += 1;
                }
            })
        };
        let mut seen = 0;
        for _ in 0..200_000 {
            if let Some(a) = r.current(k) {
                let i = a.ctx.span_id.to_u64();
                assert_eq!(a.ctx.local_root_span_id.to_u64(), i);
                assert_eq!(
                    a.ctx.trace_id.to_u128(),
                    u128::from(i) << 64 | u128::from(i)
                );
                assert_eq!(u64::from(a.route.0), i & 0xffff_ffff);
                seen += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        let _ = seen;
    }
}
