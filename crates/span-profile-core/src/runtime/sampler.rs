//! The sampling thread: one tick per interval (walk, stamp, aggregate), windows closed on
//! the wall clock and sent to the export thread, the CPU budget.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use crate::aggregate::{AggregatorLimits, WindowAggregator};
use crate::budget::{BudgetController, ThreadCpuClock};
use crate::failure::{log_to_stderr, FailureLog};
use crate::labels::LabelValues;
use crate::registry::{ActiveSpan, ActiveSpanRegistry, RegistryStats};
use crate::rng::XorShift;
use crate::spans::SpanTable;
use crate::{
    ExecutionKey, Frame, Profile, RawFrame, RawSample, Resource, SpanSource, StackSink,
    StackWalker, WalkError,
};

use super::{Counters, LazyRegistry, Ledger};

/// The wall clock that windows are aligned to, in Unix nanoseconds: the system clock, or a
/// test clock that jumps (see [`ProfilerBuilder::with_wall_clock`]).
#[derive(Clone, Default)]
pub(super) struct WallClock(pub(super) Option<Arc<dyn Fn() -> u64 + Send + Sync>>);

impl WallClock {
    fn now_ns(&self) -> u64 {
        match &self.0 {
            Some(f) => f(),
            None => crate::time::now_unix_ns(),
        }
    }
}

impl std::fmt::Debug for WallClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "WallClock(test)"
        } else {
            "WallClock(system)"
        })
    }
}

/// Object-safe helper so the builder can be `Debug` over any walker.
pub(super) trait StackWalkerDebug: StackWalker {}
impl<T: StackWalker> StackWalkerDebug for T {}
impl std::fmt::Debug for dyn StackWalkerDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StackWalker")
    }
}

pub(super) struct Sampler {
    walker: Box<dyn StackWalkerDebug>,
    /// Only its loss counters are read, at each window close.
    registry: LazyRegistry,
    spans: Arc<SpanTable>,
    agg: WindowAggregator,
    resource: Resource,
    /// The configured interval.
    interval: Duration,
    /// The CPU budget, as a fraction of one core.
    budget: Option<f64>,
    window: Duration,
    counters: Arc<Counters>,
    ledger: Option<Arc<Ledger>>,
    win_tx: Sender<Arc<Profile>>,
    win_rx: Receiver<Arc<Profile>>,
    /// Set by shutdown (or the Profiler's drop); the sampler closes its last window and exits.
    stop: Arc<AtomicBool>,
    pending_dropped_windows: u64,
    /// The registry's loss counters at the last window close (each window reports the delta).
    registry_seen: RegistryStats,
    failures: Arc<FailureLog>,
    tick_interval_ns: u64,
    /// The export thread's cumulative CPU when the budget last saw it grow, and when.
    export_seen: (u64, Instant),
    /// The agent's costs that the sampling interval does not scale, reserved out of the budget.
    fixed: FixedCosts,
    tick_samples: u64,
    /// The positions this tick's samples took in the walk (`WindowAggregator::add_raw`): each
    /// sample with a wall weight takes the next; a CPU-only sample takes none.
    tick_positions: u64,
    clock: WallClock,
    /// Draws each tick's jittered gap (see [`jittered`]).
    rng: XorShift,
}

/// The gap to the next tick: `interval` on average, drawn uniformly from `[interval / 2,
/// 3 × interval / 2)`, so the ticks never lock onto the phase of a workload that repeats at
/// the sampling interval (ADR 0034). Each sample is weighted by the time since the previous
/// tick, so the jitter leaves the weights unbiased.
fn jittered(interval: Duration, rng: &mut XorShift) -> Duration {
    let ns = interval.as_nanos().min(u128::from(u64::MAX)) as u64;
    Duration::from_nanos(ns / 2 + rng.below(ns))
}

