//! The profiler runtime: a sampling thread, windows aligned to the wall clock, and an export
//! thread fed through a bounded queue.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender, TrySendError};

use crate::aggregate::{AggregatorLimits, WindowAggregator};
use crate::budget::{BudgetController, ThreadCpuClock};
use crate::failure::{log_to_stderr, FailureHandler, FailureLog};
use crate::labels::{LabelValues, ResourceAttributeError};
use crate::registry::{ActiveSpan, ActiveSpanRegistry, RegistryStats};
use crate::spans::SpanTable;
use crate::{
    ExportError, Exporter, Frame, Profile, RawFrame, RawSample, Resource, SpanSource, StackSink,
    StackWalker, WalkError,
};

/// Why the profiler could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No walker was configured.
    #[error("no stack walker configured: call ProfilerBuilder::with_walker")]
    NoWalker,
    /// A setting is out of range.
    #[error("invalid setting {name}: {reason}")]
    InvalidSetting {
        /// The setting.
        name: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// The OS refused to start a thread.
    #[error("could not start the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
}

/// Counters over the profiler's life. Every drop and failure has one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProfilerStats {
    /// Ticks taken.
    pub ticks: u64,
    /// Samples recorded.
    pub samples: u64,
    /// Windows closed.
    pub windows: u64,
    /// Windows handed to every exporter successfully.
    pub exported_windows: u64,
    /// Windows dropped because the export queue was full (oldest first).
    pub dropped_windows: u64,
    /// Failed or timed-out exporter calls.
    pub export_errors: u64,
    /// Walker failures (invalid reads, vanished threads).
    pub walk_errors: u64,
    /// Samples dropped by the window's row cap.
    pub dropped_samples: u64,
    /// CPU time of the sampling thread, nanoseconds.
    pub sampler_cpu_ns: u64,
    /// CPU time of the export thread, nanoseconds.
    pub exporter_cpu_ns: u64,
    /// Ticks that came more than an interval late (sampler starved or process stopped).
    pub missed_ticks: u64,
    /// Stacks cut at the walker's depth cap.
    pub truncated_stacks: u64,
    /// Threads or tasks not walked because a per-tick cap was reached.
    pub skipped_threads: u64,
    /// Label values replaced by `_other` because a cardinality cap was reached.
    pub label_overflow: u64,
    /// Span records dropped because the span table's cap was reached.
    pub dropped_spans: u64,
    /// Span records left out of windows because nothing was sampled in the span (ADR 0010).
    pub unsampled_spans: u64,
    /// Samples dropped because the span or task changed while the stack was copied.
    pub torn_samples: u64,
    /// Sampling stopped because of a failure; [`Profiler::failure`] says which.
    pub failed: bool,
}

#[derive(Debug, Default)]
struct Counters {
    ticks: AtomicU64,
    samples: AtomicU64,
    windows: AtomicU64,
    exported_windows: AtomicU64,
    dropped_windows: AtomicU64,
    export_errors: AtomicU64,
    walk_errors: AtomicU64,
    dropped_samples: AtomicU64,
    missed_ticks: AtomicU64,
    truncated_stacks: AtomicU64,
    skipped_threads: AtomicU64,
    label_overflow: AtomicU64,
    dropped_spans: AtomicU64,
    unsampled_spans: AtomicU64,
    torn_samples: AtomicU64,
    sampler_cpu_ns: AtomicU64,
    exporter_cpu_ns: AtomicU64,
    /// Export-thread CPU not yet reported in a window.
    exporter_cpu_pending: AtomicU64,
}

/// Configures and starts a [`Profiler`].
///
/// ```
/// use std::time::Duration;
/// use span_profile_core::Profiler;
/// use span_profile_test::{FakeWalker, InMemoryExporter};
///
/// let exporter = InMemoryExporter::default();
/// let profiler = Profiler::builder()
///     .with_service("checkout")
///     .with_sample_rate_hz(100)
///     .with_window(Duration::from_secs(60))
///     .with_walker(FakeWalker::threads(4, 10))
///     .with_exporter(exporter.clone())
///     .start()
///     .unwrap();
/// std::thread::sleep(Duration::from_millis(50));
/// profiler.shutdown_with_timeout(Duration::from_secs(5)).unwrap();
/// let windows = exporter.profiles();
/// assert_eq!(windows.len(), 1);
/// assert_eq!(windows[0].resource.service, "checkout");
/// ```
#[derive(Debug)]
pub struct ProfilerBuilder {
    resource: Resource,
    resource_problems: Vec<ResourceAttributeError>,
    rate_hz: u32,
    window: Duration,
    walker: Option<Box<dyn StackWalkerDebug>>,
    exporters: Vec<Arc<dyn Exporter>>,
    export_queue: usize,
    export_timeout: Duration,
    failure_log: HandlerField,
    limits: AggregatorLimits,
    overhead_budget: Option<f64>,
    registry: Arc<ActiveSpanRegistry>,
    spans: Arc<SpanTable>,
    clock: WallClock,
}

