//! Per-thread side data: names (filled by the Python side), native thread ids, and the stacks
//! of the previous walks.

use crate::walker::context::Resolution;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::hash::BuildHasherDefault;

use span_profile_core::RawFrame;

use super::code::AddrHasher;
use super::memory::{MemoryReader, ReadError};
use super::namebuf::{NameBuf, MAX_THREAD_NAME};

/// Most threads the registry remembers; later registrations are ignored until some are
/// forgotten.
pub(crate) const MAX_REGISTERED_THREADS: usize = 4096;

#[derive(Debug, Default)]
struct ThreadInfo {
    name: Option<Box<str>>,
    native_id: u32,
}

/// Thread names and native ids, shared between the Python side (which registers threads as they
/// start and forgets them as they end) and the walker (which only `try_lock`s it: a contended
/// lookup falls back to the default name and is counted, it never blocks the sampler).
#[derive(Debug, Clone, Default)]
pub struct ThreadRegistry {
    inner: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// By thread ident (a `pthread_t`, an address): hashed as the code cache hashes addresses.
    map: Mutex<HashMap<u64, ThreadInfo, BuildHasherDefault<AddrHasher>>>,
    /// Lookups that found the map busy and gave the default name.
    busy: AtomicU64,
    /// Bumped after every change to `map`: a walker that finds it where it was at its last
    /// tick knows every name it looked up since is still current ([`ThreadRegistry::generation`]).
    generation: AtomicU64,
}

impl ThreadRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn with_entry(&self, thread_id: u64, f: impl FnOnce(&mut ThreadInfo)) {
        let mut map = match self.inner.map.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        if map.len() >= MAX_REGISTERED_THREADS && !map.contains_key(&thread_id) {
            return;
        }
        f(map.entry(thread_id).or_default());
        // Release, after the change: a walker that sees the new count sees the change.
        self.inner.generation.fetch_add(1, Ordering::Release);
    }

    /// How many changes the registry has had. Read by the walker once a tick: while it stays
    /// the same, no thread was named, renamed, registered or forgotten, so a sample's name
    /// looked up at an earlier tick still holds (ADR 0035).
    pub(crate) fn generation(&self) -> u64 {
        // Acquire: pairs with the Release bump after each change.
        self.inner.generation.load(Ordering::Acquire)
    }

    /// Names the thread whose `threading.get_ident()` is `thread_id`.
    pub fn set_thread_name(&self, thread_id: u64, name: &str) {
        let mut end = name.len().min(MAX_THREAD_NAME);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let name: Box<str> = name.get(..end).unwrap_or_default().into();
        self.with_entry(thread_id, |e| e.name = Some(name));
    }

    /// Records the OS thread id (`threading.get_native_id()`) of `thread_id`; used for CPU time
    /// on 3.9/3.10, whose thread states do not carry it.
    pub fn set_native_id(&self, thread_id: u64, native_id: u32) {
        self.with_entry(thread_id, |e| e.native_id = native_id);
    }

    /// Forgets a thread that ended.
    pub fn forget(&self, thread_id: u64) {
        let mut map = match self.inner.map.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.remove(&thread_id);
        self.inner.generation.fetch_add(1, Ordering::Release);
    }

    /// Copies the thread's name into `buf` (or the default `Thread-<id>`) and returns its
    /// registered native id (0 if unknown). Never blocks and never allocates.
    pub(crate) fn lookup(&self, thread_id: u64, buf: &mut NameBuf) -> u32 {
        buf.clear();
        // A writer (a thread starting, naming itself or ending) holds the map for one update,
        // so a few attempts nearly always get it; the sampler never waits on a writer that
        // was preempted holding it, and then labels the sample with the default name.
        let map = (0..LOOKUP_ATTEMPTS).find_map(|_| match self.inner.map.try_lock() {
            Ok(m) => Some(m),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::hint::spin_loop();
                None
            }
        });
        if let Some(map) = map {
            if let Some(info) = map.get(&thread_id) {
                if let Some(name) = &info.name {
                    buf.push_str(name);
                    return info.native_id;
                }
                let native = info.native_id;
                drop(map);
                let _ = write!(buf, "Thread-{thread_id}");
                return native;
            }
        } else {
            // Relaxed: a statistic, ordering nothing.
            self.inner.busy.fetch_add(1, Ordering::Relaxed);
        }
        let _ = write!(buf, "Thread-{thread_id}");
        0
    }

    /// Lookups that gave the default name because a writer held the name map through every
    /// attempt (`stats()["walker_thread_names_busy"]`): samples whose thread may have had a
    /// name of its own.
    pub fn busy_lookups(&self) -> u64 {
        self.inner.busy.load(Ordering::Relaxed)
    }
}

