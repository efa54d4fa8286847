//! Process-wide setup (signal, table, fork handler) and thread registration.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

use crate::signal::{self, create_thread_timer, delete_timer, gettid, set_timer, TABLE};
use crate::table::{encode, Table, ACTIVE, CLAIMED, FREE, GEN_MASK, RETIRING};
use crate::{RegisterError, SetupError};

/// The signal requested with [`crate::set_signal`]; 0 = pick one.
static REQUESTED_SIGNAL: AtomicI32 = AtomicI32::new(0);
static INIT: Mutex<()> = Mutex::new(());

/// Chooses the signal the profiler uses instead of the default (the first unused realtime
/// signal from `SIGRTMIN+4`). Must be called before the first registration or walker; if the
/// signal already has a handler, signals that are not ours are passed on to it.
///
/// ```
/// // SIGRTMIN+4 is also what the default picks when nothing else uses it.
/// let sig = libc::SIGRTMIN() + 4;
/// span_profile_native::set_signal(sig).unwrap();
/// assert_eq!(span_profile_native::signal(), Some(sig));
/// ```
pub fn set_signal(signal: i32) -> Result<(), SetupError> {
    let _g = INIT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(t) = TABLE.get() {
        return if t.signal == signal {
            Ok(())
        } else {
            Err(SetupError::SignalAlreadyChosen(t.signal))
        };
    }
    REQUESTED_SIGNAL.store(signal, Ordering::Relaxed);
    drop(_g);
    table().map(|_| ())
}

/// The signal in use, once set up.
pub fn signal() -> Option<i32> {
    TABLE.get().map(|t| t.signal)
}

/// The table, setting up the process on first use: picks and installs the signal handler,
/// allocates the table, registers the `fork` handlers.
pub(crate) fn table() -> Result<&'static Table, SetupError> {
    if let Some(t) = TABLE.get() {
        return Ok(t);
    }
    let _g = INIT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(t) = TABLE.get() {
        return Ok(t);
    }
    let sig = match REQUESTED_SIGNAL.load(Ordering::Relaxed) {
        0 => signal::pick_signal().ok_or(SetupError::NoFreeSignal)?,
        s => s,
    };
    signal::install(sig).map_err(|e| match e {
        signal::InstallError::BadSignal(s) => SetupError::InvalidSignal(s),
        signal::InstallError::Sigaction(errno) => SetupError::Sigaction(errno),
    })?;
    let t = TABLE.get_or_init(|| Table::new(sig));
    // SAFETY: the three callbacks are `extern "C" fn()` that live for the whole process.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
    Ok(t)
}

extern "C" fn fork_prepare() {
    // Hold the lock across fork so the child's copy of the table is not mid-update.
    if let Some(t) = TABLE.get() {
        std::mem::forget(t.lock.lock());
    }
}

extern "C" fn fork_parent() {
    if let Some(t) = TABLE.get() {
        t.lock.force_unlock();
    }
}

/// In the child only the forking thread exists and no timer was inherited: every slot is
/// freed (a new generation, so the forking thread's old guard is a no-op), no walker is
/// attached, and sampling is off until a new walker is built.
extern "C" fn fork_child() {
    let Some(t) = TABLE.get() else {
        return;
    };
    let hw = t.high_water.load(Ordering::Relaxed).min(t.slots.len());
    for slot in &t.slots[..hw] {
        if slot.state.load(Ordering::Relaxed) != FREE {
            t.free(slot);
        }
    }
    t.registry.store(std::ptr::null_mut(), Ordering::SeqCst);
    t.readers.store(0, Ordering::SeqCst);
    t.cpu_period_ns.store(0, Ordering::Relaxed);
    t.attached.store(false, Ordering::Release);
    t.epoch.fetch_add(1, Ordering::AcqRel);
    t.lock.force_unlock();
}

thread_local! {
    /// This thread's registration (slot, generation), if any.
    static REGISTERED: Cell<Option<(usize, u32)>> = const { Cell::new(None) };
    /// The registration made by [`register_current_thread_until_exit`].
    static UNTIL_EXIT: std::cell::RefCell<Option<ThreadGuard>> = const { std::cell::RefCell::new(None) };
}

/// Keeps the calling thread registered with the native walker until dropped. Not `Send`: it
/// must be dropped on the thread it registered (its signal handler is the slot's only writer).
#[derive(Debug)]
pub struct ThreadGuard {
    index: usize,
    gen: u32,
    _not_send: PhantomData<*const ()>,
}

fn stack_bounds() -> (usize, usize) {
    // SAFETY: all-zero is a valid out-parameter for pthread_getattr_np.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    // SAFETY: `attr` is a valid out-parameter; on success it is destroyed below.
    if unsafe { libc::pthread_getattr_np(libc::pthread_self(), &mut attr) } != 0 {
        return (0, 0);
    }
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: `attr` was initialised by pthread_getattr_np.
    let rc = unsafe { libc::pthread_attr_getstack(&attr, &mut addr, &mut size) };
    // SAFETY: as above; destroyed once.
    unsafe { libc::pthread_attr_destroy(&mut attr) };
    if rc != 0 {
        return (0, 0);
    }
    (addr as usize, (addr as usize).saturating_add(size))
}

fn still_registered(t: &Table, index: usize, gen: u32) -> bool {
    t.slots.get(index).is_some_and(|s| {
        s.gen.load(Ordering::Relaxed) == gen && s.state.load(Ordering::Relaxed) == ACTIVE
    })
}

