//! Knowing that a thread has not run, without asking the kernel each tick (ADR 0033).
//!
//! The walker charges each sample the CPU time its thread used since its previous sample, read
//! from the thread's CPU clock (ADR 0019). For another thread's clock that read is a system
//! call (0.5–1.9 µs on the VMs we measure on), and for a thread that waits it is the largest
//! single cost of its sample: the walker reuses the thread's last stack, so the clock read is
//! most of what is left.
//!
//! [`SchedWatch`] replaces that read, for a thread that has waited a while, with one load from
//! memory. It opens a `perf_event_open` software task-clock event on the thread and maps the
//! event's metadata page. The kernel rewrites that page (and so bumps its sequence count,
//! `lock`) every time it schedules the thread in, before the thread runs. So:
//!
//! - a real clock read that finds the clock where the previous one left it proves that the
//!   thread was off CPU between the two reads, in particular when the page's sequence was
//!   read just before the second one;
//! - while the sequence still holds that value, the thread has not been scheduled in since,
//!   so it has not run and its clock still holds that reading: the walker reuses it.
//!
//! Anything else takes a real read: a moved sequence, a thread not proven off CPU, a thread
//! with no page, and every [`VALIDATE_EVERY`]th sample regardless (so a page that stopped
//! moving for a reason we do not foresee costs at most that many samples of CPU attribution,
//! never CPU: the clock is cumulative, and the next real read charges everything).
//!
//! Pages cost the watched thread some time at each of its context switches (about 0.6–0.9 µs
//! a switch on the VM we measured), so only a thread that keeps waiting gets one: a page is
//! opened after [`OPEN_AFTER`] consecutive reads found the thread off CPU, and closed again
//! after [`CLOSE_AFTER`] consecutive samples found it scheduled in. At most [`MAX_PAGES`] are
//! open (one file descriptor each). Where the kernel refuses (`perf_event_paranoid` of 3 and
//! up, a seccomp filter, no perf support) the walker reads clocks as before.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{fence, AtomicI32, Ordering};
use std::sync::Once;

use super::code::AddrHasher;
use super::memory::prefetch;

/// A page is opened for a thread after this many consecutive real reads found it off CPU.
pub(crate) const OPEN_AFTER: u32 = 8;
/// A page is closed after its thread was scheduled in between this many consecutive samples.
pub(crate) const CLOSE_AFTER: u32 = 8;
/// At most one real read is saved this many times in a row for a thread.
pub(crate) const VALIDATE_EVERY: u32 = 32;
/// Most pages (file descriptors) open at once.
pub(crate) const MAX_PAGES: usize = 128;
/// A page whose thread no tick has sampled for this many ticks is closed (the thread has most
/// likely exited: its event would hold the dead task and a descriptor).
pub(crate) const FORGET_AFTER: u64 = 1024;
/// How often (in ticks) pages are checked for [`FORGET_AFTER`].
const SWEEP_EVERY: u64 = 64;
/// After this many refusals of `perf_event_open` the watch stops trying.
const MAX_FAILURES: u32 = 3;

/// The offset of `lock`, the sequence count, in `struct perf_event_mmap_page`
/// (include/uapi/linux/perf_event.h: `__u32 version; __u32 compat_version; __u32 lock;`).
const PAGE_LOCK_OFFSET: usize = 8;

/// `struct perf_event_attr` as of `PERF_ATTR_SIZE_VER0` (64 bytes; include/uapi/linux/
/// perf_event.h), the first version every kernel with perf accepts. `flags` holds the bit
/// fields that start with `disabled`.
#[repr(C)]
#[derive(Debug, Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
/// `exclude_kernel`, `exclude_hv`: bits 5 and 6 of the flags.
const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 64);

/// The descriptors of every open page in the process, so that a forked child closes them: the
/// child's copy of the walker is abandoned, never dropped (the parent's threads are not in the
/// child), and an inherited descriptor would keep the parent's event, and its cost at each of
/// the parent thread's context switches, alive for as long as the child lives.
static OPEN_FDS: [AtomicI32; 2 * MAX_PAGES] = [const { AtomicI32::new(-1) }; 2 * MAX_PAGES];
static AT_FORK: Once = Once::new();