/// When the tick after one due at `next`, run at `now`, falls: a jittered gap after `next`; or,
/// for a sampler that fell behind (a long walk, a stopped process), a jittered gap after `now`:
/// missed ticks are skipped, not made up in a burst.
fn next_tick(next: Instant, now: Instant, interval: Duration, rng: &mut XorShift) -> Instant {
    let due = next + jittered(interval, rng);
    if due < now {
        now + jittered(interval, rng)
    } else {
        due
    }
}

/// What the budget reserves before the interval is set: the export thread's CPU rate (from
/// its last export) and the sampler's own cost of closing windows (from the last close).
#[derive(Debug, Default)]
struct FixedCosts {
    export_share: f64,
    close_share: f64,
    /// Sampler CPU spent closing windows so far, left out of what the interval answers for.
    close_cpu_ns: u64,
}

impl FixedCosts {
    fn total(&self) -> f64 {
        self.export_share + self.close_share
    }
}

/// The end of the window containing `now`: the next wall-clock multiple of `window`.
fn window_end(now_ns: u64, window_ns: u64) -> u64 {
    // Saturating: a clock set centuries ahead must not overflow (and panic) the sampler.
    (now_ns / window_ns)
        .saturating_add(1)
        .saturating_mul(window_ns)
}

/// Everything a [`Sampler`] is made of that its caller decides.
pub(super) struct SamplerSetup {
    pub(super) walker: Box<dyn StackWalkerDebug>,
    pub(super) registry: LazyRegistry,
    pub(super) spans: Arc<SpanTable>,
    pub(super) limits: AggregatorLimits,
    pub(super) resource: Resource,
    /// Ticks per second (at least 1).
    pub(super) rate_hz: u32,
    pub(super) budget: Option<f64>,
    pub(super) window: Duration,
    pub(super) counters: Arc<Counters>,
    /// The window accounting stamped into each window's stats (none in the harness).
    pub(super) ledger: Option<Arc<Ledger>>,
    pub(super) failures: Arc<FailureLog>,
    /// The queue of closed windows to the export thread (both ends: a sampler that finds it
    /// full drops the oldest).
    pub(super) windows: (Sender<Arc<Profile>>, Receiver<Arc<Profile>>),
    pub(super) stop: Arc<AtomicBool>,
    pub(super) clock: WallClock,
}

impl Sampler {
    /// The one constructor, for the profiler's thread and for [`SamplerHarness`] alike.
    pub(super) fn new(s: SamplerSetup) -> Self {
        let interval = Duration::from_nanos(1_000_000_000 / u64::from(s.rate_hz.max(1)));
        let (win_tx, win_rx) = s.windows;
        Self {
            walker: s.walker,
            registry_seen: s
                .registry
                .made()
                .map(|r| r.loss_counters())
                .unwrap_or_default(),
            registry: s.registry,
            spans: s.spans,
            agg: WindowAggregator::new(s.limits),
            resource: s.resource,
            interval,
            budget: s.budget,
            window: s.window,
            counters: s.counters,
            ledger: s.ledger,
            win_tx,
            win_rx,
            stop: s.stop,
            pending_dropped_windows: 0,
            failures: s.failures,
            // Measured by each tick of `run`; the nominal interval until then.
            tick_interval_ns: interval.as_nanos() as u64,
            export_seen: (0, Instant::now()),
            fixed: FixedCosts::default(),
            tick_samples: 0,
            tick_positions: 0,
            clock: s.clock,
            rng: XorShift::seeded(),
        }
    }