/// Registers the calling thread for sampling until the returned guard is dropped (on this
/// thread). Threads that start after the profiler register themselves the same way.
///
/// Sampling starts as soon as a [`crate::NativeWalker`] exists; the thread's samples carry
/// the span current on it (through `span_profile_core::otel`).
///
/// ```
/// let guard = span_profile_native::register_current_thread().unwrap();
/// assert!(span_profile_native::stats().registered_threads >= 1);
/// drop(guard);
/// ```
pub fn register_current_thread() -> Result<ThreadGuard, RegisterError> {
    let t = table().map_err(RegisterError::Setup)?;
    if let Some((i, g)) = REGISTERED.with(Cell::get) {
        if still_registered(t, i, g) {
            return Err(RegisterError::AlreadyRegistered);
        }
    }
    let tid = gettid();
    let key = span_profile_core::ExecutionKey::current_thread().thread;
    let (lo, hi) = stack_bounds();
    let current = std::thread::current();
    let name = current.name().unwrap_or("unnamed");
    let _lock = t.lock.lock();
    let Some(index) = t.slots.iter().position(|s| {
        s.state
            .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }) else {
        t.counters.register_full.fetch_add(1, Ordering::Relaxed);
        return Err(RegisterError::Full);
    };
    let slot = &t.slots[index];
    let gen = slot.gen.load(Ordering::Relaxed).wrapping_add(1) & GEN_MASK;
    slot.gen.store(gen, Ordering::Relaxed);
    slot.tid.store(tid, Ordering::Relaxed);
    slot.key.store(key, Ordering::Relaxed);
    slot.stack_lo.store(lo, Ordering::Relaxed);
    slot.stack_hi.store(hi, Ordering::Relaxed);
    slot.head.store(0, Ordering::Relaxed);
    slot.tail.store(0, Ordering::Relaxed);
    slot.wall_pending.store(false, Ordering::Relaxed);
    slot.wall_owed.store(0, Ordering::Relaxed);
    slot.last_wall_cpu
        .store(signal::thread_cpu_ns(), Ordering::Relaxed);
    slot.set_name(name);
    match create_thread_timer(t.signal, encode(index, gen), tid) {
        Some(timer) => {
            slot.timer.store(timer as usize, Ordering::Relaxed);
            slot.has_timer.store(true, Ordering::Relaxed);
            let period = t.cpu_period_ns.load(Ordering::Relaxed);
            if period > 0 && !set_timer(timer, period) {
                t.counters.timer_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        None => {
            slot.has_timer.store(false, Ordering::Relaxed);
            t.counters.timer_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    // Release: everything above is visible to the handler (Acquire on `state`) and walker.
    slot.state.store(ACTIVE, Ordering::Release);
    t.high_water.fetch_max(index + 1, Ordering::AcqRel);
    REGISTERED.with(|r| r.set(Some((index, gen))));
    Ok(ThreadGuard {
        index,
        gen,
        _not_send: PhantomData,
    })
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        let Some(t) = TABLE.get() else {
            return;
        };
        let _lock = t.lock.lock();
        if !still_registered(t, self.index, self.gen) {
            return; // freed by a fork in between
        }
        let slot = &t.slots[self.index];
        // First stop the handler from writing (it checks ACTIVE); we are the slot's thread,
        // so no handler of ours is running at this moment.
        slot.state.store(RETIRING, Ordering::Release);
        if slot.has_timer.swap(false, Ordering::Relaxed) {
            delete_timer(slot.timer.load(Ordering::Relaxed) as libc::timer_t);
        }
        if !t.attached.load(Ordering::Acquire) {
            // No walker will drain it: discard what is left.
            t.free(slot);
        }
        let _ = REGISTERED.try_with(|r| r.set(None));
    }
}

/// Registers the calling thread until it exits (or [`on_thread_stop`] runs): for thread
/// pools that offer start/stop hooks. Registering twice is a no-op.
pub fn register_current_thread_until_exit() -> Result<(), RegisterError> {
    let guard = match register_current_thread() {
        Ok(g) => g,
        Err(RegisterError::AlreadyRegistered) => return Ok(()),
        Err(e) => return Err(e),
    };
    UNTIL_EXIT.with(|g| *g.borrow_mut() = Some(guard));
    Ok(())
}

/// A tokio `on_thread_start` hook: registers the worker until it stops. Errors are counted
/// in [`crate::stats`] (`register_full`), not reported.
///
/// ```
/// let rt = tokio::runtime::Builder::new_multi_thread()
///     .worker_threads(2)
///     .on_thread_start(span_profile_native::on_thread_start)
///     .on_thread_stop(span_profile_native::on_thread_stop)
///     .build()
///     .unwrap();
/// drop(rt);
/// ```
pub fn on_thread_start() {
    let _ = register_current_thread_until_exit();
}

/// A tokio `on_thread_stop` hook: deregisters the thread.
pub fn on_thread_stop() {
    let _ = UNTIL_EXIT.try_with(|g| g.borrow_mut().take());
}

/// Attach state for one walker; see `walker.rs`.
pub(crate) fn arm_all(t: &Table, period_ns: u64) {
    let hw = t.high_water.load(Ordering::Acquire).min(t.slots.len());
    for slot in &t.slots[..hw] {
        if slot.state.load(Ordering::Acquire) == ACTIVE
            && slot.has_timer.load(Ordering::Relaxed)
            && !set_timer(
                slot.timer.load(Ordering::Relaxed) as libc::timer_t,
                period_ns,
            )
        {
            t.counters.timer_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}