/// Attempts at the name map before a lookup gives up on it (see [`ThreadRegistry::lookup`]).
/// With one attempt, a pool thread starting while the others were sampled got samples
/// labelled `Thread-<id>` (test_thread_pool.py failed so on CPython 3.9 in CI).
const LOOKUP_ATTEMPTS: usize = 64;

/// Offset of `tid` inside glibc's `struct pthread` on x86_64 (`pthread_t` is its address).
/// Used only after [`verify_pthread_tid_offset`] confirmed it on the calling thread, and only
/// through the memory reader, so a wrong guess yields a wrong tid, never a fault.
const GLIBC_PTHREAD_TID_OFFSET: u64 = 0x2d0;

/// Most threads of the profiler's own that [`mark_own_thread`] holds at once.
pub const MAX_OWN_THREADS: usize = 4;

/// Threads of the profiler itself that run Python code (the Python side's log pump), by their
/// [`current_thread_id`]; 0 is a free slot. The walker leaves them out of every tick, so that no
/// sample shows the profiler's own thread. Atomics, so that the walker reads them without a
/// lock or an allocation.
static OWN_THREADS: [AtomicU64; MAX_OWN_THREADS] = [const { AtomicU64::new(0) }; MAX_OWN_THREADS];

/// Marks the calling thread as the profiler's own: the walker no longer samples it. Returns
/// false when [`MAX_OWN_THREADS`] are marked already (the thread is then sampled as any other).
pub fn mark_own_thread() -> bool {
    let id = current_thread_id();
    if is_own_thread(id) {
        return true;
    }
    OWN_THREADS.iter().any(|slot| {
        slot.compare_exchange(0, id, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

/// Unmarks the calling thread (it is about to end: its id may be reused by another thread).
pub fn unmark_own_thread() {
    let id = current_thread_id();
    for slot in &OWN_THREADS {
        let _ = slot.compare_exchange(id, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Forgets every mark: in a forked child the marked threads are gone, and their ids may come
/// back as the child's new threads.
pub fn clear_own_threads() {
    for slot in &OWN_THREADS {
        slot.store(0, Ordering::Release);
    }
}

/// Whether `thread_id` (a `tstate->thread_id`) is a thread of the profiler's own.
#[inline]
pub(crate) fn is_own_thread(thread_id: u64) -> bool {
    thread_id != 0
        && OWN_THREADS
            .iter()
            .any(|slot| slot.load(Ordering::Acquire) == thread_id)
}

/// The calling thread's id as CPython keeps it: `threading.get_ident()` and
/// `tstate->thread_id` are its `pthread_self()`.
pub fn current_thread_id() -> u64 {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as u64 }
}

/// Checks that this process's `pthread_self()` has its tid at the expected offset.
pub(crate) fn verify_pthread_tid_offset(reader: &dyn MemoryReader) -> bool {
    // SAFETY: (1) pthread_self and gettid have no preconditions and cannot fail.
    let (me, tid) = unsafe { (libc::pthread_self() as u64, libc::gettid()) };
    let mut b = [0u8; 4];
    if me == 0
        || reader
            .read(me.wrapping_add(GLIBC_PTHREAD_TID_OFFSET), &mut b)
            .is_err()
    {
        return false;
    }
    i32::from_le_bytes(b) == tid
}

/// The OS tid of the thread whose `pthread_t` is `pthread`, read through `reader`.
pub(crate) fn tid_from_pthread(reader: &dyn MemoryReader, pthread: u64) -> Result<u32, ReadError> {
    let mut b = [0u8; 4];
    reader.read(pthread.wrapping_add(GLIBC_PTHREAD_TID_OFFSET), &mut b)?;
    match i32::from_le_bytes(b) {
        t if t > 0 => Ok(t as u32),
        _ => Err(ReadError::Invalid),
    }
}

/// One thread's last walked stack, kept so a thread that has not run since can be reported
/// again without reading its frames.
///
/// What [`StackCache::unchanged`] reads, a waiting thread's every tick, comes first and fits
/// one cache line, which each entry starts on; the stack seen running, the prefetch addresses
/// and the contexts behind it are read only when a sample is built.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct CachedStack {
    /// The thread-state address and OS tid it was captured under (a new thread reusing the
    /// `pthread_t` has a new tid, so it never matches a stale entry).
    pub(crate) tstate: u64,
    /// The thread's CPU clock read before its frames were copied.
    pub(crate) cpu_ns: u64,
    /// The tick this entry was last used in (for eviction).
    pub(crate) last_used: u64,
    pub(crate) frames: Vec<RawFrame>,
    pub(crate) tid: u32,
    pub(crate) truncated: bool,
    /// `resolution` is `Some`, and had a task tag: copies kept with the fields above, so that a
    /// stack reported again reads one line ([`CachedStack::set_resolution`] writes all three).
    reusable: bool,
    has_task: bool,
    pub(crate) thread_id: u64,
    /// What the thread's context held when these frames were copied (`None`: it changed
    /// during the copy, and the copy is not reported again). Valid as long as the stack is: a
    /// thread that has not run has not entered another context or set a variable either.
    resolution: Option<Resolution>,
    /// The context of the thread's last walk whose context was read whole: `resolution`, or
    /// the one before when that copy's context changed while it was made.
    pub(crate) last_resolution: Option<Resolution>,
    /// Frames of the last walk that were read one by one (outside the copied data stack):
    /// prefetched together in one read on the next walk.
    pub(crate) outside: [u64; MAX_OUTSIDE],
    pub(crate) n_outside: usize,
    /// The stack of the last walk that found the thread running (its CPU clock moved while
    /// its frames were copied), with its truncation and context: where the CPU of a later
    /// sample that finds the thread off CPU is charged (ADR 0019), and its context: valid if
    /// `running_resolution` is `Some`.
    pub(crate) running: Vec<RawFrame>,
    pub(crate) running_truncated: bool,
    pub(crate) running_resolution: Option<Resolution>,
}

impl CachedStack {
    /// Sets `resolution` and the copies kept beside the stack.
    fn set_resolution(&mut self, r: Option<Resolution>) {
        self.resolution = r;
        self.reusable = r.is_some();
        self.has_task = r.is_some_and(|r| r.has_task());
    }
}

/// A thread's stack that [`StackCache::unchanged`] found still current: what a sample counted
/// again needs, with the context read only for a sample built again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unchanged<'a> {
    pub(crate) frames: &'a [RawFrame],
    pub(crate) truncated: bool,
    /// Its context had a task tag (a task's name is kept apart, so such a sample is built).
    pub(crate) has_task: bool,
    entry: &'a CachedStack,
}

impl Unchanged<'_> {
    /// What the thread's context held when the stack was copied.
    pub(crate) fn resolution(&self) -> Option<Resolution> {
        self.entry.resolution
    }
}

/// One walk's copy of a thread's stack, as [`StackCache::store`] keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WalkedStack<'a> {
    pub(crate) frames: &'a [RawFrame],
    pub(crate) truncated: bool,
    /// The addresses of the frames read one by one (outside the copied data stack).
    pub(crate) outside: &'a [u64],
    /// The thread's CPU clock moved while the frames were copied.
    pub(crate) running: bool,
    /// What its context held, or `None` if that changed during the copy.
    pub(crate) resolution: Option<Resolution>,
}

/// Most out-of-data-stack frame addresses remembered per thread for prefetching.
pub(crate) const MAX_OUTSIDE: usize = 16;

/// Per-thread stacks of the previous walks in fixed buffers: `cap` entries of `depth` frames,
/// each created once on a thread's first walk and reused by later threads when evicted, so the
/// steady state allocates nothing.
#[derive(Debug)]
pub(crate) struct StackCache {
    entries: Vec<CachedStack>,
    by_thread: HashMap<u64, usize, BuildHasherDefault<AddrHasher>>,
    cap: usize,
    depth: usize,
}

impl StackCache {
    pub(crate) fn new(cap: usize, depth: usize) -> Self {
        Self {
            entries: Vec::with_capacity(cap),
            by_thread: HashMap::with_capacity_and_hasher(cap, Default::default()),
            cap,
            depth,
        }
    }

    /// The cached stack of `thread_id` if it was captured under the same thread state and tid
    /// at exactly `cpu_ns` of CPU time, i.e. the thread has not run since.
    pub(crate) fn unchanged(
        &mut self,
        thread_id: u64,
        tstate: u64,
        tid: u32,
        cpu_ns: u64,
        tick: u64,
    ) -> Option<Unchanged<'_>> {
        let &i = self.by_thread.get(&thread_id)?;
        let e = self.entries.get_mut(i)?;
        if e.tstate != tstate || e.tid != tid || e.cpu_ns != cpu_ns || tid == 0 || !e.reusable {
            return None;
        }
        e.last_used = tick;
        let e = &*e;
        Some(Unchanged {
            frames: e.frames.as_slice(),
            truncated: e.truncated,
            has_task: e.has_task,
            entry: e,
        })
    }

    /// The out-of-data-stack frame addresses of `thread_id`'s last walk (copied into `out`;
    /// returns how many).
    pub(crate) fn outside(
        &self,
        thread_id: u64,
        tstate: u64,
        out: &mut [u64; MAX_OUTSIDE],
    ) -> usize {
        let Some(e) = self
            .by_thread
            .get(&thread_id)
            .and_then(|&i| self.entries.get(i))
        else {
            return 0;
        };
        if e.tstate != tstate {
            return 0;
        }
        let n = e.n_outside.min(MAX_OUTSIDE);
        out[..n].copy_from_slice(&e.outside[..n]);
        n
    }

    /// Stores the stack `copy` of `thread_id` (and the addresses of its frames that were read
    /// one by one), and as its last stack seen running if it was, evicting the least recently
    /// used entry when full. A copy whose context changed while it was made (no resolution)
    /// is neither reported again nor charged: only its addresses are kept, for prefetching.
    pub(crate) fn store(&mut self, key: (u64, u64, u32, u64), copy: WalkedStack<'_>, tick: u64) {
        let (thread_id, tstate, tid, cpu_ns) = key;
        let WalkedStack {
            frames,
            truncated,
            outside,
            running,
            resolution,
        } = copy;
        let i = match self.by_thread.get(&thread_id) {
            Some(&i) => i,
            None if self.entries.len() < self.cap => {
                self.entries.push(CachedStack {
                    thread_id,
                    tstate,
                    tid,
                    cpu_ns,
                    frames: Vec::with_capacity(self.depth),
                    truncated,
                    outside: [0; MAX_OUTSIDE],
                    n_outside: 0,
                    last_used: tick,
                    reusable: false,
                    has_task: false,
                    resolution: None,
                    last_resolution: None,
                    running: Vec::with_capacity(self.depth),
                    running_truncated: false,
                    running_resolution: None,
                });
                let i = self.entries.len() - 1;
                self.by_thread.insert(thread_id, i);
                i
            }
            None => {
                let Some((i, old)) = self
                    .entries
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(i, e)| (i, e.thread_id))
                else {
                    return;
                };
                self.by_thread.remove(&old);
                self.by_thread.insert(thread_id, i);
                i
            }
        };
        if let Some(e) = self.entries.get_mut(i) {
            if (e.thread_id, e.tstate, e.tid) != (thread_id, tstate, tid) {
                // Another thread (or a new one under the same id): its running stack is not ours.
                e.running_resolution = None;
                e.last_resolution = None;
            }
            e.thread_id = thread_id;
            e.tstate = tstate;
            e.tid = tid;
            e.cpu_ns = cpu_ns;
            e.truncated = truncated;
            e.last_used = tick;
            e.frames.clear();
            let n = frames.len().min(self.depth);
            e.frames
                .extend_from_slice(frames.get(..n).unwrap_or_default());
            let k = outside.len().min(MAX_OUTSIDE);
            e.outside[..k].copy_from_slice(&outside[..k]);
            e.n_outside = k;
            e.set_resolution(resolution);
            if resolution.is_some() {
                e.last_resolution = resolution;
            }
            if let (true, Some(r)) = (running, resolution) {
                e.running.clear();
                e.running
                    .extend_from_slice(frames.get(..n).unwrap_or_default());
                e.running_truncated = truncated;
                e.running_resolution = Some(r);
            }
        }
    }

    /// The last stack `thread_id` (under `tstate` and `tid`) was seen running in, if any: its
    /// frames, truncation and context; asked before this walk's copy is stored.
    ///
    /// Only while its context is still the one the thread's last walk found (ADR 0019): the
    /// CPU a sample that finds the thread off CPU carries was used since that walk, so a stack
    /// seen running under another span than the one current then is not where it went. Such a
    /// stack can be seconds old: a thread that shares a core with the sampler is never seen
    /// running (the sampler preempts it), and its CPU would keep going to the stack it was
    /// seen running in before its span began.
    pub(crate) fn last_running(
        &self,
        thread_id: u64,
        tstate: u64,
        tid: u32,
    ) -> Option<(&[RawFrame], bool, Resolution)> {
        let e = self
            .by_thread
            .get(&thread_id)
            .and_then(|&i| self.entries.get(i))?;
        let r = e.running_resolution?;
        (e.tstate == tstate
            && e.tid == tid
            && !e.running.is_empty()
            && e.last_resolution == Some(r))
        .then_some((e.running.as_slice(), e.running_truncated, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walker::memory::ProcessVmReader;

    #[test]
    fn registry_names_and_defaults() {
        let r = ThreadRegistry::new();
        let mut buf = NameBuf::new();
        assert_eq!(r.lookup(7, &mut buf), 0);
        assert_eq!(buf.as_str(), "Thread-7");
        r.set_thread_name(7, "worker");
        r.set_native_id(7, 1234);
        assert_eq!(r.lookup(7, &mut buf), 1234);
        assert_eq!(buf.as_str(), "worker");
        r.set_thread_name(8, &"é".repeat(100));
        r.lookup(8, &mut buf);
        assert_eq!(buf.as_str().chars().count(), MAX_THREAD_NAME / 2);
        r.forget(7);
        r.lookup(7, &mut buf);
        assert_eq!(buf.as_str(), "Thread-7");
    }

    #[test]
    fn a_busy_name_map_gives_the_default_name_and_is_counted() {
        let r = ThreadRegistry::new();
        r.set_thread_name(7, "worker");
        let mut buf = NameBuf::new();
        {
            // A writer that holds the map through every attempt (preempted mid-update).
            let _writer = r.inner.map.lock().unwrap();
            assert_eq!(r.lookup(7, &mut buf), 0);
            assert_eq!(buf.as_str(), "Thread-7");
        }
        assert_eq!(r.busy_lookups(), 1);
        r.lookup(7, &mut buf);
        assert_eq!(buf.as_str(), "worker");
        // Unknown threads get the default name without counting as busy.
        r.lookup(8, &mut buf);
        assert_eq!(r.busy_lookups(), 1);
    }

    fn copy<'a>(frames: &'a [RawFrame], outside: &'a [u64], running: bool) -> WalkedStack<'a> {
        WalkedStack {
            frames,
            truncated: false,
            outside,
            running,
            resolution: Some(Resolution::unknown_with_task(None)),
        }
    }

    #[test]
    fn what_a_stack_reported_again_reads_is_one_cache_line() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<CachedStack>(), 64);
        let hot = [
            (offset_of!(CachedStack, tstate), size_of::<u64>()),
            (offset_of!(CachedStack, cpu_ns), size_of::<u64>()),
            (offset_of!(CachedStack, last_used), size_of::<u64>()),
            (offset_of!(CachedStack, frames), size_of::<Vec<RawFrame>>()),
            (offset_of!(CachedStack, tid), size_of::<u32>()),
            (offset_of!(CachedStack, truncated), 1),
            (offset_of!(CachedStack, reusable), 1),
            (offset_of!(CachedStack, has_task), 1),
        ];
        for (at, len) in hot {
            assert!(at + len <= 64, "a field at {at} ends past the first line");
        }
    }

    #[test]
    fn a_stack_reported_again_carries_its_context_and_whether_it_had_a_task() {
        let f = |id| RawFrame { id, line: 1 };
        let mut c = StackCache::new(2, 4);
        let task = Resolution::unknown_with_task(Some(7));
        let (one, three) = ([f(1)], [f(3)]);
        let with_task = WalkedStack {
            resolution: Some(task),
            ..copy(&one, &[], false)
        };
        c.store((1, 10, 100, 5), with_task, 0);
        let u = c.unchanged(1, 10, 100, 5, 1).unwrap();
        assert_eq!((u.has_task, u.resolution()), (true, Some(task)));
        c.store((1, 10, 100, 6), copy(&[f(2)], &[], false), 2);
        let u = c.unchanged(1, 10, 100, 6, 3).unwrap();
        let none = Resolution::unknown_with_task(None);
        assert_eq!((u.has_task, u.resolution()), (false, Some(none)));
        // A copy whose context changed while it was made is not reported again.
        let switched = WalkedStack {
            resolution: None,
            ..copy(&three, &[], false)
        };
        c.store((1, 10, 100, 7), switched, 4);
        assert!(c.unchanged(1, 10, 100, 7, 5).is_none());
    }

    #[test]
    fn stack_cache_reuses_only_unchanged_threads() {
        let f = |id| RawFrame { id, line: 1 };
        let mut c = StackCache::new(2, 4);
        assert!(c.unchanged(1, 10, 100, 5, 0).is_none());
        c.store((1, 10, 100, 5), copy(&[f(1), f(2)], &[7, 8], true), 0);
        assert_eq!(
            c.unchanged(1, 10, 100, 5, 1).map(|u| u.frames.len()),
            Some(2)
        );
        assert!(c.unchanged(1, 10, 100, 6, 1).is_none()); // ran since
        assert!(c.unchanged(1, 11, 100, 5, 1).is_none()); // other thread state
        assert!(c.unchanged(1, 10, 101, 5, 1).is_none()); // other OS thread
        c.store((2, 20, 200, 1), copy(&[f(3)], &[], true), 2);
        let mut out = [0u64; MAX_OUTSIDE];
        assert_eq!(c.outside(1, 10, &mut out), 2);
        assert_eq!(&out[..2], &[7, 8]);
        assert_eq!(c.outside(1, 11, &mut out), 0);
        let deep = [f(4); 9];
        let truncated = WalkedStack {
            truncated: true,
            ..copy(&deep, &[], true)
        };
        c.store((3, 30, 300, 1), truncated, 3); // evicts 1 (least recently used)
        assert!(c.unchanged(1, 10, 100, 5, 4).is_none());
        let u = c.unchanged(3, 30, 300, 1, 4).unwrap();
        assert_eq!((u.frames.len(), u.truncated), (4, true));
        assert!(c.unchanged(2, 20, 200, 1, 4).is_some());
    }

    #[test]
    fn the_last_running_stack_outlives_walks_that_find_the_thread_off_cpu() {
        let f = |id| RawFrame { id, line: 1 };
        let mut c = StackCache::new(2, 4);
        assert!(c.last_running(1, 10, 100).is_none());
        // Seen running in [1, 2], then asleep in [3]: the running stack stays [1, 2].
        c.store((1, 10, 100, 5), copy(&[f(1), f(2)], &[], true), 0);
        c.store((1, 10, 100, 6), copy(&[f(3)], &[], false), 1);
        assert_eq!(
            c.unchanged(1, 10, 100, 6, 2).map(|u| u.frames[0]),
            Some(f(3))
        );
        let (frames, truncated, _) = c.last_running(1, 10, 100).unwrap();
        assert_eq!((frames, truncated), (&[f(1), f(2)][..], false));
        // Not another thread's, nor a new OS thread's under the same id.
        assert!(c.last_running(1, 10, 101).is_none());
        c.store((1, 10, 101, 1), copy(&[f(4)], &[], false), 3);
        assert!(c.last_running(1, 10, 101).is_none());
    }

    #[test]
    fn a_running_stack_from_before_the_last_walks_span_is_not_charged() {
        let frames = [RawFrame { id: 1, line: 1 }];
        let span = |task| WalkedStack {
            resolution: Some(Resolution::unknown_with_task(Some(task))),
            ..copy(&frames, &[], false)
        };
        let mut c = StackCache::new(2, 4);
        // Seen running under context 1 (before its span), then walked off CPU under context 2
        // (a span began): the CPU of the next off-CPU sample was used under 2, not where it
        // was seen running under 1.
        c.store(
            (1, 10, 100, 5),
            WalkedStack {
                running: true,
                ..span(1)
            },
            0,
        );
        assert!(c.last_running(1, 10, 100).is_some());
        c.store((1, 10, 100, 6), span(2), 1);
        assert!(c.last_running(1, 10, 100).is_none());
        // Back under context 1 (the span ended): the stack seen running under it holds again.
        c.store((1, 10, 100, 7), span(1), 2);
        assert!(c.last_running(1, 10, 100).is_some());
        // Seen running under 2: that stack now.
        c.store(
            (1, 10, 100, 8),
            WalkedStack {
                running: true,
                ..span(2)
            },
            3,
        );
        let (_, _, r) = c.last_running(1, 10, 100).unwrap();
        assert_eq!(r, Resolution::unknown_with_task(Some(2)));
    }

    #[test]
    fn a_copy_whose_context_changed_is_neither_reused_nor_charged() {
        let f = |id| RawFrame { id, line: 1 };
        let mut c = StackCache::new(2, 4);
        let task = Resolution::unknown_with_task(Some(7));
        c.store(
            (1, 10, 100, 5),
            WalkedStack {
                resolution: Some(task),
                ..copy(&[f(1), f(2)], &[], true)
            },
            0,
        );
        // Running again, but a task switched during the copy: the copy may mix two tasks'
        // frames, so the CPU of a later off-CPU sample still goes to [1, 2], in task 7.
        let mixed = [f(3), f(2)];
        let torn = WalkedStack {
            resolution: None,
            ..copy(&mixed, &[9], true)
        };
        c.store((1, 10, 100, 6), torn, 1);
        assert!(c.unchanged(1, 10, 100, 6, 2).is_none());
        let (frames, _, r) = c.last_running(1, 10, 100).unwrap();
        assert_eq!((frames, r), (&[f(1), f(2)][..], task));
        // Its addresses still serve prefetching.
        let mut out = [0u64; MAX_OUTSIDE];
        assert_eq!(c.outside(1, 10, &mut out), 1);
    }

    #[test]
    fn own_thread_clock_and_pthread_tid() {
        use crate::walker::cpu::{cpu_time_ns, CpuTimeSource};
        let reader = ProcessVmReader::new().unwrap();
        assert!(verify_pthread_tid_offset(&reader));
        // SAFETY: (1) pthread_self and gettid have no preconditions.
        let (me, tid) = unsafe { (libc::pthread_self() as u64, libc::gettid()) };
        assert_eq!(tid_from_pthread(&reader, me).unwrap(), tid as u32);
        let a = cpu_time_ns(CpuTimeSource::ThreadClock, tid as u32).unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = cpu_time_ns(CpuTimeSource::ThreadClock, tid as u32).unwrap();
        assert!(b > a);
        let p = cpu_time_ns(
            CpuTimeSource::ProcFs {
                pid: std::process::id(),
            },
            tid as u32,
        );
        assert!(p.is_some());
        assert_eq!(cpu_time_ns(CpuTimeSource::ThreadClock, 0x3fff_fff0), None);
    }
}