    pub(super) fn run(mut self) {
        self.walker.on_start();
        let clock = ThreadCpuClock::for_current_thread();
        let mut budget = self
            .budget
            .map(|b| BudgetController::new(b, self.interval, Instant::now()));
        let mut interval = self.interval;
        let window_ns = self.window.as_nanos() as u64;
        let mut start_ns = self.clock.now_ns();
        let mut end_ns = window_end(start_ns, window_ns);
        // The wall clock at the previous tick, to end a window where sampling really stopped
        // when the clock steps.
        let mut last_ns = start_ns;
        let mut cpu_at_window_start = clock.now_ns();
        let mut next = Instant::now() + jittered(interval, &mut self.rng);
        let mut last_tick = Instant::now();
        let mut ticks_in_window = 0u64;
        // Sleep until each tick with park_timeout, not a channel wait: channels spin and yield
        // before blocking, which costs the sampler CPU on every tick. Shutdown unparks.
        'ticks: loop {
            loop {
                // Acquire: pairs with the Release swap in `shutdown_with_timeout`.
                if self.stop.load(Ordering::Acquire) {
                    break 'ticks;
                }
                let now = Instant::now();
                if now >= next {
                    break;
                }
                thread::park_timeout(next - now);
            }
            let now = Instant::now();
            let elapsed = now.duration_since(last_tick);
            last_tick = now;
            // Weight each sample by the real time since the last tick, capped at a few
            // intervals so a suspended process does not inflate one tick.
            let nominal = interval.as_nanos() as u64;
            self.tick_interval_ns = (elapsed.as_nanos() as u64).clamp(nominal / 2, nominal * 4);
            if elapsed > interval * 2 {
                self.agg.stats_mut().missed_ticks += 1;
            }
            // A panic (a walker bug) stops sampling for good, logged once; the host goes on.
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.tick())) {
                self.failures.sampler_panicked(&*panic);
                break 'ticks;
            }
            ticks_in_window += 1;
            if let Some(b) = budget.as_mut().filter(|b| b.due(now)) {
                // The export thread's CPU is part of the agent's: what it used since it last
                // finished exporting, as a rate over that time, is the share the sampler
                // leaves it.
                let exported = self.counters.exporter_cpu_ns.load(Ordering::Relaxed);
                if exported > self.export_seen.0 {
                    let (seen_ns, seen_at) = self.export_seen;
                    let over = now.saturating_duration_since(seen_at).as_nanos().max(1);
                    self.fixed.export_share = (exported - seen_ns) as f64 / over as f64;
                    self.export_seen = (exported, now);
                    b.reserve(self.fixed.total());
                }
                // Closing windows is reserved too (below), so the interval answers for the
                // ticks alone.
                let ticks_cpu = clock.now_ns().saturating_sub(self.fixed.close_cpu_ns);
                if let Some(i) = b.observe(now, ticks_cpu) {
                    interval = i;
                }
            }
            next = next_tick(next, now, interval, &mut self.rng);
            let now_ns = self.clock.now_ns();
            // A clock that jumped back before the window start closes the window too, so a
            // window never covers a negative span of time.
            if now_ns >= end_ns || now_ns < start_ns {
                // A step (back, or ahead by more than a few ticks: NTP, a resumed VM or a
                // stopped process) ends the window at the last reading before it, so the
                // window covers the time that was sampled, not the jump.
                let slack = interval.saturating_mul(4).as_nanos() as u64;
                let stepped = now_ns < last_ns || now_ns - last_ns > slack;
                let end = if stepped { last_ns } else { now_ns };
                let cpu = clock.now_ns();
                self.close_window(
                    start_ns,
                    end.clamp(start_ns, end_ns),
                    cpu.saturating_sub(cpu_at_window_start),
                    ticks_in_window,
                );
                // Closing a window costs the same whatever the interval (its span records
                // follow the request rate): a share of the budget, like the export thread's.
                if let Some(b) = budget.as_mut() {
                    let close = clock.now_ns().saturating_sub(cpu);
                    self.fixed.close_cpu_ns += close;
                    self.fixed.close_share = close as f64 / window_ns.max(1) as f64;
                    b.reserve(self.fixed.total());
                }
                cpu_at_window_start = cpu;
                ticks_in_window = 0;
                start_ns = now_ns;
                end_ns = window_end(now_ns, window_ns);
            }
            last_ns = now_ns;
        }
        let cpu = clock.now_ns();
        let now_ns = self.clock.now_ns().max(start_ns);
        // After a panic the window may be inconsistent; closing it must not panic again.
        let closed = catch_unwind(AssertUnwindSafe(|| {
            self.close_window(
                start_ns,
                now_ns,
                cpu.saturating_sub(cpu_at_window_start),
                ticks_in_window,
            );
        }));
        if let Err(panic) = closed {
            self.failures.sampler_panicked(&*panic);
        }
        // Dropping the sender lets the export thread drain the queue and finish.
    }

    fn tick(&mut self) {
        self.counters.ticks.fetch_add(1, Ordering::Relaxed);
        self.agg.stats_mut().ticks += 1;
        self.tick_samples = 0;
        self.tick_positions = 0;
        self.agg.begin_walk();
        let mut walker = std::mem::replace(&mut self.walker, Box::new(NoWalker));
        walker.walk(&mut TickSink { sampler: self });
        // Off the per-sample path: name the frames first seen in this tick.
        self.agg.resolve_frames(&mut |r| walker.symbolize(r));
        self.walker = walker;
        self.counters
            .samples
            .fetch_add(self.tick_samples, Ordering::Relaxed);
    }

    fn close_window(&mut self, start_ns: u64, end_ns: u64, sampler_cpu_ns: u64, ticks: u64) {
        self.counters
            .sampler_cpu_ns
            .fetch_add(sampler_cpu_ns, Ordering::Relaxed);
        let mut spans = self.spans.drain_window();
        let duration_ns = end_ns.saturating_sub(start_ns);
        let mut profile = self.agg.finish(
            self.resource.clone(),
            start_ns,
            duration_ns,
            self.interval.as_nanos() as u64,
            &mut spans,
        );
        self.spans.recycle(spans);
        // Both threads are the agent: the export thread's CPU since the last window is
        // reported with this one.
        let exporter_cpu = self
            .counters
            .exporter_cpu_pending
            .swap(0, Ordering::Relaxed);
        profile.stats.agent_cpu_ns = sampler_cpu_ns + exporter_cpu;
        profile.stats.dropped_windows = std::mem::take(&mut self.pending_dropped_windows);
        profile.stats.export_errors = 0;
        // A registry made after the last close starts from zero.
        let registry = self
            .registry
            .made()
            .map(|r| r.loss_counters())
            .unwrap_or_default();
        let seen = std::mem::replace(&mut self.registry_seen, registry);
        profile.stats.registry_full = registry.full.saturating_sub(seen.full);
        profile.stats.unmatched_exits = registry
            .unmatched_exits
            .saturating_sub(seen.unmatched_exits);
        profile.stats.contended_reads = registry
            .contended_reads
            .saturating_sub(seen.contended_reads);
        profile.stats.effective_rate_millihz = ticks
            .saturating_mul(1_000_000_000_000)
            .checked_div(duration_ns)
            .unwrap_or(0);
        // Every drop a window reports is also counted over the profiler's life.
        let st = &profile.stats;
        for (counter, n) in [
            (&self.counters.dropped_samples, st.dropped_samples),
            (&self.counters.missed_ticks, st.missed_ticks),
            (&self.counters.truncated_stacks, st.truncated_stacks),
            (&self.counters.skipped_threads, st.skipped_threads),
            (&self.counters.label_overflow, st.label_overflow),
            (&self.counters.dropped_spans, st.dropped_spans),
            (&self.counters.unsampled_spans, st.unsampled_spans),
            (&self.counters.torn_samples, st.torn_samples),
        ] {
            counter.fetch_add(n, Ordering::Relaxed);
        }
        // What became of the windows before this one (atomic loads only).
        if let Some(ledger) = &self.ledger {
            let a = ledger.account(&self.counters);
            let st = &mut profile.stats;
            st.windows_made = self.counters.windows.load(Ordering::Relaxed);
            st.windows_delivered = a.delivered;
            st.windows_waiting = a.waiting;
            st.windows_dropped_queue_full = self.counters.dropped_windows.load(Ordering::Relaxed);
            st.windows_dropped_spool_full = a.dropped_spool_full;
            st.windows_dropped_expired = a.dropped_expired;
            st.windows_dropped_rejected = a.dropped_rejected;
            st.windows_dropped_at_shutdown = a.dropped_at_shutdown;
        }
        self.counters.windows.fetch_add(1, Ordering::Relaxed);
        let mut window = Arc::new(profile);
        loop {
            match self.win_tx.try_send(window) {
                Ok(()) => break,
                Err(TrySendError::Full(w)) => {
                    // Drop the oldest queued window to make room; count it and report the
                    // count with the next window that goes out.
                    if self.win_rx.try_recv().is_ok() {
                        self.counters
                            .dropped_windows
                            .fetch_add(1, Ordering::Relaxed);
                        self.pending_dropped_windows += 1;
                    }
                    window = w;
                }
                Err(TrySendError::Disconnected(_)) => break,
            }
        }
    }
}

