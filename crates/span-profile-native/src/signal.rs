//! The signal handler and the system calls around it: installing the handler (chaining to a
//! previous one), per-thread CPU timers, wall signals, and the frame-pointer unwinder.
//!
//! # What the handler does (and only this)
//!
//! 1. Saves `errno`; restores it on every return path.
//! 2. Decides whether the signal is ours: `si_code` is `SI_TIMER` (our CPU timer) or
//!    `SI_QUEUE` (our wall signal) and the value carries [`crate::table::MAGIC`]. Anything else
//!    goes to the previous handler of that signal, if there was one.
//! 3. Finds its slot from the value (index + generation) and checks that the slot is active,
//!    of that generation, and owned by the calling thread (`gettid`).
//! 4. For a wall signal, takes the ticks it waited through (weight), and reads the thread's
//!    CPU clock (`clock_gettime`): the CPU time the thread used since its previous wall
//!    sample, and whether it ran (a CPU-timer signal stands for one period of CPU per expiration).
//! 5. Unwinds by frame pointers from the interrupted context, reading only words inside
//!    `[sp, stack top)` of this thread, straight into the ring entry.
//! 6. Reads the thread's current span from the registry (`ActiveSpanRegistry::current`: a
//!    seqlock over atomics, no lock, no allocation).
//! 7. Publishes the entry with a Release store of the ring head, or counts a full ring.
//!
//! No allocation, no lock, no logging, no panic (every index is checked with `get`). The
//! functions called are `gettid`, `clock_gettime` (async-signal-safe per POSIX) and atomics.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use libc::{c_int, siginfo_t};
use span_profile_core::ExecutionKey;

use crate::table::{
    decode, Entry, Slot, Table, ACTIVE, F_HAS_SPAN, F_SPAN_READ, F_TRUNCATED, MAX_DEPTH, RING,
};

/// `si_code` of a POSIX timer expiry.
const SI_TIMER: c_int = -2;
/// `si_code` of `sigqueue`/`rt_tgsigqueueinfo`.
const SI_QUEUE: c_int = -1;
/// Cap on the ticks one wall sample stands for (a thread with the signal masked for minutes).
const MAX_OWED: u32 = 100_000;
/// Cap on the CPU timer expirations one sample stands for.
const MAX_OVERRUN: u32 = 1000;

/// The weight of a sample that stands for itself and `extra` ticks it waited through, at most
/// `1 + cap`, and the ticks the cap left out (counted in `capped_ticks`, never dropped silently).
fn capped_weight(extra: u32, cap: u32) -> (u32, u64) {
    let kept = extra.min(cap);
    (1 + kept, u64::from(extra - kept))
}

/// The head of `siginfo_t` on 64-bit Linux: for both `SI_TIMER` (`si_tid`, `si_overrun`,
/// `si_value`) and `SI_QUEUE` (`si_pid`, `si_uid`, `si_value`) the value sits at offset 24.
#[repr(C)]
struct SigInfoHead {
    signo: c_int,
    errno: c_int,
    code: c_int,
    _pad: c_int,
    /// `si_tid` or `si_pid`.
    a: c_int,
    /// `si_overrun` or `si_uid`.
    b: c_int,
    value: u64,
    _rest: [u64; 12],
}

const _: () = assert!(std::mem::size_of::<SigInfoHead>() == std::mem::size_of::<siginfo_t>());

/// The disposition the signal had before ours, for chaining.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
/// The table, once the handler is installed. Read by the handler with `get` only (an atomic
/// load; it never initialises from a signal).
pub(crate) static TABLE: OnceLock<Table> = OnceLock::new();

/// Why the handler could not be installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InstallError {
    BadSignal(c_int),
    Sigaction(i32),
}

fn disposition(sig: c_int) -> Option<libc::sigaction> {
    // SAFETY: an all-zero `sigaction` is a valid out-parameter.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: querying (null new action) only writes `old`.
    let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
    (rc == 0).then_some(old)
}

