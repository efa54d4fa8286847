//! [`NativeWalker`]: drains the per-thread rings on the sampler thread.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use span_profile_core::labels::LabelId;
use span_profile_core::{
    ActiveSpan, ActiveSpanRegistry, ExecutionKey, Frame, ProfilerBuilder, RawFrame, RawSample,
    SpanContext, SpanId, SpanSource, StackSink, StackWalker, TraceId, WalkError,
};

use crate::signal::send_wall;
use crate::table::{
    encode, Entry, Table, ACTIVE, F_HAS_SPAN, F_SPAN_READ, F_TRUNCATED, MAX_DEPTH, NAME_LEN,
    RETIRING,
};
use crate::thread::{arm_all, table};
use crate::SetupError;

/// Configures a [`NativeWalker`].
#[derive(Debug, Clone)]
pub struct NativeWalkerBuilder {
    registry: Option<Arc<ActiveSpanRegistry>>,
    cpu_hz: u32,
    wall: bool,
}

impl Default for NativeWalkerBuilder {
    fn default() -> Self {
        Self {
            registry: None,
            cpu_hz: 100,
            wall: true,
        }
    }
}

impl NativeWalkerBuilder {
    /// The registry the profiler stamps spans from (`ProfilerBuilder::registry()`). With it
    /// the signal handler reads the span current at the sample instant; without it samples
    /// are stamped when the walker drains them (up to one tick later).
    pub fn with_registry(mut self, registry: Arc<ActiveSpanRegistry>) -> Self {
        self.registry = Some(registry);
        self
    }
    /// CPU-time samples per second of each thread's CPU time (default 100; 0 turns CPU
    /// sampling off). Each CPU sample carries `1/cpu_hz` s of CPU time per timer expiration;
    /// without the CPU timer, each wall sample carries what its thread used since its
    /// previous one (ADR 0019).
    pub fn with_cpu_hz(mut self, hz: u32) -> Self {
        self.cpu_hz = hz.min(10_000);
        self
    }
    /// Wall-time sampling: on every tick the walker signals each registered thread; a thread
    /// that was waiting reports an off-CPU sample (default on).
    pub fn with_wall(mut self, wall: bool) -> Self {
        self.wall = wall;
        self
    }
    /// Builds the walker with `profiler`'s registry and installs it as its walker: the usual
    /// way to profile the process's native threads.
    ///
    /// ```no_run
    /// use span_profile_core::Profiler;
    /// use span_profile_native::NativeWalker;
    /// use span_profile_test::InMemoryExporter;
    ///
    /// let profiler = NativeWalker::builder()
    ///     .install_in(Profiler::builder())
    ///     .unwrap()
    ///     .with_exporter(InMemoryExporter::default())
    ///     .start()
    ///     .unwrap();
    /// # drop(profiler);
    /// ```
    pub fn install_in(self, profiler: ProfilerBuilder) -> Result<ProfilerBuilder, SetupError> {
        let walker = self.with_registry(profiler.registry().clone()).build()?;
        Ok(profiler.with_walker(walker))
    }

    /// Sets the process up (signal handler, table) if needed, attaches and arms the CPU
    /// timers of registered threads. One walker may be attached at a time.
    pub fn build(self) -> Result<NativeWalker, SetupError> {
        let t = table()?;
        // Loading the symbolizer's debug info takes long on a big binary (seconds for an
        // unoptimised one): do it here, on the caller, not in the sampler's first tick while
        // the rings fill.
        warm_symbolizer();
        let _lock = t.lock.lock();
        if t.attached.swap(true, Ordering::AcqRel) {
            return Err(SetupError::AlreadyAttached);
        }
        let epoch = t.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        let period = if self.cpu_hz == 0 {
            0
        } else {
            1_000_000_000 / u64::from(self.cpu_hz)
        };
        let registry_ptr = self
            .registry
            .as_ref()
            .map_or(std::ptr::null_mut(), |r| Arc::as_ptr(r).cast_mut());
        t.registry.store(registry_ptr, Ordering::SeqCst);
        t.cpu_period_ns.store(period, Ordering::Relaxed);
        if period > 0 {
            arm_all(t, period);
        }
        Ok(NativeWalker {
            table: t,
            registry: self.registry,
            wall: self.wall,
            epoch,
            frames: Vec::with_capacity(MAX_DEPTH),
            last_walk: None,
            full_seen: t.counters.ring_full.load(Ordering::Relaxed),
            default_period: if period > 0 { period } else { 10_000_000 },
        })
    }
}