struct TickSink<'a> {
    sampler: &'a mut Sampler,
}

impl StackSink for TickSink<'_> {
    fn sample(&mut self, s: &RawSample<'_>) {
        let active = match s.span {
            SpanSource::Resolved(active) => active,
            SpanSource::Unknown => None,
        };
        self.record(s, active);
    }

    fn repeat(&mut self, key: ExecutionKey, weight: u32) -> bool {
        let sampler = &mut *self.sampler;
        let slot = sampler.tick_positions as usize;
        // The span is not marked sampled again (`SpanTable::mark_sampled`): an accepted repeat
        // counts the row the previous tick filled in this window, and the first sample of that
        // run in this window, built whole by `record`, marked it. Only a window's close forgets
        // marks, and it flags every span still open as crossing a window, which keeps it when
        // it ends just as a mark would. Marking again cost each waiting thread four loads a
        // tick at random places in the 128 KiB filter: 15% of the sampler thread's time with 64
        // threads waiting in spans (docs/benchmarks.md), for 184 instructions a thread.
        if !sampler
            .agg
            .repeat_raw(slot, key, weight, sampler.tick_interval_ns)
        {
            return false;
        }
        sampler.tick_samples += 1;
        sampler.tick_positions += 1;
        true
    }

    fn error(&mut self, error: WalkError) {
        let stats = self.sampler.agg.stats_mut();
        match error {
            WalkError::Skipped => stats.skipped_threads += 1,
            WalkError::Torn => stats.torn_samples += 1,
            _ => {
                stats.walk_errors += 1;
                self.sampler
                    .counters
                    .walk_errors
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl TickSink<'_> {
    /// Aggregates one stack with the span (and its route) it is attributed to.
    fn record(&mut self, s: &RawSample<'_>, active: Option<ActiveSpan>) {
        let sampler = &mut *self.sampler;
        let (span, route) = match active {
            Some(a) => (Some(a.ctx), a.route),
            None => (None, LabelValues::BACKGROUND),
        };
        if let Some(ctx) = &span {
            sampler.spans.mark_sampled(ctx);
        }
        // A CPU-only sample (a thread's CPU charged to the stack it last ran in, beside its
        // own sample) takes no position: were it to, every thread after it in this walk, and
        // in the next, would be at another position than in the walk before, and none of them
        // would be counted again or find its stack there (`WindowAggregator::add_raw_aside`).
        if s.weight == 0 {
            sampler
                .agg
                .add_raw_aside(s, span, route, sampler.tick_interval_ns);
        } else {
            let slot = sampler.tick_positions as usize;
            sampler
                .agg
                .add_raw(slot, s, span, route, sampler.tick_interval_ns);
            sampler.tick_positions += 1;
        }
        sampler.tick_samples += 1;
    }
}

/// Placeholder while the real walker is borrowed during a tick.
struct NoWalker;
impl StackWalker for NoWalker {
    fn walk(&mut self, _sink: &mut dyn StackSink) {}
    fn symbolize(&mut self, _raw: RawFrame) -> Frame {
        Frame::new("[unknown]", "", 0)
    }
}

/// Drives the sampler's per-tick path on the calling thread, for allocation tests, fuzzing
/// and benches. Not a stable API.
#[doc(hidden)]
#[derive(Debug)]
pub struct SamplerHarness {
    sampler: Sampler,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl SamplerHarness {
    /// A sampler over `walker`, stamping from `registry` and `spans`, at `rate_hz`.
    pub fn new(
        walker: impl StackWalker,
        registry: Arc<ActiveSpanRegistry>,
        spans: Arc<SpanTable>,
        rate_hz: u32,
    ) -> Self {
        Self {
            sampler: Sampler::new(SamplerSetup {
                walker: Box::new(walker),
                registry: LazyRegistry::with(registry),
                spans,
                limits: AggregatorLimits::default(),
                resource: Resource::default(),
                rate_hz,
                budget: None,
                window: Duration::from_secs(60),
                counters: Arc::new(Counters::default()),
                ledger: None,
                failures: Arc::new(FailureLog::new(Arc::new(log_to_stderr))),
                windows: bounded(1),
                stop: Arc::new(AtomicBool::new(false)),
                clock: WallClock::default(),
            }),
        }
    }

    /// One tick: walk, stamp each stack with its span, aggregate.
    pub fn tick(&mut self) {
        self.sampler.tick();
    }

    /// Closes the window and returns it.
    pub fn close_window(&mut self) -> Option<Arc<Profile>> {
        self.sampler.close_window(0, 1_000_000_000, 0, 1);
        self.sampler.win_rx.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jittered_gap_stays_within_half_and_one_and_a_half_intervals_and_averages_one() {
        let interval = Duration::from_millis(10);
        let mut rng = XorShift::new(7);
        let gaps: Vec<Duration> = (0..10_000).map(|_| jittered(interval, &mut rng)).collect();
        assert!(gaps
            .iter()
            .all(|g| *g >= interval / 2 && *g < interval * 3 / 2));
        let mean = gaps.iter().sum::<Duration>() / gaps.len() as u32;
        // The mean of 10,000 uniform draws over one interval is within 1% of the middle.
        assert!(
            mean > interval * 99 / 100 && mean < interval * 101 / 100,
            "{mean:?}"
        );
    }

    /// A workload that runs one function in the first half of every interval and another in
    /// the second. The run loop's schedule (`next_tick`, each tick run when due) must split
    /// its ticks between the halves by the time each takes, and so must the samples' time
    /// weights; ticks at a fixed interval would all land in one half.
    #[test]
    fn the_tick_schedule_does_not_lock_onto_a_workload_that_repeats_at_the_interval() {
        let interval = Duration::from_millis(4);
        let half = interval.as_nanos() / 2;
        let start = Instant::now();
        let in_first_half = |t: Instant| (t - start).as_nanos() % (2 * half) < half;
        let mut rng = XorShift::new(11);
        let (mut next, mut first, mut weight_first, mut weight_all) = (start, 0, 0u128, 0u128);
        for _ in 0..1_000 {
            let due = next_tick(next, next, interval, &mut rng);
            let gap = (due - next).as_nanos();
            next = due;
            weight_all += gap;
            if in_first_half(next) {
                first += 1;
                weight_first += gap;
            }
        }
        assert!(
            (430..=570).contains(&first),
            "{first} of 1,000 in the first half"
        );
        let share = weight_first as f64 / weight_all as f64;
        assert!((0.43..=0.57).contains(&share), "{share}");
    }

    #[test]
    fn a_sampler_that_fell_behind_skips_the_missed_ticks() {
        let interval = Duration::from_millis(10);
        let mut rng = XorShift::new(3);
        let next = Instant::now();
        let now = next + interval * 50;
        let due = next_tick(next, now, interval, &mut rng);
        assert!(due >= now + interval / 2 && due < now + interval * 3 / 2);
    }
}