/// `pthread_atfork`'s child handler: closes the inherited page descriptors.
extern "C" fn close_pages_in_child() {
    for slot in &OPEN_FDS {
        let fd = slot.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: `fd` was a page's descriptor when the process forked (registered by
            // `Page::open`, unregistered before its close); `close` is async-signal-safe.
            unsafe { libc::close(fd) };
        }
    }
}

/// Records `fd` in [`OPEN_FDS`]; false if the table is full.
fn register_fd(fd: i32) -> bool {
    AT_FORK.call_once(|| {
        // SAFETY: registers a handler that only closes descriptors; no preconditions.
        unsafe { libc::pthread_atfork(None, None, Some(close_pages_in_child)) };
    });
    OPEN_FDS.iter().any(|slot| {
        slot.compare_exchange(-1, fd, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    })
}

/// Removes `fd` from [`OPEN_FDS`].
fn unregister_fd(fd: i32) {
    for slot in &OPEN_FDS {
        if slot
            .compare_exchange(fd, -1, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// A task-clock event on one thread and its mapped metadata page (one page long: [`page_len`]).
/// Sixteen bytes, and an `Option<Page>` too, so that a slot's page and the fields read with it
/// share a cache line ([`Slot`]).
struct Page {
    map: std::ptr::NonNull<libc::c_void>,
    fd: i32,
}

/// The length of a page's mapping: the system's page size.
fn page_len() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

// SAFETY: `map` is a read-only shared mapping owned by this value alone (unmapped exactly once,
// in `drop`), and reading it from any thread is sound: the kernel is the only writer.
unsafe impl Send for Page {}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page").field("fd", &self.fd).finish()
    }
}

impl Page {
    /// Opens a user-space task-clock event on thread `tid` of this process and maps its
    /// metadata page; the `errno` of the refusal otherwise.
    fn open(tid: u32) -> Result<Self, i32> {
        let tid = libc::pid_t::try_from(tid).map_err(|_| libc::EINVAL)?;
        let attr = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_TASK_CLOCK,
            // User space only: what `perf_event_paranoid` 2 (the usual default) allows.
            flags: ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV,
            ..PerfEventAttr::default()
        };
        // SAFETY: (1) `attr` is a valid, initialised `perf_event_attr` whose `size` is its
        // own. (2) The call only reads it; its result is a new descriptor or -1 with errno.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                tid,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL));
        }
        let fd = fd as i32;
        let len = page_len();
        // SAFETY: (1) `fd` is the perf event just opened; mapping its first page read-only
        // and shared is what the perf ABI offers (no data pages follow: we sample nothing).
        // (2) A failure is reported as MAP_FAILED, handled below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL);
            // SAFETY: `fd` is ours and closed exactly once.
            unsafe { libc::close(fd) };
            return Err(errno);
        }
        // Not inherited by a forked child (which closes the descriptor too, see `OPEN_FDS`).
        // SAFETY: (1) `map` and `len` are the mapping just made. (2) Failure only means the
        // child inherits the mapping, which it never reads.
        unsafe { libc::madvise(map, len, libc::MADV_DONTFORK) };
        let Some(map) = std::ptr::NonNull::new(map) else {
            // A mapping at address 0 (only with `mmap_min_addr` 0): refused, and undone.
            // SAFETY: the mapping and `fd` are ours, each released exactly once.
            unsafe {
                libc::munmap(map, len);
                libc::close(fd);
            }
            return Err(libc::EINVAL);
        };
        let page = Self { map, fd };
        if !register_fd(fd) {
            drop(page);
            return Err(libc::EMFILE);
        }
        Ok(page)
    }

    /// The page's sequence count: it changes each time the kernel schedules the thread in.
    /// Not ordered against what follows: a caller that reads the clock after it puts a fence
    /// in between ([`SchedWatch::clock`]), so that a saved read, most of a waiting thread's
    /// ticks, pays no fence.
    fn seq(&self) -> u32 {
        // SAFETY: (1) `map` is a live mapping of at least one page (unmapped only in `drop`),
        // and `lock` lies at a 4-aligned offset well inside it. (2) The kernel writes it
        // concurrently: a volatile read of an aligned u32 is a single load and cannot tear.
        unsafe {
            std::ptr::read_volatile(
                self.map
                    .as_ptr()
                    .cast::<u8>()
                    .add(PAGE_LOCK_OFFSET)
                    .cast::<u32>(),
            )
        }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        unregister_fd(self.fd);
        // SAFETY: (1) `map` and `page_len()` are the mapping `open` made (the page size does
        // not change while a process runs), unmapped exactly once, here. (2) `fd` is ours and
        // closed exactly once.
        unsafe {
            libc::munmap(self.map.as_ptr(), page_len());
            libc::close(self.fd);
        }
    }
}

