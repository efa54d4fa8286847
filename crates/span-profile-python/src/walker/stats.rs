//! What a walker counts: [`WalkerCounters`], updated on the sampling path, and their
//! snapshot [`WalkerStats`].

use std::sync::atomic::{AtomicU64, Ordering};

/// Running totals of a walker, readable from any thread while it samples.
///
/// All counters use `Relaxed` ordering: each is an independent statistic, no other memory is
/// published through them, and a reader only needs an eventually-current value.
#[derive(Debug, Default)]
pub struct WalkerCounters {
    pub(super) ticks: AtomicU64,
    pub(super) samples: AtomicU64,
    pub(super) frames: AtomicU64,
    pub(super) truncated: AtomicU64,
    pub(super) idle_threads: AtomicU64,
    pub(super) skipped_threads: AtomicU64,
    pub(super) invalid_reads: AtomicU64,
    pub(super) cycles: AtomicU64,
    pub(super) shim_frames: AtomicU64,
    pub(super) code_misses: AtomicU64,
    pub(super) code_replaced: AtomicU64,
    pub(super) code_cache_full: AtomicU64,
    pub(super) reused_stacks: AtomicU64,
    pub(super) stack_copies: AtomicU64,
    pub(super) frame_reads: AtomicU64,
    pub(super) direct_ticks: AtomicU64,
}

/// A snapshot of [`WalkerCounters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalkerStats {
    /// `walk` calls.
    pub ticks: u64,
    /// Stacks reported.
    pub samples: u64,
    /// Frames reported.
    pub frames: u64,
    /// Stacks cut at the depth cap.
    pub truncated: u64,
    /// Threads with no Python frame (not reported).
    pub idle_threads: u64,
    /// Threads beyond the per-tick cap (reported as `WalkError::Skipped`).
    pub skipped_threads: u64,
    /// Threads or interpreters that failed a read or validation (`WalkError::InvalidRead`).
    pub invalid_reads: u64,
    /// Frame chains that looped back on themselves (also counted in `invalid_reads`).
    pub cycles: u64,
    /// C-stack shim frames skipped (3.12+).
    pub shim_frames: u64,
    /// Code objects resolved on first sight (warm-up work).
    pub code_misses: u64,
    /// Cached code addresses found holding a different code object.
    pub code_replaced: u64,
    /// Frames reported as `<unknown>` because the code cache was full.
    pub code_cache_full: u64,
    /// Samples of threads that had not run since their stack was copied, reported from the
    /// walker's copy without reading frames (always off CPU).
    pub reused_stacks: u64,
    /// Thread frame stacks (3.11+ data stack chunks) copied in one read.
    pub stack_copies: u64,
    /// Frames read one by one (3.9/3.10 frame objects; on 3.11+ frames outside the copied data
    /// stack: generators, coroutines, C-stack shims).
    pub frame_reads: u64,
    /// Ticks whose reads were guarded in-process copies; the other ticks read through
    /// `process_vm_readv` (by choice, or because another fault handler replaced ours).
    pub direct_ticks: u64,
}

impl WalkerCounters {
    /// Current values.
    pub fn snapshot(&self) -> WalkerStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WalkerStats {
            ticks: g(&self.ticks),
            samples: g(&self.samples),
            frames: g(&self.frames),
            truncated: g(&self.truncated),
            idle_threads: g(&self.idle_threads),
            skipped_threads: g(&self.skipped_threads),
            invalid_reads: g(&self.invalid_reads),
            cycles: g(&self.cycles),
            shim_frames: g(&self.shim_frames),
            code_misses: g(&self.code_misses),
            code_replaced: g(&self.code_replaced),
            code_cache_full: g(&self.code_cache_full),
            reused_stacks: g(&self.reused_stacks),
            stack_copies: g(&self.stack_copies),
            frame_reads: g(&self.frame_reads),
            direct_ticks: g(&self.direct_ticks),
        }
    }
}

/// Adds `n` to `c` (`Relaxed`, see [`WalkerCounters`]); skips the write when `n` is 0.
pub(super) fn bump(c: &AtomicU64, n: u64) {
    if n != 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}
