//! [`PythonWalker`]: walks every Python thread's stack by reading interpreter memory, without
//! the GIL.

use std::sync::Arc;

use span_profile_core::internal::XorShift;
use span_profile_core::{
    ExecutionKey, Frame, RawFrame, RawSample, StackSink, StackWalker, WalkError,
};

use super::code::{CodeCache, CopyLimits};
use super::context::{ContextCounters, ContextReader, ContextTarget, TaskNames};
use super::cpu::{cpu_time_ns, monotonic_ns, CpuTimeSource, CpuTracker};
use super::frames::{FrameSource, FrameWalk, StackEnd, ThreadFailure};
use super::guarded::{GuardedReader, ReadMode};
use super::layout::{
    check_debug_offsets, GilAt, Layout, LayoutError, PythonVersion, CONTEXT_VARS, GIL_LAST_HOLDER,
    GIL_LOCKED,
};
use super::listing::{LastListing, ThreadRef};
use super::memory::{field_i32, field_u64, prefetch, MemoryReader, ProcessVmReader, ReadError};
use super::namebuf::NameBuf;
use super::object_table::SpanObjectTable;
use super::sched::{ClockRead, SchedWatch};
use super::stats::{bump, WalkerCounters};
use super::target::{SetupError, Target};
use super::threads::is_own_thread;
use super::threads::{
    tid_from_pthread, verify_pthread_tid_offset, StackCache, ThreadRegistry, WalkedStack,
};

/// Caps and options of a [`PythonWalker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalkerConfig {
    /// Frames per stack; deeper stacks are cut (outer frames dropped) and marked truncated.
    pub max_depth: usize,
    /// Threads walked per tick. Beyond it a uniform random subset (reservoir sampling) is
    /// walked, the rest are reported as skipped, and the walked samples' weights are scaled by
    /// threads seen / threads walked (randomly rounded to an integer) so totals stay unbiased.
    pub max_threads: usize,
    /// Interpreters followed per tick.
    pub max_interpreters: usize,
    /// Characters kept of a function or file name.
    pub max_string_chars: usize,
    /// Largest line table copied.
    pub max_linetable_bytes: usize,
    /// Most distinct code objects remembered; later ones are reported as `<unknown>`.
    pub code_cache_capacity: usize,
    /// Where each thread's CPU time is read from (each sample's CPU weight, ADR 0019).
    pub cpu_time: CpuTimeSource,
    /// Frames of code whose file name starts with this are left out of every stack: the
    /// agent sets it to its own package's directory, so no frame of ours shows (ADR 0020).
    pub hidden_file_prefix: Option<&'static str>,
    /// With [`CpuTimeSource::ThreadClock`], replace the CPU-clock read of a thread that has
    /// waited a while by a load from a `perf_event_open` page that shows whether the kernel has
    /// scheduled it in since (ADR 0033). On by default; where the kernel refuses, clocks are
    /// read as without it.
    pub sched_watch: bool,
}

impl Default for WalkerConfig {
    fn default() -> Self {
        Self {
            max_depth: 128,
            max_threads: 256,
            max_interpreters: 16,
            max_string_chars: 1024,
            max_linetable_bytes: 256 * 1024,
            code_cache_capacity: 64 * 1024,
            cpu_time: CpuTimeSource::ThreadClock,
            hidden_file_prefix: None,
            sched_watch: true,
        }
    }
}

impl WalkerConfig {
    /// Sets [`WalkerConfig::max_depth`] (at least 1).
    pub fn with_max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth.max(1);
        self
    }
    /// Sets [`WalkerConfig::max_threads`] (at least 1).
    pub fn with_max_threads(mut self, threads: usize) -> Self {
        self.max_threads = threads.max(1);
        self
    }
    /// Sets [`WalkerConfig::max_string_chars`].
    pub fn with_max_string_chars(mut self, chars: usize) -> Self {
        self.max_string_chars = chars.max(1);
        self
    }
    /// Sets [`WalkerConfig::code_cache_capacity`].
    pub fn with_code_cache_capacity(mut self, entries: usize) -> Self {
        self.code_cache_capacity = entries;
        self
    }
    /// Sets [`WalkerConfig::cpu_time`].
    pub fn with_cpu_time(mut self, source: CpuTimeSource) -> Self {
        self.cpu_time = source;
        self
    }
    /// Sets [`WalkerConfig::sched_watch`].
    pub fn with_sched_watch(mut self, on: bool) -> Self {
        self.sched_watch = on;
        self
    }
    /// Sets [`WalkerConfig::hidden_file_prefix`].
    pub fn with_hidden_file_prefix(mut self, prefix: &'static str) -> Self {
        self.hidden_file_prefix = Some(prefix);
        self
    }
}

/// Most threads listed per interpreter list walk (the reservoir draws from these); threads past
/// it are neither walked nor counted.
const MAX_LISTED: usize = 8192;
/// How many skipped threads are reported one by one past the cap.
const MAX_SKIPPED_COUNTED: usize = 1024;
/// A thread that used less than 1/this of the time since the previous tick is not asked
/// whether it runs now: its CPU stays with its sample (see `walk_thread`).
const MIN_CPU_SHARE_ASKED: u64 = 32;
/// Largest thread-state copy (3.11's data-stack fields end at 312).
const TSTATE_BUF: usize = 512;
/// Walks of one thread's chain in one tick when its thread keeps changing it as it is read
/// (ADR 0020, decision 6). The whole-stacks spec on 3.12 dropped 22–36 samples a run (all
/// invalid reads, 6–16 of them without the move checks) with two walks and the leaf read again
/// only after the walk, 13–22 with three walks and the leaf read again at once and after.
const WALK_ATTEMPTS: usize = 3;