/// What the watch knows of one thread.
///
/// A slot is one cache line (with a 16-byte `Page`), so a waiting thread's saved read (most of
/// its ticks) reads one line of the table and its page's sequence.
#[derive(Debug)]
#[repr(C, align(64))]
struct Slot {
    page: Option<Page>,
    /// The clock at the last real read.
    clock_ns: u64,
    last_tick: u64,
    /// The page's sequence read just before that read (when it had a page).
    seq: u32,
    /// Real reads saved in a row.
    saved: u32,
    /// Consecutive samples that found the thread scheduled in since the one before.
    busy_samples: u32,
    /// That read found the clock unmoved since the one before, with `seq` read in between:
    /// the thread was off CPU when `seq` was read.
    off_cpu: bool,
    /// Consecutive real reads that found the thread off CPU.
    quiet_reads: u32,
    tid: u32,
    tstate: u64,
}

impl Slot {
    /// Whether the page's sequence `seq` (read now, `None` without a page) proves that the
    /// thread has not run since the last real read: that read found it off CPU with the
    /// sequence read before it, and the sequence has not moved since (module docs). The one
    /// test behind a saved read ([`SchedWatch::clock`]) and an unread thread state
    /// ([`SchedWatch::proven_idle`]).
    fn proves_idle(&self, seq: Option<u32>) -> bool {
        self.off_cpu && seq == Some(self.seq)
    }
}

/// How a thread's CPU clock was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClockRead {
    /// Read from the kernel (or the read failed: `None`).
    Read(Option<u64>),
    /// The thread has provably not run since its last real read: that read's value.
    Unmoved(u64),
}

impl ClockRead {
    pub(crate) fn ns(self) -> Option<u64> {
        match self {
            ClockRead::Read(ns) => ns,
            ClockRead::Unmoved(ns) => Some(ns),
        }
    }
}

/// Per-thread scheduler pages, and the rules for when a clock read can be saved (module docs).
///
/// The slot table is allocated once (`cap` threads); a thread past it takes the slot of the
/// one sampled longest ago. Pages are opened and closed on the sampling path: a system call
/// and a one-page mapping per thread that starts or stops waiting for long, never per tick.
#[derive(Debug)]
pub(crate) struct SchedWatch {
    slots: Vec<Slot>,
    by_thread: HashMap<u64, usize, BuildHasherDefault<AddrHasher>>,
    cap: usize,
    open_pages: usize,
    /// Pages opened since [`SchedWatch::take_opened`] last asked.
    opened: u32,
    failures: u32,
    enabled: bool,
    /// The tick of the last sweep for [`FORGET_AFTER`].
    swept_at: u64,
}

impl SchedWatch {
    /// A watch over at most `cap` threads; `enabled: false` always reads the clock.
    pub(crate) fn new(cap: usize, enabled: bool) -> Self {
        let cap = cap.max(1);
        Self {
            slots: Vec::with_capacity(cap),
            by_thread: HashMap::with_capacity_and_hasher(cap, Default::default()),
            cap,
            open_pages: 0,
            opened: 0,
            failures: 0,
            enabled,
            swept_at: 0,
        }
    }

    /// Asks for the line of each open page's sequence count, before a tick reads them one by
    /// one ([`crate::walker::memory::prefetch`]): each page is a mapping of its own, so each
    /// read would otherwise wait for its own miss (and page walk) in turn.
    pub(crate) fn prefetch_pages(&self) {
        if !self.enabled {
            return;
        }
        for s in &self.slots {
            if let Some(p) = &s.page {
                prefetch((p.map.as_ptr() as u64).wrapping_add(PAGE_LOCK_OFFSET as u64));
            }
        }
    }