/// The default signal: the first realtime signal from `SIGRTMIN+4` up whose disposition is
/// the default one (so unused; an application using a realtime signal installs a handler).
pub(crate) fn pick_signal() -> Option<c_int> {
    (libc::SIGRTMIN() + 4..=libc::SIGRTMAX())
        .find(|&s| disposition(s).is_some_and(|d| d.sa_sigaction == libc::SIG_DFL))
}

/// Installs the handler on `sig` (once per process), remembering the previous disposition.
pub(crate) fn install(sig: c_int) -> Result<(), InstallError> {
    if sig <= 0 || sig > libc::SIGRTMAX() || sig == libc::SIGKILL || sig == libc::SIGSTOP {
        return Err(InstallError::BadSignal(sig));
    }
    let old = disposition(sig).ok_or(InstallError::BadSignal(sig))?;
    let _ = PREVIOUS.set(old);
    // SAFETY: an all-zero `sigaction` is valid; the fields we need are set below.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler as *const () as usize;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: `sa_mask` is a valid sigset_t to initialise.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: `act` is fully initialised and `handler` has the SA_SIGINFO signature.
    let rc = unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(InstallError::Sigaction(errno()));
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

extern "C" fn handler(sig: c_int, info: *mut siginfo_t, uctx: *mut c_void) {
    // SAFETY: `__errno_location` returns this thread's errno, always valid.
    let saved = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes valid `info` and `uctx` to an SA_SIGINFO handler.
    unsafe { on_signal(sig, info, uctx) };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

/// # Safety
/// `info` and `uctx` are the pointers the kernel passed to an SA_SIGINFO handler.
unsafe fn on_signal(sig: c_int, info: *mut siginfo_t, uctx: *mut c_void) {
    if info.is_null() {
        return;
    }
    // SAFETY: `info` points to a kernel-filled `siginfo_t`, which `SigInfoHead` mirrors.
    let head = unsafe { &*info.cast::<SigInfoHead>() };
    let ours = if head.code == SI_TIMER || head.code == SI_QUEUE {
        decode(head.value)
    } else {
        None
    };
    let (Some((index, gen)), Some(table)) = (ours, TABLE.get()) else {
        // SAFETY: forwarded from our caller.
        unsafe { chain(sig, info, uctx) };
        return;
    };
    let Some(slot) = table.slots.get(index) else {
        table.counters.stray_signals.fetch_add(1, Ordering::Relaxed);
        return;
    };
    // Acquire: pairs with the Release store of ACTIVE at registration, so the stack bounds,
    // key and ring indices written before it are visible.
    if slot.state.load(Ordering::Acquire) != ACTIVE
        || slot.gen.load(Ordering::Relaxed) != gen
        || slot.tid.load(Ordering::Relaxed) != gettid()
    {
        table.counters.stray_signals.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let wall = head.code == SI_QUEUE;
    let weight: u32;
    // The CPU time the sample stands for (ADR 0019).
    let cpu_ns: u64;
    if wall {
        // Ticks this signal waited through (the walker sends no other while it is pending):
        // the sample stands for them too. The walker adds and we take with read-modify-writes
        // of the one atomic, so each tick is counted by exactly one sample (a tick the walker
        // adds just after our swap goes to the next one).
        let (w, capped) = capped_weight(slot.wall_owed.swap(0, Ordering::Relaxed), MAX_OWED);
        slot.wall_pending.store(false, Ordering::Relaxed);
        if capped > 0 {
            table
                .counters
                .capped_ticks
                .fetch_add(capped, Ordering::Relaxed);
        }
        weight = w;
        let cpu = thread_cpu_ns();
        let before = slot.last_wall_cpu.swap(cpu, Ordering::Relaxed);
        let period = table
            .wall_period_ns
            .load(Ordering::Relaxed)
            .saturating_mul(u64::from(weight));
        let used = cpu.saturating_sub(before);
        let running = used.saturating_mul(2) >= period;
        let cpu_timer = table.cpu_period_ns.load(Ordering::Relaxed) > 0;
        if running && cpu_timer {
            // The CPU timer already samples this thread while it runs.
            table
                .counters
                .wall_covered_by_cpu
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        // With the CPU timer, its samples carry the CPU time; without it, this sample carries
        // what the thread used since its previous wall sample.
        cpu_ns = if cpu_timer { 0 } else { used };
    } else {
        // Expirations the kernel merged into this one (the thread ran but the signal was
        // pending); the sample stands for all of them.
        let overruns = u32::try_from(head.b).unwrap_or(0);
        let (w, capped) = capped_weight(overruns, MAX_OVERRUN);
        if capped > 0 {
            table
                .counters
                .capped_ticks
                .fetch_add(capped, Ordering::Relaxed);
        }
        weight = w;
        // Each expiration is one period of the thread's CPU time.
        cpu_ns = table
            .cpu_period_ns
            .load(Ordering::Relaxed)
            .saturating_mul(u64::from(weight));
    }
    // SAFETY: `uctx` is the interrupted context from the kernel; `slot` is this thread's.
    unsafe { push(table, index, slot, uctx, weight, cpu_ns) };
}

/// # Safety
/// Runs in the handler on the thread owning `slot` (the ring's only producer); `uctx` is the
/// kernel's `ucontext_t` for the interruption.
unsafe fn push(
    table: &Table,
    index: usize,
    slot: &Slot,
    uctx: *mut c_void,
    weight: u32,
    cpu_ns: u64,
) {
    let mut flags = 0;
    let head = slot.head.load(Ordering::Relaxed);
    // Acquire: pairs with the walker's Release store of `tail`, so the walker is done reading
    // the entry we are about to overwrite.
    let tail = slot.tail.load(Ordering::Acquire);
    if head.wrapping_sub(tail) >= RING {
        table.counters.ring_full.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let e = table.entry(index, head);
    if e.is_null() {
        return;
    }
    // SAFETY: (1) `e` is a valid entry of this slot's ring; (2) the walker reads only entries
    // in `tail..head`, and `head` has not been advanced over this one, so nothing else
    // references it until the Release store below.
    let entry: &mut Entry = unsafe { &mut *e };
    let lo = slot.stack_lo.load(Ordering::Relaxed);
    let hi = slot.stack_hi.load(Ordering::Relaxed);
    // SAFETY: `uctx` is the kernel's context; the bounds are this thread's stack.
    let (len, truncated) = unsafe { unwind(uctx, lo, hi, &mut entry.frames) };
    if truncated {
        flags |= F_TRUNCATED;
    }
    entry.len = len as u32;
    entry.weight = weight;
    entry.cpu_ns = cpu_ns;
    // The registry pointer is borrowed from the attached walker's `Arc`. SeqCst on `readers`
    // and `registry` (here and in detach): either detach sees our increment and waits for
    // the decrement, or we see its null.
    table.readers.fetch_add(1, Ordering::SeqCst);
    let reg = table.registry.load(Ordering::SeqCst);
    if !reg.is_null() {
        flags |= F_SPAN_READ;
        // SAFETY: non-null means the walker still holds its `Arc` and will not drop it while
        // `readers` is non-zero (see `walker::detach`).
        let current =
            unsafe { &*reg }.current(ExecutionKey::thread(slot.key.load(Ordering::Relaxed)));
        match current {
            Some(a) => {
                flags |= F_HAS_SPAN;
                let t = a.ctx.trace_id.to_u128();
                entry.trace_hi = (t >> 64) as u64;
                entry.trace_lo = t as u64;
                entry.span = a.ctx.span_id.to_u64();
                entry.root = a.ctx.local_root_span_id.to_u64();
                entry.route = a.route.0;
            }
            None => {
                entry.span = 0;
            }
        }
    }
    table.readers.fetch_sub(1, Ordering::SeqCst);
    entry.flags = flags;
    // Release: the entry's contents are visible to the walker that Acquire-loads `head`.
    slot.head.store(head.wrapping_add(1), Ordering::Release);
    table.counters.samples.fetch_add(1, Ordering::Relaxed);
}

/// Calls the handler the signal had before ours, for signals that are not ours.
///
/// # Safety
/// The arguments are the kernel's, passed through unchanged.
unsafe fn chain(sig: c_int, info: *mut siginfo_t, uctx: *mut c_void) {
    if let Some(t) = TABLE.get() {
        t.counters.foreign_signals.fetch_add(1, Ordering::Relaxed);
    }
    let Some(prev) = PREVIOUS.get() else {
        return;
    };
    let h = prev.sa_sigaction;
    // A foreign signal whose previous action was the default (terminate, for a realtime
    // signal) or ignore is ignored: we own the signal now.
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return;
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: with SA_SIGINFO the previous handler has the three-argument signature.
        let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, uctx);
    } else {
        // SAFETY: without SA_SIGINFO the previous handler takes the signal number only.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`); async-signal-safe.
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The interrupted pc, frame pointer and stack pointer.
///
/// # Safety
/// `uctx` is null or the kernel's `ucontext_t`.
#[cfg(target_arch = "x86_64")]
unsafe fn registers(uctx: *mut c_void) -> Option<(usize, usize, usize)> {
    if uctx.is_null() {
        return None;
    }
    // SAFETY: the kernel's context for this interruption.
    let uc = unsafe { &*uctx.cast::<libc::ucontext_t>() };
    let g = &uc.uc_mcontext.gregs;
    Some((
        g[libc::REG_RIP as usize] as usize,
        g[libc::REG_RBP as usize] as usize,
        g[libc::REG_RSP as usize] as usize,
    ))
}

/// # Safety
/// `uctx` is null or the kernel's `ucontext_t`.
#[cfg(target_arch = "aarch64")]
unsafe fn registers(uctx: *mut c_void) -> Option<(usize, usize, usize)> {
    if uctx.is_null() {
        return None;
    }
    // SAFETY: the kernel's context for this interruption.
    let uc = unsafe { &*uctx.cast::<libc::ucontext_t>() };
    let m = &uc.uc_mcontext;
    Some((m.pc as usize, m.regs[29] as usize, m.sp as usize))
}

/// # Safety
/// Always safe; other architectures are not unwound.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn registers(_uctx: *mut c_void) -> Option<(usize, usize, usize)> {
    None
}

/// Unwinds the interrupted thread by frame pointers into `out` (leaf first). Returns the
/// number of frames and whether the depth cap cut the stack.
///
/// Each frame record is `[fp] = caller's fp, [fp + 8] = return address`. A frame pointer is
/// followed only if it lies in `[max(sp, lo), hi - 16]`, is 8-byte aligned and is above the
/// previous one (stacks grow down): the words read are then inside the live part of this
/// thread's own stack, which is mapped. A chain broken by code built without frame pointers
/// ends the walk there.
///
/// # Safety
/// `uctx` is the kernel's context of an interruption of the calling thread, whose stack is
/// `[lo, hi)`.
pub(crate) unsafe fn unwind(
    uctx: *mut c_void,
    lo: usize,
    hi: usize,
    out: &mut [u64; MAX_DEPTH],
) -> (usize, bool) {
    // SAFETY: forwarded.
    let Some((pc, mut fp, sp)) = (unsafe { registers(uctx) }) else {
        return (0, false);
    };
    out[0] = pc as u64;
    let mut n = 1;
    let lo = lo.max(sp);
    while hi >= 16 && fp >= lo && fp <= hi - 16 && fp % 8 == 0 {
        if n == MAX_DEPTH {
            return (n, true);
        }
        // SAFETY: `fp` and `fp + 8` lie within the live part of this thread's stack (checked
        // above), which is mapped and readable; volatile because another context wrote them.
        let (next, ret) = unsafe {
            (
                std::ptr::read_volatile(fp as *const usize),
                std::ptr::read_volatile((fp + 8) as *const usize),
            )
        };
        if ret == 0 {
            break;
        }
        // A return address points after the call; minus one lands on the call's line.
        out[n] = (ret - 1) as u64;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    (n, false)
}

/// A CPU-clock timer for the calling thread, delivering `sig` with `value` to it.
pub(crate) fn create_thread_timer(sig: c_int, value: u64, tid: i32) -> Option<libc::timer_t> {
    // SAFETY: all-zero is a valid `sigevent`; the fields used are set below.
    let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
    sev.sigev_notify = libc::SIGEV_THREAD_ID;
    sev.sigev_signo = sig;
    sev.sigev_value = libc::sigval {
        sival_ptr: value as usize as *mut c_void,
    };
    sev.sigev_notify_thread_id = tid;
    let mut timer: libc::timer_t = std::ptr::null_mut();
    // SAFETY: valid pointers; CLOCK_THREAD_CPUTIME_ID is the calling thread's CPU clock.
    let rc = unsafe { libc::timer_create(libc::CLOCK_THREAD_CPUTIME_ID, &mut sev, &mut timer) };
    (rc == 0).then_some(timer)
}

/// Arms (period > 0) or disarms (0) a timer.
pub(crate) fn set_timer(timer: libc::timer_t, period_ns: u64) -> bool {
    let ts = libc::timespec {
        tv_sec: (period_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (period_ns % 1_000_000_000) as libc::c_long,
    };
    let spec = libc::itimerspec {
        it_interval: ts,
        it_value: ts,
    };
    // SAFETY: `timer` came from `timer_create` and has not been deleted (callers hold the
    // table lock, under which alone timers are deleted).
    unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) == 0 }
}

pub(crate) fn delete_timer(timer: libc::timer_t) {
    // SAFETY: as in `set_timer`; the caller forgets the id afterwards.
    unsafe { libc::timer_delete(timer) };
}

/// Queues our wall signal to thread `tid` of this process with `value`.
pub(crate) fn send_wall(sig: c_int, tid: i32, value: u64) -> bool {
    let mut info = SigInfoHead {
        signo: sig,
        errno: 0,
        code: SI_QUEUE,
        _pad: 0,
        // SAFETY: getpid and getuid cannot fail.
        a: unsafe { libc::getpid() },
        // SAFETY: as above.
        b: unsafe { libc::getuid() } as c_int,
        value,
        _rest: [0; 12],
    };
    // SAFETY: `info` is a full-size siginfo with SI_QUEUE, which the kernel accepts from a
    // process for its own threads.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            tid,
            sig,
            &mut info as *mut SigInfoHead,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::{capped_weight, MAX_OVERRUN, MAX_OWED};

    #[test]
    fn a_sample_stands_for_the_ticks_it_waited_through() {
        assert_eq!(capped_weight(0, MAX_OWED), (1, 0));
        assert_eq!(capped_weight(41, MAX_OWED), (42, 0));
        assert_eq!(
            capped_weight(MAX_OVERRUN, MAX_OVERRUN),
            (1 + MAX_OVERRUN, 0)
        );
    }

    #[test]
    fn ticks_beyond_the_cap_are_counted_not_lost() {
        assert_eq!(capped_weight(MAX_OWED + 5, MAX_OWED), (1 + MAX_OWED, 5));
        assert_eq!(
            capped_weight(u32::MAX, MAX_OVERRUN),
            (1 + MAX_OVERRUN, u64::from(u32::MAX - MAX_OVERRUN))
        );
    }
}