/// Walks the Python threads of one CPython interpreter (3.9–3.13, GIL builds, x86_64 Linux) by
/// copying its memory through a [`MemoryReader`]. See the [module docs](super) for the contract.
#[derive(Debug)]
pub struct PythonWalker<R> {
    reader: R,
    layout: &'static Layout,
    target: Target,
    config: WalkerConfig,
    cache: CodeCache,
    registry: ThreadRegistry,
    counters: Arc<WalkerCounters>,
    cpu: CpuTracker,
    /// Which waiting threads' clock reads can be saved (ADR 0033).
    sched: SchedWatch,
    pthread_tid_ok: bool,
    /// Whether the GIL's holder can be read ([`PythonWalker::check_gil_holder`]).
    gil_readable: bool,
    name: NameBuf,
    /// The running context's span and task (`super::context`).
    pub(crate) ctx: ContextReader,
    /// Threads chosen for this tick (reservoir, `max_threads` long at most).
    chosen: Vec<ThreadRef>,
    /// The first interpreter's thread list as the last tick found it: when reads are system
    /// calls, the next listing reads its states in one batched read
    /// ([`MemoryReader::read_scatter`]) and follows the list through the copies for as long as
    /// it is unchanged; and a state whose thread, and the next one's, have not run since is not
    /// read again (ADR 0038).
    last: LastListing,
    /// The states of `last` a batched read copies (those this tick reads), their copies,
    /// `tstate_read_size()` bytes each, and which succeeded.
    batch_addrs: Vec<u64>,
    listed_buf: Vec<u8>,
    listed_ok: Vec<bool>,
    /// The buffers of the frame walk of the thread being walked (`super::frames`).
    frame_walk: FrameWalk,
    stacks: StackCache,
    /// The reservoir's and the weights' randomness.
    rng: XorShift,
    tick: u64,
    /// The thread registry's generation at this tick's start, and whether it was the same at
    /// the last tick's: then no name changed since, and a thread that has not run may have its
    /// sample counted again by the sink without being named (ADR 0035).
    names_generation: u64,
    names_stable: bool,
    /// This tick's reads are in-process copies ([`MemoryReader::begin_tick`]): then the thread
    /// list is not batched, each thread state is copied straight to where it is parsed, and the
    /// batch buffer (`tstate_read_size()` bytes a thread, written and read again) stays out of
    /// the cache lines a tick touches.
    direct: bool,
    /// The part of a thread state the listing copies when reads are direct.
    tstate_span: std::ops::Range<usize>,
}

impl PythonWalker<GuardedReader> {
    /// A walker of the interpreter this process runs (the PyO3 module calls this with
    /// `sys.version_info[:2]`), reading with guarded in-process copies
    /// ([`ReadMode::Guarded`]). Probes `process_vm_readv` (the fallback) and, on 3.13,
    /// `_Py_DebugOffsets`.
    pub fn for_current_process(
        version: PythonVersion,
        config: WalkerConfig,
    ) -> Result<Self, SetupError> {
        Self::for_current_process_with(version, config, ReadMode::Guarded)
    }

    /// [`PythonWalker::for_current_process`] with an explicit way of reading memory.
    pub fn for_current_process_with(
        version: PythonVersion,
        config: WalkerConfig,
        mode: ReadMode,
    ) -> Result<Self, SetupError> {
        let reader = GuardedReader::new(mode)?;
        let target = Target::current_process(version)?;
        Self::new(
            reader,
            target,
            config.with_cpu_time(CpuTimeSource::ThreadClock),
        )
    }

    /// Whether this tick's reads are guarded in-process copies (false: `process_vm_readv`,
    /// because the mode says so or another fault handler replaced ours).
    pub fn reads_directly(&self) -> bool {
        self.reader.is_direct()
    }
}