    /// Whether thread `thread_id`, its thread state at `tstate`, provably has not run since
    /// its last real clock read: that read found it off CPU, with its page's sequence read
    /// before it, and the sequence is still there (what [`SchedWatch::clock`] saves a read on).
    /// That read was made at an earlier tick than this one, and its proof reaches back to the
    /// read before it, at an earlier tick still: so the thread has not run since before the
    /// last tick's listing (`super::listing`). Reads the page; changes nothing.
    pub(crate) fn proven_idle(&self, thread_id: u64, tstate: u64) -> bool {
        if !self.enabled {
            return false;
        }
        let Some(s) = self
            .by_thread
            .get(&thread_id)
            .and_then(|&i| self.slots.get(i))
        else {
            return false;
        };
        s.tstate == tstate && s.proves_idle(s.page.as_ref().map(Page::seq))
    }

    /// The pages opened since the last call: each a `perf_event_open` and a mapping, and, once
    /// it closes, an unmapping and a `close` (`stats()["walker_sched_pages_opened"]`).
    pub(crate) fn take_opened(&mut self) -> u32 {
        std::mem::take(&mut self.opened)
    }

    /// Pages open now.
    #[cfg(test)]
    pub(crate) fn open_pages(&self) -> usize {
        self.open_pages
    }

    /// The CPU clock of thread `thread_id` (thread state `tstate`, OS tid `tid`) at tick
    /// `tick`: `read()` (the kernel's clock), unless the thread provably has not run since the
    /// last real read. Returns how it was had, and how many `perf_event_open` calls failed.
    pub(crate) fn clock(
        &mut self,
        thread_id: u64,
        tstate: u64,
        tid: u32,
        tick: u64,
        read: impl FnOnce() -> Option<u64>,
    ) -> (ClockRead, u32) {
        if !self.enabled {
            return (ClockRead::Read(read()), 0);
        }
        if tick >= self.swept_at.saturating_add(SWEEP_EVERY) {
            self.sweep(tick);
        }
        let i = self.slot(thread_id, tstate, tid, tick);
        let Self {
            slots,
            open_pages,
            opened,
            failures,
            enabled,
            ..
        } = self;
        let Some(s) = slots.get_mut(i) else {
            return (ClockRead::Read(read()), 0);
        };
        s.last_tick = tick;
        let seq = s.page.as_ref().map(Page::seq);
        // This read would be saved but for VALIDATE_EVERY, which makes it check the premise.
        let checks = s.proves_idle(seq);
        if let Some(seq) = seq {
            if checks && s.saved + 1 < VALIDATE_EVERY {
                s.saved += 1;
                s.busy_samples = 0;
                return (ClockRead::Unmoved(s.clock_ns), 0);
            }
            if seq != s.seq {
                s.busy_samples += 1;
            } else {
                s.busy_samples = 0;
            }
        }
        if seq.is_some() {
            // The sequence is read before the clock, not after: what proves the thread off CPU
            // when the sequence was read (module docs). Only here, not on the saved path above,
            // which reads nothing after the sequence that depends on it.
            fence(Ordering::SeqCst);
        }
        let ns = read();
        s.saved = 0;
        let Some(ns) = ns else {
            s.off_cpu = false;
            s.quiet_reads = 0;
            return (ClockRead::Read(None), 0);
        };
        if checks && ns != s.clock_ns && {
            // The second sequence read comes after the clock's.
            fence(Ordering::SeqCst);
            s.page.as_ref().map(Page::seq) == Some(s.seq)
        } {
            // The thread ran, yet its page did not move, read both before and after its clock
            // (a thread scheduled in between the first read and the clock would have moved it
            // before the second): this kernel does not rewrite the page at each schedule-in.
            // The reads saved so far lost no CPU (the baseline stayed at the last real read);
            // stop saving any.
            s.clock_ns = ns;
            s.off_cpu = false;
            *enabled = false;
            for x in slots.iter_mut() {
                x.page = None;
            }
            *open_pages = 0;
            return (ClockRead::Read(Some(ns)), 1);
        }
        // Unmoved since the previous real read (a slot's first read has `clock_ns` 0, and a
        // thread that has existed at all has used some CPU).
        let unmoved = ns == s.clock_ns;
        s.clock_ns = ns;
        s.quiet_reads = if unmoved { s.quiet_reads + 1 } else { 0 };
        match seq {
            Some(seq) => {
                s.seq = seq;
                s.off_cpu = unmoved;
            }
            // Without a page nothing was read before the clock: not proven off CPU.
            None => s.off_cpu = false,
        }
        let mut failed = 0;
        if s.page.is_some() && s.busy_samples >= CLOSE_AFTER {
            s.page = None;
            s.off_cpu = false;
            s.quiet_reads = 0;
            s.busy_samples = 0;
            *open_pages -= 1;
        } else if s.page.is_none()
            && s.quiet_reads >= OPEN_AFTER
            && *open_pages < MAX_PAGES
            && *failures < MAX_FAILURES
        {
            match Page::open(tid) {
                Ok(p) => {
                    // The sequence is read after the clock here, so this read proves nothing:
                    // the next real read, with the sequence read before it, does.
                    s.seq = p.seq();
                    s.off_cpu = false;
                    s.busy_samples = 0;
                    s.page = Some(p);
                    *open_pages += 1;
                    *opened += 1;
                }
                Err(_) => {
                    *failures += 1;
                    failed = 1;
                    s.quiet_reads = 0;
                }
            }
        }
        (ClockRead::Read(Some(ns)), failed)
    }

