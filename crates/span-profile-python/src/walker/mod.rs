//! The CPython stack walker: samples every Python thread's stack without the GIL by copying
//! interpreter memory: in-process under a fault guard, or with `process_vm_readv` (as py-spy
//! and echion do).
//!
//! - [`MemoryReader`]: how memory is read; [`GuardedReader`] in production (guarded copies,
//!   `process_vm_readv` when the guard is not in place, ADR 0009), [`ProcessVmReader`] for
//!   other processes, `testing::FakeMemory` in tests and fuzzing.
//! - [`PythonWalker`]: implements [`span_profile_core::StackWalker`] for CPython 3.9–3.13 (GIL
//!   builds, x86_64 Linux). Build it in-process with [`PythonWalker::for_current_process`], or
//!   from a [`Target`] (the `_PyRuntime` address and type-object addresses) and any reader.
//! - [`ThreadRegistry`]: thread names and native ids the Python side registers.
//! - [`WalkerCounters`]: what was walked, skipped and rejected.
//!
//! # Sampling-path contract
//!
//! Per tick the walker copies every thread state (a uniform random subset of at most 256 is walked
//! when there are more, with weights scaled so totals stay unbiased). A thread whose CPU clock has
//! not moved since its stack was last copied has not run, so its previous stack is reported again
//! (with no CPU time) without reading frames. Each sample's CPU weight is the CPU time its thread
//! used since its previous sample ([`CpuTimeSource`], ADR 0019). Otherwise, on 3.11+, the live part of the thread's data-stack
//! chunk is copied in one read and the frames in it are walked from that copy; frames outside it
//! (generators, coroutines, C-stack shims, 3.9/3.10 frame objects) are read one by one, except that
//! the ones the thread's previous walk had to read are prefetched together in one batched read. The
//! headers of the stack's code objects are then read in one batched read on every tick, and each one
//! proves by content that its address still holds the code object the cache resolved (ADR 0020).
//! A code object seen for the first time has its names and line table copied into the walker's
//! cache (the only allocations, with the per-thread stack buffers: warm-up); afterwards a frame
//! costs a line-table lookup in local memory. Threads (256), frames (128), interpreters (16),
//! string lengths (1024 characters), line tables (256 KiB) and the data-stack copy (64 KiB) are
//! capped. Every failed read or failed validation becomes
//! [`span_profile_core::WalkError::InvalidRead`] and a counter, never a panic.
//!
//! A [`ProcessVmReader`] (and so a [`GuardedReader`]) is bound to the pid it was created in: after
//! `fork`, the child must build a new walker (its sampler thread has to be restarted anyway).
//!
//! ```no_run
//! use span_profile::walker::{PythonVersion, PythonWalker, WalkerConfig};
//!
//! // In the PyO3 module, with `sys.version_info[:2]`:
//! let walker = PythonWalker::for_current_process(PythonVersion::new(3, 12), WalkerConfig::default())?;
//! // Name threads from Python as they start (`threading.get_ident()`, `Thread.name`):
//! walker.registry().set_thread_name(140_000_000_000, "worker-1");
//! let counters = walker.counters().clone(); // read from any thread
//! // ... hand `walker` to the core `Profiler` as its `StackWalker`.
//! # let _ = counters;
//! # Ok::<(), span_profile::walker::SetupError>(())
//! ```

mod code;
mod context;
mod cpu;
mod frames;
mod guarded;
mod layout;
mod linetable;
mod listing;
mod memory;
mod namebuf;
mod object_table;
mod objects;
mod sched;
mod stats;
mod target;
mod threads;
mod walk;

#[cfg(test)]
mod tests;

#[doc(hidden)]
pub mod testing;

pub use context::{
    otel_span_object, ContextCounters, ContextError, ContextStats, ContextTarget, DictLayout,
    HamtTypes, OtelTarget, SlotData, SlotVar, TaskNames,
};
pub use cpu::CpuTimeSource;
pub use guarded::{GuardedReader, ReadMode};
pub use layout::{LayoutError, PythonVersion};
pub use memory::{MemoryReader, ProcessVmReader, ReadError};
pub use object_table::{Insert, SpanObjectTable, OBJECT_PROBE};
pub use objects::TypeAddresses;
pub use stats::{WalkerCounters, WalkerStats};
pub use target::{SetupError, Target};
pub use threads::{
    clear_own_threads, current_thread_id, mark_own_thread, unmark_own_thread, ThreadRegistry,
    MAX_OWN_THREADS,
};
pub use walk::{PythonWalker, WalkerConfig};
