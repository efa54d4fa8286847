//! What a walker counts: [`WalkerCounters`], updated on the sampling path, and their
//! snapshot [`WalkerStats`].

use std::sync::atomic::{AtomicU64, Ordering};

span_profile_core::counters! {
    /// Running totals of a walker, readable from any thread while it samples.
    ///
    /// All counters use `Relaxed` ordering: each is an independent statistic, no other memory
    /// is published through them, and a reader only needs an eventually-current value.
    pub struct WalkerCounters(pub(super)) {
        /// `walk` calls.
        ticks,
        /// Stacks reported.
        samples,
        /// Frames reported.
        frames,
        /// Stacks reported truncated: cut at the depth cap, or torn (`torn_roots`).
        truncated,
        /// Stacks whose chain ended at a frame no thread's outermost frame can be (a generator
        /// or coroutine read while it was resumed or suspended, or the 3.12 trampoline):
        /// reported truncated, so also counted in `truncated`.
        torn_roots,
        /// Frame chains their thread changed while they were read: one reached a frame object
        /// already freed (3.9/3.10), or its leaf frame, read again at once or after the walk,
        /// no longer held the code and caller copied. The chain is read again, twice at most;
        /// one that moves every time keeps the live frames before a freed one, marked
        /// truncated (also in `truncated`), or, with none, is an `unreadable_stacks`.
        moved_chains,
        /// Threads with no Python frame (not reported).
        idle_threads,
        /// Threads beyond the per-tick cap (reported as `WalkError::Skipped`).
        skipped_threads,
        /// Threads or interpreters that failed a read or validation. A thread whose frames
        /// failed is still reported (`unreadable_stacks`); one whose thread state could not be
        /// read (it ended) and an interpreter whose thread list could not be are reported to
        /// the sink as `WalkError::InvalidRead`.
        invalid_reads,
        /// Threads whose frames could not be read (a read or validation failed, the chain
        /// looped, or it changed under every read): reported as a stack of no frames marked
        /// truncated (`[truncated]` alone), with their wall weight, CPU and span, so no time is
        /// lost. Also counted in `invalid_reads`, `samples` and `truncated`.
        unreadable_stacks,
        /// Frame chains that looped back on themselves (also counted in `invalid_reads`).
        cycles,
        /// C-stack shim frames skipped (3.12+).
        shim_frames,
        /// Code objects resolved on first sight (warm-up work).
        code_misses,
        /// Cached code addresses found holding a different code object.
        code_replaced,
        /// Frames reported as `<unknown>` because the code cache was full.
        code_cache_full,
        /// Samples of threads that had not run since their stack was copied, reported from the
        /// walker's copy without reading frames (always off CPU).
        reused_stacks,
        /// Of `reused_stacks`, the samples counted again by the sink as the same thread's
        /// sample of the tick before (`StackSink::repeat`, ADR 0035): neither named nor compared.
        repeated_samples,
        /// CPU-clock reads saved: the thread's scheduler page showed it had not run since its
        /// last read (ADR 0033).
        clock_reads_saved,
        /// Thread states the listing did not read: their thread, and the next one's in the
        /// list, had not run since the last tick's listing, which found them (ADR 0038).
        thread_states_skipped,
        /// Scheduler pages opened (a `perf_event_open` and a mapping each; each closed again
        /// when its thread keeps running or is gone). Many a second mean threads that alternate
        /// between waiting and running, each cycle costing the sampler tens of µs (ADR 0033).
        sched_pages_opened,
        /// `perf_event_open` calls the kernel refused (after three the walker stops asking,
        /// and reads every clock).
        sched_page_failures,
        /// Samples of threads that used CPU since their last sample and held the GIL when
        /// asked whether they run: charged where they stand, whether or not they had a core
        /// (ADR 0019).
        gil_holders_asked,
        /// Thread frame stacks (3.11+ data stack chunks) copied in one read.
        stack_copies,
        /// Frames read one by one (3.9/3.10 frame objects; on 3.11+ frames outside the copied
        /// data stack: generators, coroutines, C-stack shims).
        frame_reads,
        /// Ticks whose reads were guarded in-process copies; the other ticks read through
        /// `process_vm_readv` (by choice, or because another fault handler replaced ours).
        direct_ticks,
    }
    /// A snapshot of [`WalkerCounters`].
    #[non_exhaustive]
    pub struct WalkerStats
}

/// Adds `n` to `c` (`Relaxed`, see [`WalkerCounters`]); skips the write when `n` is 0.
///
/// A load and a store, not a locked add: a walker is the only writer of its counters (it
/// bumps them on the thread that walks, from `&mut self`; the `Arc` it shares gives others a
/// read), so no update can come in between. A locked add would be correct too, but on x86 it
/// is a full barrier that waits for every store before it, and a waiting thread's tick makes
/// several stores that miss the cache (its stack-cache entry, its position in the aggregator,
/// its row), which the barriers would wait for one by one.
pub(super) fn bump(c: &AtomicU64, n: u64) {
    if n != 0 {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
}