    /// Closes the pages of threads no tick has sampled for [`FORGET_AFTER`] ticks.
    fn sweep(&mut self, tick: u64) {
        self.swept_at = tick;
        for s in &mut self.slots {
            if s.page.is_some() && tick.saturating_sub(s.last_tick) >= FORGET_AFTER {
                s.page = None;
                s.off_cpu = false;
                s.quiet_reads = 0;
                self.open_pages -= 1;
            }
        }
    }

    /// The slot of `thread_id`, reset if it held another thread (state or tid), or a new
    /// one (evicting the least recently sampled when full).
    fn slot(&mut self, thread_id: u64, tstate: u64, tid: u32, tick: u64) -> usize {
        let fresh = Slot {
            tstate,
            tid,
            page: None,
            clock_ns: 0,
            seq: 0,
            off_cpu: false,
            quiet_reads: 0,
            busy_samples: 0,
            saved: 0,
            last_tick: tick,
        };
        if let Some(&i) = self.by_thread.get(&thread_id) {
            if let Some(s) = self.slots.get_mut(i) {
                if s.tstate != tstate || s.tid != tid {
                    if s.page.is_some() {
                        self.open_pages -= 1;
                    }
                    *s = fresh;
                }
            }
            return i;
        }
        if self.slots.len() < self.cap {
            self.slots.push(fresh);
            let i = self.slots.len() - 1;
            self.by_thread.insert(thread_id, i);
            return i;
        }
        let Some(i) = (0..self.slots.len()).min_by_key(|&j| self.slots[j].last_tick) else {
            return usize::MAX;
        };
        self.by_thread.retain(|_, &mut j| j != i);
        if self.slots[i].page.is_some() {
            self.open_pages -= 1;
        }
        self.slots[i] = fresh;
        self.by_thread.insert(thread_id, i);
        i
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::walker::cpu::{cpu_time_ns, CpuTimeSource};
    use std::sync::mpsc;
    use std::time::Duration;

    pub(crate) fn gettid() -> u32 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as u32 }
    }

    /// Whether this machine lets a process watch its own threads; on CI it must (the
    /// machines CI runs on are of the kind the figures are measured on).
    pub(crate) fn perf_available() -> bool {
        match Page::open(gettid()) {
            Ok(_) => true,
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "perf_event_open refused (errno {e}) on CI: /proc/sys/kernel/perf_event_paranoid must be 2 or less"
                );
                eprintln!("perf_event_open refused (errno {e}): skipped");
                false
            }
        }
    }

    /// A thread that waits on a channel: each message makes it spin until it has used that
    /// many ms of CPU (its own clock: a loaded machine cannot shorten it), then say so.
    pub(crate) struct Spinner {
        pub(crate) tid: u32,
        run: mpsc::Sender<u64>,
        done: mpsc::Receiver<()>,
        handle: std::thread::JoinHandle<()>,
    }

    impl Spinner {
        pub(crate) fn start() -> Self {
            let (tid_tx, tid_rx) = mpsc::channel();
            let (run, rx) = mpsc::channel::<u64>();
            let (done_tx, done) = mpsc::channel();
            let handle = std::thread::spawn(move || {
                let me = gettid();
                tid_tx.send(me).unwrap();
                while let Ok(ms) = rx.recv() {
                    let t0 = cpu_time_ns(CpuTimeSource::ThreadClock, me).unwrap();
                    while cpu_time_ns(CpuTimeSource::ThreadClock, me).unwrap() - t0 < ms * 1_000_000
                    {
                        std::hint::black_box(0u64);
                    }
                    let _ = done_tx.send(());
                }
            });
            let tid = tid_rx.recv().unwrap();
            Self {
                tid,
                run,
                done,
                handle,
            }
        }

        /// Makes the thread use `ms` of CPU, and waits until it has.
        pub(crate) fn burn(&self, ms: u64) {
            self.run.send(ms).unwrap();
            self.done.recv().unwrap();
        }

        pub(crate) fn stop(self) {
            drop(self.run);
            self.handle.join().unwrap();
        }
    }

    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Option<Page>>(), 16);
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    #[test]
    fn a_page_moves_when_its_thread_is_scheduled_in_and_only_then() {
        if !perf_available() {
            return;
        }
        let sp = Spinner::start();
        let page = Page::open(sp.tid).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let s0 = page.seq();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(page.seq(), s0, "the thread waited: never scheduled in");
        sp.burn(5);
        assert_ne!(page.seq(), s0, "the thread ran");
        sp.stop();
    }

    /// Drives the watch as the walker does, one tick every 10 ms, with the real clock.
    fn tick(w: &mut SchedWatch, tid: u32, k: u64) -> ClockRead {
        std::thread::sleep(Duration::from_millis(10));
        w.clock(1, 2, tid, k, || {
            cpu_time_ns(CpuTimeSource::ThreadClock, tid)
        })
        .0
    }

    /// A watch ticked every 10 ms until thread `tid` (waiting) has a page; and the tick.
    fn watching(tid: u32) -> (SchedWatch, u64) {
        let mut w = SchedWatch::new(8, true);
        let mut k = 0;
        while w.open_pages() == 0 && k < 50 {
            k += 1;
            tick(&mut w, tid, k);
        }
        assert_eq!(w.open_pages(), 1, "a waiting thread gets a page");
        assert_eq!(w.take_opened(), 1, "the page is counted as opened");
        assert_eq!(w.take_opened(), 0, "and only once");
        (w, k)
    }

    #[test]
    fn a_waiting_thread_saves_reads_and_a_woken_one_is_read_again() {
        if !perf_available() {
            return;
        }
        let sp = Spinner::start();
        let tid = sp.tid;
        let mut w = SchedWatch::new(8, true);
        let mut k = 0;
        let mut saved = 0;
        for _ in 0..40 {
            k += 1;
            if matches!(tick(&mut w, tid, k), ClockRead::Unmoved(_)) {
                saved += 1;
            }
        }
        assert_eq!(w.open_pages(), 1);
        assert!(saved >= 25, "saved {saved} of 40 reads of a waiting thread");
        let before = cpu_time_ns(CpuTimeSource::ThreadClock, tid).unwrap();
        // The thread uses 30 ms of CPU between two ticks: the next tick must read the clock,
        // and see all of it.
        sp.burn(30);
        k += 1;
        let ClockRead::Read(Some(ns)) = tick(&mut w, tid, k) else {
            panic!("a thread that ran was not read");
        };
        assert!(ns - before >= 30_000_000, "{} ns", ns - before);
        sp.stop();
    }

    #[test]
    fn a_thread_that_keeps_running_loses_its_page() {
        if !perf_available() {
            return;
        }
        let sp = Spinner::start();
        let tid = sp.tid;
        let (mut w, mut k) = watching(tid);
        for _ in 0..(CLOSE_AFTER + 4) {
            sp.burn(2);
            k += 1;
            assert!(matches!(tick(&mut w, tid, k), ClockRead::Read(_)));
        }
        assert_eq!(w.open_pages(), 0, "a busy thread keeps no page");
        sp.stop();
    }

    #[test]
    fn the_page_of_a_thread_no_longer_sampled_is_closed() {
        if !perf_available() {
            return;
        }
        let sp = Spinner::start();
        let tid = sp.tid;
        let (mut w, k) = watching(tid);
        // Another thread is sampled for a long time; the first is not (it exited, say).
        let me = gettid();
        for j in 0..(FORGET_AFTER + SWEEP_EVERY) {
            w.clock(9, 9, me, k + 1 + j, || Some(1 + j));
        }
        assert_eq!(
            w.open_pages(),
            0,
            "the page of a thread gone quiet for good is closed"
        );
        sp.stop();
    }

    #[test]
    fn a_page_that_does_not_move_when_its_thread_ran_turns_the_watch_off() {
        if !perf_available() {
            return;
        }
        let sp = Spinner::start();
        let tid = sp.tid;
        let mut w = SchedWatch::new(8, true);
        let mut k = 0;
        while !matches!(tick(&mut w, tid, k), ClockRead::Unmoved(_)) && k < 50 {
            k += 1;
        }
        // The thread runs; then the slot is made to look as if its page had not moved (what
        // a kernel that does not rewrite it at schedule-in would show), with the next read
        // due for validation.
        sp.burn(5);
        let i = w.by_thread[&1];
        let s = &mut w.slots[i];
        s.seq = s.page.as_ref().unwrap().seq();
        s.saved = VALIDATE_EVERY - 1;
        let (read, failed) = w.clock(1, 2, tid, k + 1, || {
            cpu_time_ns(CpuTimeSource::ThreadClock, tid)
        });
        assert!(matches!(read, ClockRead::Read(Some(_))));
        assert_eq!(failed, 1, "counted");
        assert_eq!(w.open_pages(), 0);
        assert!(!w.enabled, "no read is saved any more");
        sp.stop();
    }

    #[test]
    fn a_disabled_watch_always_reads() {
        let mut w = SchedWatch::new(8, false);
        for k in 0..20 {
            assert_eq!(w.clock(1, 2, 3, k, || Some(7)).0, ClockRead::Read(Some(7)));
        }
    }

    #[test]
    fn a_new_thread_under_the_same_id_starts_afresh() {
        let mut w = SchedWatch::new(8, true);
        // A tid no thread can have: opening its page fails (and is counted), reads go on.
        let (a, b) = (4_000_000_001, 4_000_000_002);
        let mut failed = 0;
        for k in 0..20 {
            failed += w.clock(1, 2, a, k, || Some(7)).1;
        }
        assert!(failed >= 1);
        // Same id, another tid: no proof, a real read.
        assert_eq!(w.clock(1, 2, b, 21, || Some(9)).0, ClockRead::Read(Some(9)));
    }
}
/// The component's cost, not a spec: `cargo test --release -p span-profile-python --lib
/// cost_per_idle_thread -- --ignored --nocapture` prints what one clock read and one watched
/// read of a parked thread take, alternated in rounds of 64 threads × 200 ticks.
#[cfg(test)]
mod cost {
    use super::*;
    use crate::walker::cpu::{cpu_time_ns, CpuTimeSource};
    use std::time::Instant;