/// The wall clock that windows are aligned to, in Unix nanoseconds: the system clock, or a
/// test clock that jumps (see [`ProfilerBuilder::with_wall_clock`]).
#[derive(Clone, Default)]
struct WallClock(Option<Arc<dyn Fn() -> u64 + Send + Sync>>);

impl WallClock {
    fn now_ns(&self) -> u64 {
        match &self.0 {
            Some(f) => f(),
            None => unix_ns(SystemTime::now()),
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
trait StackWalkerDebug: StackWalker {}
impl<T: StackWalker> StackWalkerDebug for T {}
impl std::fmt::Debug for dyn StackWalkerDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StackWalker")
    }
}

impl Default for ProfilerBuilder {
    fn default() -> Self {
        let (resource, resource_problems) = Resource::from_env();
        Self {
            resource,
            resource_problems,
            rate_hz: 100,
            window: Duration::from_secs(60),
            walker: None,
            exporters: Vec::new(),
            export_queue: 4,
            export_timeout: Duration::from_secs(30),
            failure_log: HandlerField(Arc::new(log_to_stderr)),
            limits: AggregatorLimits::default(),
            overhead_budget: Some(0.01),
            registry: Arc::new(ActiveSpanRegistry::default()),
            spans: Arc::new(SpanTable::default()),
            clock: WallClock::default(),
        }
    }
}

impl ProfilerBuilder {
    /// Replaces the resource labels (by default read from `OTEL_SERVICE_NAME` and
    /// `OTEL_RESOURCE_ATTRIBUTES`).
    pub fn with_resource(mut self, resource: Resource) -> Self {
        self.resource = resource;
        self.resource_problems.clear();
        self
    }
    /// Sets `service.name`.
    pub fn with_service(mut self, service: impl Into<String>) -> Self {
        self.resource.service = service.into();
        self
    }
    /// Sets `service.version`.
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.resource.version = Some(version.into());
        self
    }
    /// Sets `deployment.environment`.
    pub fn with_environment(mut self, environment: impl Into<String>) -> Self {
        self.resource.environment = Some(environment.into());
        self
    }
    /// Sets the instance label.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.resource.instance = Some(instance.into());
        self
    }
    /// Samples per second per thread (1 to 10,000; default 100).
    pub fn with_sample_rate_hz(mut self, hz: u32) -> Self {
        self.rate_hz = hz;
        self
    }
    /// Window length (1 s to 1 h; default 60 s). Windows end on wall-clock multiples of it.
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }
    /// The stack walker.
    pub fn with_walker(mut self, walker: impl StackWalker) -> Self {
        self.walker = Some(Box::new(walker));
        self
    }
    /// Adds an exporter; every window goes to every exporter.
    pub fn with_exporter(mut self, exporter: impl Exporter) -> Self {
        self.exporters.push(Arc::new(exporter));
        self
    }
    /// Adds a shared exporter.
    pub fn with_shared_exporter(mut self, exporter: Arc<dyn Exporter>) -> Self {
        self.exporters.push(exporter);
        self
    }
    /// Closed windows that may wait for the export thread (default 4). When the queue is
    /// full the oldest window is dropped and counted.
    pub fn with_export_queue(mut self, windows: usize) -> Self {
        self.export_queue = windows.max(1);
        self
    }
    /// How long one exporter call may take (default 30 s).
    pub fn with_export_timeout(mut self, timeout: Duration) -> Self {
        self.export_timeout = timeout;
        self
    }
    /// The CPU the sampling thread may use, as a fraction of one core (default 0.01 = 1%).
    /// Over budget, the sampling interval stretches (samples are weighted by the real
    /// interval, so totals stay right) and comes back when there is room; each window reports
    /// the rate it achieved. `None` samples at the configured rate whatever it costs.
    pub fn with_overhead_budget(mut self, budget: Option<f64>) -> Self {
        self.overhead_budget = budget;
        self
    }
    /// Per-window aggregation limits.
    pub fn with_limits(mut self, limits: AggregatorLimits) -> Self {
        self.limits = limits;
        self
    }
    /// Uses an existing registry (span hooks may be installed before the profiler starts).
    pub fn with_registry(mut self, registry: Arc<ActiveSpanRegistry>) -> Self {
        self.registry = registry;
        self
    }
    /// Uses an existing span table.
    pub fn with_span_table(mut self, spans: Arc<SpanTable>) -> Self {
        self.spans = spans;
        self
    }
    /// Replaces the wall clock (Unix nanoseconds) that windows are aligned to and stamped
    /// with. A test hook, so fault tests can make the clock jump: not a stable API.
    #[doc(hidden)]
    pub fn with_wall_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = WallClock(Some(Arc::new(clock)));
        self
    }
    /// The registry that span hooks must feed.
    pub fn registry(&self) -> &Arc<ActiveSpanRegistry> {
        &self.registry
    }
    /// Problems found in `OTEL_RESOURCE_ATTRIBUTES` (the good entries are used).
    pub fn resource_problems(&self) -> &[ResourceAttributeError] {
        &self.resource_problems
    }

    /// Where a failure that stops sampling (a panic in the sampler) or an exporter panic is
    /// reported, once each; by default one line on stderr. The host process is never harmed
    /// by either: see [`crate::failure`].
    ///
    /// ```
    /// use span_profile_core::Profiler;
    /// use span_profile_test::FakeWalker;
    ///
    /// let profiler = Profiler::builder()
    ///     .with_walker(FakeWalker::threads(1, 4))
    ///     .with_failure_log(|message| eprintln!("profiler: {message}"))
    ///     .start()
    ///     .unwrap();
    /// assert!(profiler.failure().is_none());
    /// ```
    pub fn with_failure_log(mut self, log: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.failure_log = HandlerField(Arc::new(log));
        self
    }

    /// Starts the sampling and export threads.
    pub fn start(self) -> Result<Profiler, StartError> {
        if !(1..=10_000).contains(&self.rate_hz) {
            return Err(StartError::InvalidSetting {
                name: "sample_rate_hz",
                reason: format!("{} is outside 1..=10000", self.rate_hz),
            });
        }
        if self.window < Duration::from_millis(10) || self.window > Duration::from_secs(3600) {
            return Err(StartError::InvalidSetting {
                name: "window",
                reason: format!("{:?} is outside 10ms..=1h", self.window),
            });
        }
        if let Some(b) = self.overhead_budget {
            if !(b > 0.0 && b <= 1.0) {
                return Err(StartError::InvalidSetting {
                    name: "overhead_budget",
                    reason: format!(
                        "{b} is outside (0, 1]: it is a fraction of one core, 0.01 = 1%"
                    ),
                });
            }
        }
        let walker = self.walker.ok_or(StartError::NoWalker)?;
        let mut resource = self.resource;
        if resource.instance.is_none() {
            resource.instance = Some(Resource::default_instance());
        }
        let counters = Arc::new(Counters::default());
        let failures = Arc::new(FailureLog::new(self.failure_log.0));
        let (win_tx, win_rx) = bounded::<Arc<Profile>>(self.export_queue);
        let (done_tx, done_rx) = bounded::<()>(1);
        let stopping = Arc::new(AtomicBool::new(false));

        let exporter_thread = {
            let counters = counters.clone();
            let failures = failures.clone();
            let exporters = self.exporters.clone();
            let timeout = self.export_timeout;
            let rx = win_rx.clone();
            thread::Builder::new()
                .name("span-profile-export".into())
                .spawn(move || export_loop(rx, exporters, timeout, counters, &failures, done_tx))
                .map_err(|e| StartError::Thread("export", e))?
        };

        let sampler = Sampler {
            walker,
            registry: self.registry.clone(),
            spans: self.spans.clone(),
            agg: WindowAggregator::new(self.limits),
            resource,
            interval: Duration::from_nanos(1_000_000_000 / u64::from(self.rate_hz)),
            budget: self.overhead_budget,
            window: self.window,
            counters: counters.clone(),
            win_tx,
            win_rx,
            stop: stopping.clone(),
            pending_dropped_windows: 0,
            registry_seen: self.registry.loss_counters(),
            failures: failures.clone(),
            tick_interval_ns: 0,
            export_seen: (0, Instant::now()),
            fixed: FixedCosts::default(),
            tick_samples: 0,
            clock: self.clock,
        };
        let sampler_thread = thread::Builder::new()
            .name("span-profile-sampler".into())
            .spawn(move || sampler.run())
            .map_err(|e| StartError::Thread("sampler", e))?;

        Ok(Profiler {
            registry: self.registry,
            spans: self.spans,
            counters,
            failures,
            done_rx,
            stopping,
            threads: Mutex::new(Some((sampler_thread, exporter_thread))),
        })
    }
}