fn warm_symbolizer() {
    backtrace::resolve(warm_symbolizer as *const () as usize as *mut c_void, |_| {});
}

/// A [`StackWalker`] over the host process's own registered threads.
///
/// - CPU time: a `CLOCK_THREAD_CPUTIME_ID` timer per thread delivers a signal to that thread
///   every `1/cpu_hz` s of its CPU time; the handler unwinds it (frame pointers) into a
///   preallocated ring.
/// - Wall time: each [`StackWalker::walk`] queues the same signal to every registered thread;
///   a thread that used less than half the tick in CPU reports an off-CPU sample.
/// - `walk` drains the rings and reports each sample under the thread's
///   `ExecutionKey::current_thread()`; the span and its route (or "no span") are the
///   ones the handler read at the sample instant, passed as `SpanSource::Resolved`.
///
/// ```no_run
/// use span_profile_core::Profiler;
/// use span_profile_native::NativeWalker;
/// use span_profile_test::InMemoryExporter;
///
/// let builder = Profiler::builder();
/// let walker = NativeWalker::builder()
///     .with_registry(builder.registry().clone())
///     .build()
///     .unwrap();
/// let profiler = builder
///     .with_walker(walker)
///     .with_exporter(InMemoryExporter::default())
///     .start()
///     .unwrap();
/// let _guard = span_profile_native::register_current_thread().unwrap();
/// // ... work ...
/// profiler.shutdown().unwrap();
/// ```
#[derive(Debug)]
pub struct NativeWalker {
    table: &'static Table,
    /// Keeps alive the registry whose pointer the handlers read (see `Drop`); the walker reads
    /// it too, for an entry the handler did not stamp.
    registry: Option<Arc<ActiveSpanRegistry>>,
    wall: bool,
    epoch: u64,
    frames: Vec<RawFrame>,
    last_walk: Option<Instant>,
    full_seen: u64,
    default_period: u64,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("signal", &self.signal)
            .finish_non_exhaustive()
    }
}

impl NativeWalker {
    /// A builder with defaults: 100 Hz CPU sampling, wall sampling on, no registry.
    pub fn builder() -> NativeWalkerBuilder {
        NativeWalkerBuilder::default()
    }

    fn span_of(e: &Entry) -> Option<ActiveSpan> {
        if e.flags & F_HAS_SPAN == 0 {
            return None;
        }
        Some(ActiveSpan {
            ctx: SpanContext {
                trace_id: TraceId::from_u128(
                    (u128::from(e.trace_hi) << 64) | u128::from(e.trace_lo),
                )?,
                span_id: SpanId::from_u64(e.span)?,
                local_root_span_id: SpanId::from_u64(e.root)?,
            },
            route: LabelId(e.route),
        })
    }
}

