//! # span-profile-native
//!
//! A [`StackWalker`](span_profile_core::StackWalker) for the host process's own native threads
//! (Linux x86_64 and aarch64), so Rust services get the same span profiles as Python ones.
//!
//! - [`NativeWalker`]: per-thread CPU-time sampling (`timer_create` on
//!   `CLOCK_THREAD_CPUTIME_ID`, delivered to the thread with `SIGEV_THREAD_ID`) and wall-time
//!   sampling (a queued signal per thread per tick). The signal handler unwinds by frame
//!   pointers into a preallocated per-thread ring and reads the thread's current span from the
//!   core's lock-free registry; the walker drains the rings on the sampler thread and resolves
//!   symbols (demangled) only for frames it has not seen.
//! - [`register_current_thread`] / [`ThreadGuard`]: threads opt in, at any time; a dropped
//!   guard (or thread exit, with [`register_current_thread_until_exit`]) releases the slot.
//!   [`on_thread_start`] / [`on_thread_stop`] plug into tokio's runtime builder.
//! - Spans come from `span_profile_core::otel` (`install`'s context observer or
//!   `ContextGuard`), keyed by `ExecutionKey::current_thread()`; a tokio task re-attaches its context on
//!   every poll, so its span follows it between workers.
//! - [`stats`]: process-wide counters (samples, full rings, stray signals, ...).
//!
//! Frame-pointer unwinding needs code built with frame pointers: build release binaries with
//! `RUSTFLAGS="-C force-frame-pointers=yes"` (debug builds keep them). A chain through code
//! without them ends there.
//!
//! Signal: the first realtime signal from `SIGRTMIN+4` that has no handler, or the one given
//! to [`set_signal`] (signals that are not ours are passed to the previous handler). The
//! handler is installed with `SA_RESTART`; `fork` children start with no registered thread
//! and no walker. Decisions and the signal-safety rules: `docs/adr/0005-native-walker.md`.
//!
//! MSRV: the workspace's `rust-version` (1.95, the toolchain CI tests).
#![cfg(target_os = "linux")]

mod signal;
mod table;
mod thread;
mod walker;

pub use table::NativeStats;
pub use thread::{
    on_thread_start, on_thread_stop, register_current_thread, register_current_thread_until_exit,
    set_signal, signal, ThreadGuard,
};
pub use walker::{NativeWalker, NativeWalkerBuilder};

/// Why the process could not be set up for sampling, or a walker not attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// Every realtime signal from `SIGRTMIN+4` already has a handler: choose one with
    /// [`set_signal`].
    #[error("no unused realtime signal: choose one with set_signal")]
    NoFreeSignal,
    /// The signal number cannot carry a handler.
    #[error("signal {0} cannot be used")]
    InvalidSignal(i32),
    /// `sigaction` failed with this errno.
    #[error("sigaction failed (errno {0})")]
    Sigaction(i32),
    /// The process already samples with another signal.
    #[error("the profiler already uses signal {0}")]
    SignalAlreadyChosen(i32),
    /// Another [`NativeWalker`] is attached; drop it first.
    #[error("another NativeWalker is attached")]
    AlreadyAttached,
}

/// Why a thread could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The process could not be set up.
    #[error(transparent)]
    Setup(SetupError),
    /// All thread slots are taken (1,024 threads registered at once).
    #[error("all thread slots are taken")]
    Full,
    /// This thread is registered already.
    #[error("this thread is already registered")]
    AlreadyRegistered,
}

/// The counters so far (zero before the first registration or walker).
pub fn stats() -> NativeStats {
    let Some(t) = signal::TABLE.get() else {
        return NativeStats::default();
    };
    NativeStats {
        registered_threads: t.registered(),
        ..t.counters.snapshot()
    }
}