/// A running profiler. Dropping it stops it (with a 5 s timeout).
#[derive(Debug)]
pub struct Profiler {
    registry: Arc<ActiveSpanRegistry>,
    spans: Arc<SpanTable>,
    counters: Arc<Counters>,
    failures: Arc<FailureLog>,
    done_rx: Receiver<()>,
    stopping: Arc<AtomicBool>,
    threads: Mutex<Option<(JoinHandle<()>, JoinHandle<()>)>>,
}

impl Profiler {
    /// A builder with defaults: 100 Hz, 60 s windows, resource labels from the environment.
    pub fn builder() -> ProfilerBuilder {
        ProfilerBuilder::default()
    }

    /// The registry that span hooks feed.
    pub fn registry(&self) -> &Arc<ActiveSpanRegistry> {
        &self.registry
    }

    /// Why sampling stopped, if a failure stopped it (the message that was logged).
    pub fn failure(&self) -> Option<&str> {
        self.failures.sampler_failure()
    }

    /// The span table that span hooks feed.
    pub fn span_table(&self) -> &Arc<SpanTable> {
        &self.spans
    }

    /// Counters so far.
    pub fn stats(&self) -> ProfilerStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProfilerStats {
            ticks: l(&c.ticks),
            samples: l(&c.samples),
            windows: l(&c.windows),
            exported_windows: l(&c.exported_windows),
            dropped_windows: l(&c.dropped_windows),
            export_errors: l(&c.export_errors),
            walk_errors: l(&c.walk_errors),
            dropped_samples: l(&c.dropped_samples),
            missed_ticks: l(&c.missed_ticks),
            truncated_stacks: l(&c.truncated_stacks),
            skipped_threads: l(&c.skipped_threads),
            label_overflow: l(&c.label_overflow),
            dropped_spans: l(&c.dropped_spans),
            unsampled_spans: l(&c.unsampled_spans),
            torn_samples: l(&c.torn_samples),
            failed: self.failures.sampler_failure().is_some(),
            sampler_cpu_ns: l(&c.sampler_cpu_ns),
            exporter_cpu_ns: l(&c.exporter_cpu_ns),
        }
    }

    /// Stops sampling, closes the last partial window, exports what is queued and shuts the
    /// exporters down. Returns within `timeout`: if exporters are still busy then, their
    /// thread is left to finish on its own and `Timeout` is returned.
    pub fn shutdown_with_timeout(&self, timeout: Duration) -> Result<ProfilerStats, ExportError> {
        if self.stopping.swap(true, Ordering::AcqRel) {
            return Err(ExportError::AlreadyShutdown);
        }
        let deadline = Instant::now() + timeout;
        // Release: the sampler's Acquire load of `stopping` then sees a completed request.
        // Unpark wakes it from its sleep until the next tick.
        if let Some((sampler, _)) = self
            .threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            sampler.thread().unpark();
        }
        let result = match self.done_rx.recv_deadline(deadline) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => Ok(self.stats()),
            Err(RecvTimeoutError::Timeout) => Err(ExportError::Timeout(timeout)),
        };
        if result.is_ok() {
            let threads = self
                .threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some((s, e)) = threads {
                let _ = s.join();
                let _ = e.join();
            }
        }
        result
    }

    /// [`Profiler::shutdown_with_timeout`] with 5 seconds.
    pub fn shutdown(&self) -> Result<ProfilerStats, ExportError> {
        self.shutdown_with_timeout(Duration::from_secs(5))
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        if !self.stopping.load(Ordering::Acquire) {
            let _ = self.shutdown();
        }
    }
}