impl<R: MemoryReader> PythonWalker<R> {
    /// A walker over `reader` for the interpreter described by `target`. Fails if the version is
    /// unsupported, the 3.13 debug offsets disagree with ours, or no interpreter is found.
    pub fn new(reader: R, target: Target, config: WalkerConfig) -> Result<Self, SetupError> {
        let layout = Layout::for_version(target.version)
            .ok_or(LayoutError::UnsupportedVersion(target.version))?;
        check_debug_offsets(&reader, target.runtime, layout)?;
        let head = if target.interpreter != 0 {
            target.interpreter
        } else {
            let mut b = [0u8; 8];
            reader.read(
                target
                    .runtime
                    .wrapping_add(layout.runtime_interpreters_head as u64),
                &mut b,
            )?;
            u64::from_le_bytes(b)
        };
        if head == 0 {
            return Err(SetupError::NoInterpreter);
        }
        let pthread_tid_ok = match config.cpu_time {
            // The tid offset is checked on this process's own pthread; for another process it
            // is assumed to be the same glibc (the tests' case).
            CpuTimeSource::ThreadClock | CpuTimeSource::ProcFs { .. } => {
                ProcessVmReader::new().is_ok_and(|me| verify_pthread_tid_offset(&me))
            }
            _ => false,
        };
        Ok(Self {
            reader,
            layout,
            target,
            cache: CodeCache::new(config.code_cache_capacity, config.hidden_file_prefix),
            registry: ThreadRegistry::new(),
            counters: Arc::new(WalkerCounters::default()),
            // Baselines for more threads than one tick walks: the threads a tick leaves out keep
            // theirs, and are charged what they used in between on their next sample.
            cpu: CpuTracker::new(config.max_threads.saturating_mul(4)),
            sched: SchedWatch::new(
                config.max_threads.saturating_mul(2),
                config.sched_watch && config.cpu_time == CpuTimeSource::ThreadClock,
            ),
            pthread_tid_ok,
            gil_readable: false,
            name: NameBuf::new(),
            ctx: ContextReader::new(layout.version),
            chosen: Vec::with_capacity(config.max_threads),
            last: LastListing::default(),
            batch_addrs: Vec::new(),
            listed_buf: Vec::new(),
            listed_ok: Vec::new(),
            frame_walk: FrameWalk::new(layout, config.max_depth),
            stacks: StackCache::new(config.max_threads.saturating_mul(2), config.max_depth),
            rng: XorShift::new(0x9e37_79b9_7f4a_7c15 ^ (target.runtime | 1)),
            tick: 0,
            names_generation: u64::MAX,
            names_stable: false,
            direct: false,
            tstate_span: layout.tstate_list_span(),
            config,
        })
    }

    /// Checks that the GIL's holder is read right, with the GIL held by the thread whose
    /// thread state is at `tstate` (the caller's own, from `PyThreadState_Get`): the layout's
    /// GIL must say it is locked and held by `tstate`. Only then does the walker use it to
    /// tell a thread that was preempted while it ran Python from one that waits (ADR 0019).
    /// Returns whether it holds.
    pub fn check_gil_holder(&mut self, tstate: u64) -> bool {
        let interp = {
            let mut b = [0u8; 8];
            let at = tstate.wrapping_add(self.layout.tstate_interp as u64);
            self.reader.read(at, &mut b).map(|()| u64::from_le_bytes(b))
        };
        self.gil_readable = true;
        let ok = interp.is_ok_and(|interp| self.holds_gil(tstate, interp));
        self.gil_readable = ok;
        ok
    }

    /// Whether the thread state at `tstate` (of the interpreter at `interp`) holds the GIL
    /// now: the GIL is locked and it was the last to take it. `false` when that cannot be read.
    fn holds_gil(&self, tstate: u64, interp: u64) -> bool {
        if !self.gil_readable {
            return false;
        }
        let gil = match self.layout.gil {
            GilAt::Runtime(off) => self.target.runtime.wrapping_add(off as u64),
            GilAt::InterpPointer(off) => {
                let mut b = [0u8; 8];
                match self.reader.read(interp.wrapping_add(off as u64), &mut b) {
                    Ok(()) => u64::from_le_bytes(b),
                    Err(_) => return false,
                }
            }
        };
        let mut b = [0u8; GIL_LOCKED + 4];
        if gil == 0 || self.reader.read(gil, &mut b).is_err() {
            return false;
        }
        field_i32(&b, GIL_LOCKED) != 0 && field_u64(&b, GIL_LAST_HOLDER) == tstate
    }