impl StackWalker for NativeWalker {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        let t = self.table;
        let now = Instant::now();
        let period = self.last_walk.map_or(self.default_period, |l| {
            now.duration_since(l).as_nanos() as u64
        });
        self.last_walk = Some(now);
        t.wall_period_ns.store(
            period.clamp(self.default_period / 4, self.default_period * 4),
            Ordering::Relaxed,
        );
        // Registration holds the lock only briefly; rather than wait, leave the rings for the
        // next tick.
        let Some(_lock) = t.lock.try_lock() else {
            sink.error(WalkError::Skipped);
            return;
        };
        if t.epoch.load(Ordering::Acquire) != self.epoch {
            return; // a fork child: this walker's attachment is gone
        }
        let mut name_buf = [0u8; NAME_LEN];
        let hw = t.high_water.load(Ordering::Acquire).min(t.slots.len());
        for index in 0..hw {
            let slot = &t.slots[index];
            let state = slot.state.load(Ordering::Acquire);
            if state != ACTIVE && state != RETIRING {
                continue;
            }
            let key = slot.key.load(Ordering::Relaxed);
            let name = slot.name_into(&mut name_buf);
            let mut tail = slot.tail.load(Ordering::Relaxed);
            // Acquire: pairs with the handler's Release store of `head`.
            let head = slot.head.load(Ordering::Acquire);
            while tail != head {
                let e = t.entry(index, tail);
                if e.is_null() {
                    break;
                }
                // SAFETY: entries in `tail..head` are complete (Acquire above) and the handler
                // does not write them until `tail` moves past them (it Acquire-loads `tail`).
                let entry = unsafe { &*e };
                self.frames.clear();
                let len = (entry.len as usize).min(MAX_DEPTH);
                self.frames.extend(
                    entry.frames[..len]
                        .iter()
                        .map(|&ip| RawFrame { id: ip, line: 0 }),
                );
                if !self.frames.is_empty() {
                    let key = ExecutionKey::thread(key);
                    let span = if entry.flags & F_SPAN_READ == 0 {
                        // The handler saw no registry: the span current now, if there is a
                        // registry to ask (up to one tick after the sample instant).
                        self.registry
                            .as_deref()
                            .map_or(SpanSource::Unknown, |r| SpanSource::current_in(r, key))
                    } else {
                        // The span (with its route), or none, current at the sample instant.
                        SpanSource::Resolved(Self::span_of(entry))
                    };
                    sink.sample(
                        &RawSample::new(key, &self.frames, name)
                            .with_truncated(entry.flags & F_TRUNCATED != 0)
                            .with_cpu_ns(entry.cpu_ns)
                            .with_span(span)
                            .with_weight(entry.weight.max(1)),
                    );
                }
                tail = tail.wrapping_add(1);
                // Release: our reads of the entry happen before the handler reuses it.
                slot.tail.store(tail, Ordering::Release);
            }
            if state == RETIRING {
                t.free(slot);
            } else if self.wall && slot.wall_pending.swap(true, Ordering::Relaxed) {
                // The last wall signal is still pending: the thread has not run since (it
                // waits for a CPU, or masks the signal). Its sample will count this tick too.
                slot.wall_owed.fetch_add(1, Ordering::Relaxed);
            } else if self.wall {
                let gen = slot.gen.load(Ordering::Relaxed);
                if !send_wall(
                    t.signal,
                    slot.tid.load(Ordering::Relaxed),
                    encode(index, gen),
                ) {
                    slot.wall_pending.store(false, Ordering::Relaxed);
                    t.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let full = t.counters.ring_full.load(Ordering::Relaxed);
        for _ in 0..full.saturating_sub(self.full_seen).min(10_000) {
            sink.error(WalkError::Skipped);
        }
        self.full_seen = full;
    }

    fn symbolize(&mut self, raw: RawFrame) -> Frame {
        let mut frame = None;
        // `backtrace::resolve` looks up `addr - 1` (it expects return addresses); frames here
        // are already exact (the leaf pc, call sites for the rest), so add the one back.
        let addr = (raw.id as usize).wrapping_add(1);
        // Inlined functions are reported innermost first, each outer one with the line of its
        // call: keep the outermost, the function the code physically belongs to, with its
        // line. (The core maps one raw frame to one frame, so inlined frames fold into it.)
        backtrace::resolve(addr as *mut c_void, |sym| {
            let Some(name) = sym.name() else {
                return;
            };
            frame = Some(Frame::new(
                format!("{name:#}"),
                sym.filename()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                sym.lineno().unwrap_or(0),
            ));
        });
        frame.unwrap_or_else(|| Frame::new(format!("{:#x}", raw.id), "", 0))
    }
}

impl Drop for NativeWalker {
    fn drop(&mut self) {
        let t = self.table;
        let _lock = t.lock.lock();
        if t.epoch.load(Ordering::Acquire) != self.epoch {
            return;
        }
        t.cpu_period_ns.store(0, Ordering::Relaxed);
        arm_all(t, 0);
        // No handler may use the registry once we drop our `Arc`: clear the pointer, then wait
        // for handlers that loaded it before (SeqCst pairs with the handler's; see push()).
        t.registry.store(std::ptr::null_mut(), Ordering::SeqCst);
        while t.readers.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        // Retiring slots have no other consumer now.
        let hw = t.high_water.load(Ordering::Acquire).min(t.slots.len());
        for slot in &t.slots[..hw] {
            if slot.state.load(Ordering::Acquire) == RETIRING {
                t.free(slot);
            } else if slot.state.load(Ordering::Acquire) == ACTIVE {
                // Discard undrained samples so a later walker starts clean.
                slot.tail
                    .store(slot.head.load(Ordering::Acquire), Ordering::Release);
            }
        }
        t.attached.store(false, Ordering::Release);
    }
}