    #[test]
    #[ignore = "a measurement: run it with --ignored --nocapture"]
    fn cost_per_idle_thread() {
        let (parked, tids): (Vec<_>, Vec<_>) = (0..64)
            .map(|_| {
                let (tx, rx) = std::sync::mpsc::channel::<()>();
                let (tid_tx, tid_rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    tid_tx
                        .send(unsafe { libc::syscall(libc::SYS_gettid) } as u32)
                        .unwrap();
                    let _ = rx.recv();
                });
                (tx, tid_rx.recv().unwrap())
            })
            .unzip();
        let mut w = SchedWatch::new(256, true);
        let ticks = 200;
        let mut tick = 0;
        for round in 0..6 {
            let t0 = Instant::now();
            for _ in 0..ticks {
                for &tid in &tids {
                    std::hint::black_box(cpu_time_ns(CpuTimeSource::ThreadClock, tid));
                }
            }
            let read = t0.elapsed().as_nanos() as f64 / f64::from(ticks * 64);
            let t0 = Instant::now();
            for _ in 0..ticks {
                tick += 1;
                for (i, &tid) in tids.iter().enumerate() {
                    std::hint::black_box(w.clock(i as u64 + 1, 1, tid, tick, || {
                        cpu_time_ns(CpuTimeSource::ThreadClock, tid)
                    }));
                }
            }
            let watched = t0.elapsed().as_nanos() as f64 / f64::from(ticks * 64);
            eprintln!(
                "round {round}: clock read {read:.0} ns, watched {watched:.0} ns ({} pages)",
                w.open_pages
            );
        }
        drop(parked);
    }
}