    /// Shares a thread registry (names, native ids) filled by the Python side.
    pub fn with_registry(mut self, registry: ThreadRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// The thread registry; clone it to name threads from other threads.
    pub fn registry(&self) -> &ThreadRegistry {
        &self.registry
    }

    /// The counters; clone the `Arc` to read them while the walker samples elsewhere.
    pub fn counters(&self) -> &Arc<WalkerCounters> {
        &self.counters
    }

    /// The version being walked.
    pub fn version(&self) -> PythonVersion {
        self.layout.version
    }

    /// Distinct code objects resolved so far.
    pub fn code_cache_len(&self) -> usize {
        self.cache.len()
    }

    /// Reads each sampled thread's span (and asyncio task name) from the context running on
    /// it (ADR 0011; the design is in `walker/context/`'s module docs). Samples whose context
    /// cannot be read carry no span.
    pub fn with_context(mut self, target: ContextTarget) -> Self {
        self.ctx.set_target(target);
        self
    }

    /// The span-object table that [`OtelTarget`](super::OtelTarget) lookups resolve span
    /// objects in (filled by the span processor, by object address; it holds a reference to
    /// every object it lists, so an address found there is that very span, alive).
    pub fn with_span_objects(mut self, table: Arc<SpanObjectTable>) -> Self {
        self.ctx.set_span_objects(table);
        self
    }

    /// The task-name table the task factory fills; clone it to share.
    pub fn task_names(&self) -> &TaskNames {
        self.ctx.names()
    }

    /// Counters of context reads.
    pub fn context_counters(&self) -> &Arc<ContextCounters> {
        self.ctx.counters()
    }

    fn fail(&self, sink: &mut dyn StackSink, f: ThreadFailure) {
        if let ThreadFailure::Cycle = f {
            bump(&self.counters.cycles, 1);
        }
        bump(&self.counters.invalid_reads, 1);
        sink.error(WalkError::InvalidRead);
    }

    /// A thread whose frames could not be read (a read or a validation failed, the chain
    /// looped, or it changed under every read) is reported all the same: a stack of no frames
    /// marked truncated (`[truncated]` alone), with its wall weight, the CPU it used since its
    /// last sample and the span it is in, so that neither its time nor its span's is lost.
    /// The failure is counted (`invalid_reads`, `unreadable_stacks`). Nothing is stored for
    /// it: its next sample is walked in full.
    fn unreadable(
        &mut self,
        sink: &mut dyn StackSink,
        t: &ThreadRef,
        f: ThreadFailure,
        used_ns: u64,
        weight: u32,
    ) {
        if let ThreadFailure::Cycle = f {
            bump(&self.counters.cycles, 1);
        }
        bump(&self.counters.invalid_reads, 1);
        bump(&self.counters.unreadable_stacks, 1);
        bump(&self.counters.samples, 1);
        bump(&self.counters.truncated, 1);
        let key = ExecutionKey::thread(t.thread_id);
        let sample = RawSample::new(key, &[], self.name.as_str())
            .with_truncated(true)
            .with_cpu_ns(used_ns)
            .with_weight(weight);
        self.ctx.emit(&self.reader, t.tstate, sink, sample);
    }

    fn walk_all(&mut self, sink: &mut dyn StackSink) {
        let listed = self.list_threads();
        let (seen, failure) = match listed {
            Ok(seen) => (seen, None),
            Err((seen, f)) => (seen, Some(f)),
        };
        let k = self.chosen.len();
        let skipped = seen.saturating_sub(k);
        for _ in 0..skipped.min(MAX_SKIPPED_COUNTED) {
            bump(&self.counters.skipped_threads, 1);
            sink.error(WalkError::Skipped);
        }
        // Each walked thread stands for seen / k threads; the fraction is rounded at random so
        // the expected weight is exact.
        let (base, rem) = match k {
            0 => (1, 0),
            _ => (seen / k, (seen % k) as u64),
        };
        for i in 0..k {
            let Some(&t) = self.chosen.get(i) else { break };
            let extra = rem != 0 && self.rng.below(k as u64) < rem;
            let weight = u32::try_from(base + usize::from(extra)).unwrap_or(u32::MAX);
            self.walk_thread(sink, t, weight);
        }
        if let Some(f) = failure {
            self.fail(sink, f);
        }
    }

    /// Asks for the lines of the last listing's thread states that this listing will copy
    /// (not those it takes from the last listing: [`LastListing::will_read`];
    /// [`crate::walker::memory::prefetch`]): a thread state lives apart from the others, and
    /// copying one costs mostly the wait for its memory, so the waits overlap instead of
    /// following one another (with 120 parked threads, one copy each a tick was a fifth of the
    /// sampler's time by `perf record`). Addresses that are no longer thread states cost a
    /// wasted hint, nothing else.
    fn prefetch_thread_states(&self) {
        let span = &self.tstate_span;
        for (i, tstate) in self.last.states().enumerate() {
            if !self.last.will_read(i) {
                continue;
            }
            let mut at = span.start;
            while at < span.end {
                prefetch(tstate.wrapping_add(at as u64));
                at += 64;
            }
            prefetch(tstate.wrapping_add(span.end as u64 - 1));
        }
    }

    /// Reads every thread state of every interpreter (bounded) and keeps a uniform sample of
    /// `max_threads` of them in `self.chosen` (reservoir sampling, Algorithm R). Returns how
    /// many threads were seen, and the failure that stopped the listing early, if any.
    fn list_threads(&mut self) -> Result<usize, (usize, ThreadFailure)> {
        let l = self.layout;
        self.chosen.clear();
        let mut seen = 0usize;
        let mut interp = if self.target.interpreter != 0 {
            self.target.interpreter
        } else {
            let mut b = [0u8; 8];
            match self.reader.read(
                self.target
                    .runtime
                    .wrapping_add(l.runtime_interpreters_head as u64),
                &mut b,
            ) {
                Ok(()) => u64::from_le_bytes(b),
                Err(_) => return Err((seen, ThreadFailure::Invalid)),
            }
        };
        let mut tbuf = [0u8; TSTATE_BUF];
        let size = l.tstate_read_size();
        let cap = self.config.max_threads.max(1);
        let mut skipped = 0u64;
        for n_interp in 0..self.config.max_interpreters {
            if interp == 0 {
                break;
            }
            let mut b = [0u8; 8];
            if self
                .reader
                .read(interp.wrapping_add(l.interp_threads_head as u64), &mut b)
                .is_err()
            {
                return Err((seen, ThreadFailure::Invalid));
            }
            let mut tstate = u64::from_le_bytes(b);
            let mut prev_tstate = 0u64;
            // The first interpreter's list as it was at the last tick: the states this tick
            // reads of it are copied in one go when reads are system calls, each copy used only
            // while the list is followed to the same address; and a state whose thread, and the
            // next one's, have not run since is taken from it unread (ADR 0038).
            let first = n_interp == 0;
            let mut batched = 0usize;
            if first && !self.direct && self.last.states().next() == Some(tstate) {
                self.batch_addrs.clear();
                let last = &self.last;
                self.batch_addrs.extend(
                    (last.states().enumerate())
                        .filter(|&(i, _)| last.will_read(i))
                        .map(|(_, a)| a),
                );
                batched = self.batch_addrs.len();
                self.listed_buf.resize(batched * size, 0);
                self.listed_ok.resize(batched, false);
                self.reader.read_scatter(
                    &self.batch_addrs,
                    size,
                    &mut self.listed_buf,
                    &mut self.listed_ok,
                );
            }
            let mut at = 0usize;
            let mut pos = if first {
                self.last.start(tstate, interp)
            } else {
                None
            };
            while tstate != 0 {
                if seen >= MAX_LISTED {
                    return Ok(seen);
                }
                let (t, next) = match first.then(|| self.last.skippable(pos)).flatten() {
                    Some(known) => {
                        skipped += 1;
                        known
                    }
                    None => {
                        let tb = tbuf.get_mut(..size).unwrap_or_default();
                        let copy = (at < batched
                            && self.batch_addrs.get(at) == Some(&tstate)
                            && self.listed_ok.get(at) == Some(&true))
                        .then(|| self.listed_buf.get(at * size..(at + 1) * size))
                        .flatten();
                        match copy {
                            Some(c) if c.len() == tb.len() => {
                                tb.copy_from_slice(c);
                                at += 1;
                            }
                            _ => {
                                batched = 0; // the list changed here: read the rest one by one
                                if read_tstate(
                                    &self.reader,
                                    self.direct,
                                    &self.tstate_span,
                                    tstate,
                                    tb,
                                )
                                .is_err()
                                {
                                    return Err((seen, ThreadFailure::Invalid));
                                }
                            }
                        }
                        if field_u64(tb, l.tstate_interp) != interp {
                            // Torn list or a wrong offset: do not follow `next` from garbage.
                            return Err((seen, ThreadFailure::Invalid));
                        }
                        // The frame pointer and data-stack bounds are read when the thread is
                        // walked.
                        let t = ThreadRef {
                            tstate,
                            interp,
                            thread_id: field_u64(tb, l.tstate_thread_id),
                            native: l.tstate_native_thread_id.map_or(0, |o| field_u64(tb, o)),
                            ..ThreadRef::default()
                        };
                        (t, field_u64(tb, l.tstate_next))
                    }
                };
                if first {
                    self.last.push(&t);
                    pos = self.last.follow(pos, next);
                }
                // The profiler's own threads are not the application's: neither sampled nor
                // counted, so the others' weights stay exact (ADR 0029).
                if !is_own_thread(t.thread_id) {
                    seen += 1;
                    if self.chosen.len() < cap {
                        self.chosen.push(t);
                    } else {
                        let j = self.rng.below(seen as u64) as usize;
                        if let Some(slot) = self.chosen.get_mut(j) {
                            *slot = t;
                        }
                    }
                }
                if next != 0 && (next == tstate || next == prev_tstate) {
                    return Err((seen, ThreadFailure::Cycle));
                }
                prev_tstate = tstate;
                tstate = next;
            }
            if first {
                self.last.complete(self.tick);
                bump(&self.counters.thread_states_skipped, skipped);
            }
            if self.target.interpreter != 0 {
                break;
            }
            match self
                .reader
                .read(interp.wrapping_add(l.interp_next as u64), &mut b)
            {
                Ok(()) => interp = u64::from_le_bytes(b),
                Err(_) => return Err((seen, ThreadFailure::Invalid)),
            }
        }
        Ok(seen)
    }

    /// Before a thread's frames are copied: when contexts are read, re-reads its frame
    /// pointer (and data-stack bounds) together with `tstate->context` and that context's
    /// variables, in one syscall. The span read after the copy is then compared with a
    /// context read at the same instant as the frame pointer the copy starts from, so a
    /// span entered or left in between drops the sample instead of mislabelling it.
    ///
    /// The thread's span-boundary count is read first of all, so that a span started or
    /// ended at any point of the copy drops the sample too.
    ///
    /// The listing does not read the frame pointer and data-stack bounds (a thread that has
    /// not run needs neither): they are read here, after the thread's CPU clock, for every
    /// thread walked. Returns false when they could not be read.
    fn refresh_before_walk(&mut self, t: &mut ThreadRef) -> bool {
        let boundaries = self.ctx.span_boundaries(t.thread_id);
        let found = self.ctx.look_before(&self.reader, t.tstate);
        let read = self.refresh_pointers(t);
        self.ctx.expect_after(found, boundaries);
        read
    }

    /// [`Self::refresh_before_walk`] but for the full lookup before it.
    fn refresh_pointers(&mut self, t: &mut ThreadRef) -> bool {
        let l = self.layout;
        let Some(ctx_off) = self.ctx.context_offset() else {
            self.ctx.forget_before();
            return self.read_pointers(t);
        };
        let (lo, hi) = pointer_span(l, Some(ctx_off));
        let mut buf = [0u8; TSTATE_BUF];
        let Some(b) = buf.get_mut(..hi + 8 - lo) else {
            // Fields too far apart for one read (no known layout): the context on its own.
            self.ctx.before(&self.reader, t.tstate);
            return self.read_pointers(t);
        };
        let guess = self.ctx.last_context(t.tstate);
        let mut v = [0u8; 8];
        let (read, vars) = match guess {
            Some(ctx) => self.reader.read_pair(
                t.tstate.wrapping_add(lo as u64),
                b,
                ctx.wrapping_add(CONTEXT_VARS as u64),
                &mut v,
            ),
            None => (
                self.reader.read(t.tstate.wrapping_add(lo as u64), b),
                Err(ReadError::Invalid),
            ),
        };
        if read.is_err() {
            self.ctx.forget_before();
            return self.read_pointers(t);
        }
        let ctx = field_u64(b, ctx_off - lo);
        take_pointers(l, t, b, lo);
        let vars = vars.is_ok().then(|| u64::from_le_bytes(v));
        self.ctx.observe_before(t.tstate, ctx, vars);
        true
    }

    /// Reads the thread's frame pointer and data-stack bounds, in one read; false if it failed.
    fn read_pointers(&self, t: &mut ThreadRef) -> bool {
        let l = self.layout;
        let (lo, hi) = pointer_span(l, None);
        let mut buf = [0u8; TSTATE_BUF];
        let Some(b) = buf.get_mut(..hi + 8 - lo) else {
            return false;
        };
        if self
            .reader
            .read(t.tstate.wrapping_add(lo as u64), b)
            .is_err()
        {
            return false;
        }
        take_pointers(l, t, b, lo);
        true
    }

    fn walk_thread(&mut self, sink: &mut dyn StackSink, mut t: ThreadRef, weight: u32) {
        // The name (and, before 3.11, the native id) from the registry; on 3.11+ the tid is in
        // the thread state, and the name is looked up only when a sample is built with it.
        let tid_in_state = tid_in_state(t.native).is_some();
        let registered_native = if tid_in_state {
            0
        } else {
            self.registry.lookup(t.thread_id, &mut self.name)
        };
        let named = !tid_in_state;
        // The CPU clock is read before anything of the thread's state (the frame pointer
        // included): if the thread runs after it, while the frames are copied, the next tick
        // sees the clock advanced and copies them again rather than reusing a torn copy.
        let tid = self.tid_of(t.thread_id, t.native, registered_native);
        let clock = tid.map(|tid| self.cpu_clock(t.thread_id, t.tstate, tid));
        let cpu_ns = clock.and_then(ClockRead::ns);
        // The CPU time the thread used since its previous sample: this sample's CPU weight.
        let used_ns = match (tid, clock) {
            // Not run since its last real read: nothing, and its baseline stays where that
            // read put it, so a later read is charged everything since (ADR 0033).
            (Some(_), Some(ClockRead::Unmoved(_))) => 0,
            (Some(tid), Some(ClockRead::Read(Some(ns)))) => self.cpu.observe(t.thread_id, tid, ns),
            _ => 0,
        };
        if let (Some(tid), Some(ns)) = (tid, cpu_ns) {
            // A thread whose CPU clock has not moved since its stack was copied has not run, so
            // its Python stack is the same: report the copy without reading frames. Nor has it
            // entered another context or set a variable: the span and task found with the copy
            // still hold, and its context is not read again.
            if let Some(u) = self
                .stacks
                .unchanged(t.thread_id, t.tstate, tid, ns, self.tick)
            {
                let key = ExecutionKey::thread(t.thread_id);
                // Nothing of the sample can have changed since the last: not the stack or the
                // span (the thread has not run), nor its name (the registry has not changed).
                // A task's name is kept elsewhere, so a sample with a task is built again.
                let repeated = self.names_stable && !u.has_task && sink.repeat(key, weight);
                // Not read for a repeat: the context lies past the entry's first line.
                let resolution = if repeated { None } else { u.resolution() };
                // An entry is reusable only with its context (`CachedStack::set_resolution`);
                // were one ever without, the thread is walked in full below, not dropped.
                if repeated || resolution.is_some() {
                    bump(&self.counters.reused_stacks, 1);
                    bump(&self.counters.samples, 1);
                    bump(&self.counters.frames, u.frames.len() as u64);
                    if u.truncated {
                        bump(&self.counters.truncated, 1);
                    }
                }
                if repeated {
                    bump(&self.counters.repeated_samples, 1);
                    return;
                }
                if let Some(r) = resolution {
                    if !named {
                        self.registry.lookup(t.thread_id, &mut self.name);
                    }
                    let sample = RawSample::new(key, u.frames, self.name.as_str())
                        .with_truncated(u.truncated)
                        .with_weight(weight);
                    self.ctx.emit_resolved(r, sink, sample);
                    return;
                }
            }
        }
        if !named {
            self.registry.lookup(t.thread_id, &mut self.name);
        }
        // When the clock was read, near enough (the lookups above are a few loads, the name's
        // a lock attempt or a few): `runs_now` measures from here, over the frames' copy. Not
        // read for a thread reported from its copy.
        let cpu_read_at = monotonic_ns();
        if !self.refresh_before_walk(&mut t) {
            return self.fail(sink, ThreadFailure::Invalid);
        }
        // A chain the thread changed while it was read (a freed frame, a leaf rewritten) is
        // read again from where the thread stands now, twice at most. Each read is proven on
        // its own: the context is looked up again before it, and checked after the last, so
        // the span proof spans the walk kept and no more. (One lookup before the first read
        // let the proof span every read: long enough, through `process_vm_readv` on 3.9, for
        // a whole span to start and end unseen, ADR 0020 decisions 3 and 6.)
        let mut end = StackEnd::Moved;
        for attempt in 0..WALK_ATTEMPTS {
            if attempt > 0 && !self.refresh_before_walk(&mut t) {
                return self.fail(sink, ThreadFailure::Invalid);
            }
            end = match self.walk_chain(&t) {
                Ok(Some(end)) => end,
                Ok(None) => {
                    bump(&self.counters.idle_threads, 1);
                    return;
                }
                Err(f) => return self.unreadable(sink, &t, f, used_ns, weight),
            };
            if end != StackEnd::Moved {
                break;
            }
            bump(&self.counters.moved_chains, 1);
        }
        if end == StackEnd::Moved && self.frame_walk.frames.is_empty() {
            // Changed under every read, with nothing of it proven.
            return self.unreadable(sink, &t, ThreadFailure::Invalid, used_ns, weight);
        }
        // A torn root (a generator's frame read while it was linked or unlinked) keeps its
        // sample, CPU and span, marked truncated: its callers are missing (ADR 0020).
        let truncated = end != StackEnd::Whole;
        if self.frame_walk.frames.is_empty() {
            bump(&self.counters.idle_threads, 1);
            return;
        }
        // A thread whose clock did not move while its frames were copied, and that does not hold
        // the GIL, is off CPU: it used its CPU since the last sample elsewhere, and that CPU
        // goes to the stack it was last seen running in, if that was under the context its last
        // walk found (ADR 0019; else the span changed in between, and the CPU stays here). That
        // is asked (a GIL read, then a system call) only of a thread that used enough since its
        // last sample for it to matter: one that woke for a moment, in the frame it waits in,
        // is charged there (`None`: not asked).
        let asked = used_ns > 0
            && used_ns.saturating_mul(MIN_CPU_SHARE_ASKED) >= self.cpu.since_previous_tick();
        // A thread that holds the GIL runs Python where it stands, whether or not it has a
        // core now: one that shares a core with the sampler is preempted at every tick, and
        // would never be seen running.
        let running = asked.then(|| {
            let holds = self.holds_gil(t.tstate, t.interp);
            bump(&self.counters.gil_holders_asked, u64::from(holds));
            holds || self.runs_now(tid, cpu_ns, cpu_read_at)
        });
        let elsewhere = match (tid, running) {
            (Some(tid), Some(false)) => self
                .stacks
                .last_running(t.thread_id, t.tstate, tid)
                .is_some(),
            _ => false,
        };
        let running = running == Some(true);
        bump(&self.counters.samples, 1);
        bump(&self.counters.frames, self.frame_walk.frames.len() as u64);
        if truncated {
            bump(&self.counters.truncated, 1);
        }
        if end == StackEnd::Torn {
            bump(&self.counters.torn_roots, 1);
        }
        let key = ExecutionKey::thread(t.thread_id);
        let sample = RawSample::new(key, &self.frame_walk.frames, self.name.as_str())
            .with_truncated(truncated)
            .with_cpu_ns(if elsewhere { 0 } else { used_ns })
            .with_weight(weight);
        let resolution = self.ctx.emit(&self.reader, t.tstate, sink, sample);
        // Charged before this copy is stored: whether the running stack still holds is judged
        // against the thread's previous walk (`StackCache::last_running`).
        if elsewhere {
            self.charge_last_running(sink, &t, tid, used_ns);
        }
        if let (Some(tid), Some(ns)) = (tid, cpu_ns) {
            let copy = WalkedStack {
                frames: &self.frame_walk.frames,
                truncated,
                outside: self
                    .frame_walk
                    .outside
                    .get(..self.frame_walk.outside_n)
                    .unwrap_or_default(),
                running,
                resolution,
            };
            self.stacks
                .store((t.thread_id, t.tstate, tid, ns), copy, self.tick);
        }
    }

    /// Walks the frame chain of `t` from the frame pointer last read into it, into
    /// `self.frame_walk`. `None`: the thread has no Python frame.
    fn walk_chain(&mut self, t: &ThreadRef) -> Result<Option<StackEnd>, ThreadFailure> {
        let mut frame = t.frame_field;
        if let Some(off) = self.layout.cframe_current_frame {
            if frame != 0 {
                let mut b = [0u8; 8];
                self.reader.read(frame.wrapping_add(off as u64), &mut b)?;
                frame = u64::from_le_bytes(b);
            }
        }
        if frame == 0 {
            return Ok(None);
        }
        self.frame_walk.prefetch_n =
            self.stacks
                .outside(t.thread_id, t.tstate, &mut self.frame_walk.prefetch_addrs);
        let mut src = FrameSource {
            reader: &self.reader,
            layout: self.layout,
            types: &self.target.types,
            max_depth: self.config.max_depth,
            limits: CopyLimits {
                max_string_chars: self.config.max_string_chars,
                max_linetable_bytes: self.config.max_linetable_bytes,
            },
            cache: &mut self.cache,
            counters: &self.counters,
        };
        self.frame_walk
            .walk_frames(&mut src, frame, t.chunk, t.top)
            .map(Some)
    }

    /// The CPU clock of a thread: read from the kernel, or the last reading when the thread's
    /// scheduler page proves it has not run since (ADR 0033).
    fn cpu_clock(&mut self, thread_id: u64, tstate: u64, tid: u32) -> ClockRead {
        let source = self.config.cpu_time;
        let (read, failed) = self.sched.clock(thread_id, tstate, tid, self.tick, || {
            cpu_time_ns(source, tid)
        });
        bump(&self.counters.sched_page_failures, u64::from(failed));
        if let ClockRead::Unmoved(_) = read {
            bump(&self.counters.clock_reads_saved, 1);
        }
        read
    }

    /// Whether the thread whose CPU clock read `cpu_ns` at monotonic time `read_at`, before
    /// its frames were copied, ran while they were: its clock moved by at least half the
    /// time that passed. (Any movement at all would also count a thread that only woke for
    /// a few microseconds to wait for the GIL, in the frame it waits in, and such wake-ups
    /// are many.) Only the thread clock can tell (`/proc` moves at scheduler events only):
    /// elsewhere every thread counts as running.
    fn runs_now(&self, tid: Option<u32>, cpu_ns: Option<u64>, read_at: u64) -> bool {
        match (self.config.cpu_time, tid, cpu_ns) {
            (CpuTimeSource::ThreadClock, Some(tid), Some(ns)) => {
                match cpu_time_ns(CpuTimeSource::ThreadClock, tid) {
                    Some(now) => {
                        let passed = monotonic_ns().saturating_sub(read_at);
                        now.saturating_sub(ns).saturating_mul(2) >= passed.max(1)
                    }
                    None => true,
                }
            }
            _ => true,
        }
    }

    /// Charges `cpu_ns` to the stack the thread was last seen running in, as a CPU-only
    /// sample (weight 0: no wall time), with the span and task it had then.
    fn charge_last_running(
        &mut self,
        sink: &mut dyn StackSink,
        t: &ThreadRef,
        tid: Option<u32>,
        cpu_ns: u64,
    ) {
        let Some(tid) = tid else {
            return;
        };
        let Some((frames, truncated, resolution)) =
            self.stacks.last_running(t.thread_id, t.tstate, tid)
        else {
            return;
        };
        let key = ExecutionKey::thread(t.thread_id);
        let sample = RawSample::new(key, frames, self.name.as_str())
            .with_truncated(truncated)
            .with_cpu_ns(cpu_ns)
            .with_weight(0);
        self.ctx.emit_resolved(resolution, sink, sample);
    }

    /// The OS tid of a thread, from its thread state (3.11+), the registry, or its pthread.
    fn tid_of(&self, thread_id: u64, native: u64, registered: u32) -> Option<u32> {
        if self.config.cpu_time == CpuTimeSource::Disabled {
            return None;
        }
        match tid_in_state(native) {
            Some(t) => Some(t),
            None if registered != 0 => Some(registered),
            _ if self.pthread_tid_ok => tid_from_pthread(&self.reader, thread_id).ok(),
            _ => None,
        }
    }
}

/// The offsets of the first and the last of a thread state's frame pointer, its data-stack
/// bounds (3.11+) and the field at `extra` (the context), if any: one read from the first to 8
/// bytes past the last gets them all.
fn pointer_span(l: &Layout, extra: Option<usize>) -> (usize, usize) {
    let fields = [Some(l.tstate_frame), extra]
        .into_iter()
        .chain(
            l.tstate_datastack
                .into_iter()
                .flat_map(|(c, top)| [Some(c), Some(top)]),
        )
        .flatten();
    fields.fold((l.tstate_frame, l.tstate_frame), |(lo, hi), f| {
        (lo.min(f), hi.max(f))
    })
}

/// Takes thread `t`'s frame pointer and data-stack bounds from `b`, a copy of its state from
/// offset `lo` ([`pointer_span`]).
fn take_pointers(l: &Layout, t: &mut ThreadRef, b: &[u8], lo: usize) {
    t.frame_field = field_u64(b, l.tstate_frame - lo);
    if let Some((c, top)) = l.tstate_datastack {
        t.chunk = field_u64(b, c - lo);
        t.top = field_u64(b, top - lo);
    }
}

/// Copies the thread state at `tstate` into `tb` (`tstate_read_size()` bytes): whole in one read
/// when reads are system calls, else only `span`, the part that holds the fields the listing
/// parses (the rest of `tb` is left as it was, and never parsed).
fn read_tstate<R: MemoryReader>(
    reader: &R,
    direct: bool,
    span: &std::ops::Range<usize>,
    tstate: u64,
    tb: &mut [u8],
) -> Result<(), ReadError> {
    if !direct {
        return reader.read(tstate, tb);
    }
    let part = tb.get_mut(span.clone()).ok_or(ReadError::Invalid)?;
    reader.read(tstate.wrapping_add(span.start as u64), part)
}

/// The OS tid a thread state carries (`native_thread_id`, 3.11+), if it does: then the walker
/// needs the registry only for the thread's name.
fn tid_in_state(native: u64) -> Option<u32> {
    u32::try_from(native).ok().filter(|&t| t != 0)
}

impl<R: MemoryReader + Send + 'static> StackWalker for PythonWalker<R> {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        bump(&self.counters.ticks, 1);
        self.direct = self.reader.begin_tick();
        if self.direct {
            bump(&self.counters.direct_ticks, 1);
        }
        self.tick = self.tick.wrapping_add(1);
        self.cache.tick = self.tick;
        let generation = self.registry.generation();
        self.names_stable = generation == self.names_generation;
        self.names_generation = generation;
        self.cpu.begin_tick(monotonic_ns());
        if self.direct {
            self.sched.prefetch_pages();
        }
        let sched = &self.sched;
        self.last.mark_idle(self.tick, |thread_id, tstate| {
            sched.proven_idle(thread_id, tstate)
        });
        if self.direct {
            self.prefetch_thread_states();
        }
        self.walk_all(sink);
        bump(
            &self.counters.sched_pages_opened,
            u64::from(self.sched.take_opened()),
        );
    }

    fn symbolize(&mut self, raw: RawFrame) -> Frame {
        self.cache.symbolize(raw.id, raw.line)
    }
}