struct Sampler {
    walker: Box<dyn StackWalkerDebug>,
    registry: Arc<ActiveSpanRegistry>,
    spans: Arc<SpanTable>,
    agg: WindowAggregator,
    resource: Resource,
    /// The configured interval.
    interval: Duration,
    /// The CPU budget, as a fraction of one core.
    budget: Option<f64>,
    window: Duration,
    counters: Arc<Counters>,
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
    clock: WallClock,
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
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

impl Sampler {
    fn run(mut self) {
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
        let mut next = Instant::now() + interval;
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
            next += interval;
            if next < now {
                // Fell behind (a long walk or a stopped process): skip, do not burst.
                next = now + interval;
            }
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
        let registry = self.registry.loss_counters();
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
            SpanSource::Registry => self.sampler.registry.current(s.key),
            SpanSource::Unknown => None,
        };
        self.record(s, active);
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
        let slot = sampler.tick_samples as usize;
        sampler
            .agg
            .add_raw(slot, s, span, route, sampler.tick_interval_ns);
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

fn export_loop(
    rx: Receiver<Arc<Profile>>,
    exporters: Vec<Arc<dyn Exporter>>,
    timeout: Duration,
    counters: Arc<Counters>,
    failures: &FailureLog,
    done: Sender<()>,
) {
    let clock = ThreadCpuClock::for_current_thread();
    let mut cpu_last = clock.now_ns();
    let mut errors_since_last = 0u64;
    while let Ok(window) = rx.recv() {
        let carried = std::mem::take(&mut errors_since_last);
        let window = if carried > 0 {
            let mut w = (*window).clone();
            w.stats.export_errors = carried;
            Arc::new(w)
        } else {
            window
        };
        let mut ok = true;
        let mut delivered = false;
        for e in &exporters {
            let exported = catch_unwind(AssertUnwindSafe(|| {
                block_on_timeout(e.export(window.clone()), timeout)
            }))
            .unwrap_or_else(|panic| {
                failures.exporter_panicked(&*panic);
                None
            });
            match exported {
                Some(Ok(())) => delivered = true,
                Some(Err(_)) | None => {
                    ok = false;
                    errors_since_last += 1;
                    counters.export_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if ok {
            counters.exported_windows.fetch_add(1, Ordering::Relaxed);
        }
        if !delivered {
            // No exporter took the window, so the earlier failures it carried were not
            // reported either: carry them on to the next window.
            errors_since_last += carried;
        }
        let cpu = clock.now_ns();
        let used = cpu.saturating_sub(cpu_last);
        counters.exporter_cpu_ns.fetch_add(used, Ordering::Relaxed);
        counters
            .exporter_cpu_pending
            .fetch_add(used, Ordering::Relaxed);
        cpu_last = cpu;
    }
    for e in &exporters {
        if block_on_timeout(e.force_flush(), timeout).is_none_or(|r| r.is_err()) {
            counters.export_errors.fetch_add(1, Ordering::Relaxed);
        }
        let _ = block_on_timeout(e.shutdown_with_timeout(timeout), timeout);
    }
    let _ = done.send(());
}

struct ThreadWaker(Thread);
impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future on the current thread until it completes or `timeout` passes. Exporters are
/// async for the benefit of async callers; the profiler needs no async runtime to drive them.
pub(crate) fn block_on_timeout<F: Future>(fut: F, timeout: Duration) -> Option<F::Output> {
    let deadline = Instant::now() + timeout;
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::park_timeout(deadline - now);
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
        let (win_tx, win_rx) = bounded(1);
        let interval = Duration::from_nanos(1_000_000_000 / u64::from(rate_hz.max(1)));
        Self {
            sampler: Sampler {
                walker: Box::new(walker),
                registry: registry.clone(),
                spans,
                agg: WindowAggregator::new(AggregatorLimits::default()),
                resource: Resource::default(),
                interval,
                budget: None,
                window: Duration::from_secs(60),
                counters: Arc::new(Counters::default()),
                win_tx,
                win_rx,
                stop: Arc::new(AtomicBool::new(false)),
                pending_dropped_windows: 0,
                registry_seen: registry.loss_counters(),
                failures: Arc::new(FailureLog::new(Arc::new(log_to_stderr))),
                tick_interval_ns: interval.as_nanos() as u64,
                export_seen: (0, Instant::now()),
                fixed: FixedCosts::default(),
                tick_samples: 0,
                clock: WallClock::default(),
            },
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

/// The builder's failure handler (a closure, so `Debug` by hand).
#[derive(Clone)]
struct HandlerField(FailureHandler);

impl std::fmt::Debug for HandlerField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FailureHandler")
    }
}
