//! [`ProfilerBuilder`]: the settings of a [`Profiler`], checked, and the threads started.

use std::ops::RangeInclusive;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::{self};
use std::time::Duration;

use crossbeam_channel::bounded;

use crate::aggregate::AggregatorLimits;
use crate::failure::{log_to_stderr, FailureHandler, FailureLog};
use crate::labels::ResourceAttributeError;
use crate::registry::ActiveSpanRegistry;
use crate::spans::{SpanScope, SpanTable};
use crate::{Exporter, Profile, Resource, StackWalker};

use super::export_thread::export_loop;
use super::sampler::{Sampler, SamplerSetup, StackWalkerDebug, WallClock};
use super::{Counters, LazyRegistry, Ledger, Profiler, StartError};

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
    exporter_shutdown_timeout: Duration,
    failure_log: HandlerField,
    limits: AggregatorLimits,
    overhead_budget: Option<f64>,
    /// Made on first ask ([`ProfilerBuilder::registry`], [`Profiler::registry`]): a profiler
    /// whose walker reads spans another way never holds one.
    registry: LazyRegistry,
    spans: Arc<SpanTable>,
    clock: WallClock,
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
            exporter_shutdown_timeout: Duration::from_secs(5),
            failure_log: HandlerField(Arc::new(log_to_stderr)),
            limits: AggregatorLimits::default(),
            overhead_budget: Some(0.01),
            registry: LazyRegistry::default(),
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
    /// Samples per second per thread ([`Self::SAMPLE_RATE_HZ`]: 1 to 10,000; default 100).
    pub fn with_sample_rate_hz(mut self, hz: u32) -> Self {
        self.rate_hz = hz;
        self
    }
    /// Window length ([`Self::WINDOW`]: 10 ms to 1 h; default 60 s). Windows end on
    /// wall-clock multiples of it.
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
    /// The timeout passed to each exporter's
    /// [`shutdown_with_timeout`](Exporter::shutdown_with_timeout) when the profiler stops
    /// (default 5 s). Exporters bound their `export` calls themselves (the [`Exporter`]
    /// contract); a network exporter's request timeout is its delivery setting.
    pub fn with_exporter_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.exporter_shutdown_timeout = timeout;
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
    /// The sampler never reads it: walkers that attribute samples through a registry ask it
    /// themselves ([`SpanSource::current_in`](crate::SpanSource::current_in)); each window
    /// reports its loss counters.
    pub fn with_registry(mut self, registry: Arc<ActiveSpanRegistry>) -> Self {
        self.registry = LazyRegistry::with(registry);
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
    /// The registry for span hooks to feed and walkers to read, made (with the default
    /// capacity) on first ask unless [`with_registry`](Self::with_registry) gave one.
    pub fn registry(&self) -> &Arc<ActiveSpanRegistry> {
        self.registry.get()
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

    /// The sampling rates [`ProfilerBuilder::start`] accepts, per second per thread: the one
    /// definition (the Python package checks its settings against it).
    pub const SAMPLE_RATE_HZ: RangeInclusive<u32> = 1..=10_000;
    /// The window lengths [`ProfilerBuilder::start`] accepts.
    pub const WINDOW: RangeInclusive<Duration> =
        Duration::from_millis(10)..=Duration::from_secs(3600);

    /// Checks the settings as [`ProfilerBuilder::start`] does, without starting anything: the
    /// rate within [`Self::SAMPLE_RATE_HZ`], the window within [`Self::WINDOW`], the overhead
    /// budget in (0, 1].
    ///
    /// ```
    /// use span_profile_core::{Profiler, StartError};
    /// let err = Profiler::builder().with_sample_rate_hz(0).check().unwrap_err();
    /// assert!(matches!(err, StartError::InvalidSetting { name: "sample_rate_hz", .. }));
    /// assert!(err.to_string().contains("1..=10000"), "{err}");
    /// ```
    pub fn check(&self) -> Result<(), StartError> {
        if !Self::SAMPLE_RATE_HZ.contains(&self.rate_hz) {
            return Err(StartError::InvalidSetting {
                name: "sample_rate_hz",
                reason: format!("{} is outside {:?}", self.rate_hz, Self::SAMPLE_RATE_HZ),
            });
        }
        if !Self::WINDOW.contains(&self.window) {
            return Err(StartError::InvalidSetting {
                name: "window",
                reason: format!("{:?} is outside {:?}", self.window, Self::WINDOW),
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
        Ok(())
    }

    /// Starts the sampling and export threads, once [`ProfilerBuilder::check`] passes.
    pub fn start(self) -> Result<Profiler, StartError> {
        self.check()?;
        let walker = self.walker.ok_or(StartError::NoWalker)?;
        let mut resource = self.resource;
        if resource.instance.is_none() {
            resource.instance = Some(Resource::default_instance());
        }
        let counters = Arc::new(Counters::default());
        let capped = cap_resource(&mut resource);
        if capped > 0 {
            counters
                .capped_resource_attributes
                .store(capped, std::sync::atomic::Ordering::Relaxed);
            log::warn!(
                target: "span_profile::resource",
                "{capped} resource attribute(s) dropped or cut: at most {MAX_RESOURCE_ATTRIBUTES} attributes of at most {MAX_RESOURCE_VALUE_BYTES} bytes are kept in each window (check OTEL_RESOURCE_ATTRIBUTES)"
            );
        }
        let ledger = Arc::new(Ledger::new(self.exporters.clone()));
        let failures = Arc::new(FailureLog::new(self.failure_log.0));
        let (win_tx, win_rx) = bounded::<Arc<Profile>>(self.export_queue);
        let (done_tx, done_rx) = bounded::<()>(1);
        let stopping = Arc::new(AtomicBool::new(false));

        let exporter_thread = {
            let counters = counters.clone();
            let failures = failures.clone();
            let ledger = ledger.clone();
            let timeout = self.exporter_shutdown_timeout;
            let rx = win_rx.clone();
            thread::Builder::new()
                .name("span-profile-export".into())
                .spawn(move || export_loop(rx, &ledger, timeout, counters, &failures, done_tx))
                .map_err(|e| StartError::Thread("export", e))?
        };

        let sampler = Sampler::new(SamplerSetup {
            walker,
            registry: self.registry.clone(),
            spans: self.spans.clone(),
            limits: self.limits,
            resource,
            rate_hz: self.rate_hz,
            budget: self.overhead_budget,
            window: self.window,
            counters: counters.clone(),
            ledger: Some(ledger.clone()),
            failures: failures.clone(),
            windows: (win_tx, win_rx),
            stop: stopping.clone(),
            clock: self.clock,
        });
        let sampler_thread = thread::Builder::new()
            .name("span-profile-sampler".into())
            .spawn(move || sampler.run())
            .map_err(|e| StartError::Thread("sampler", e))?;

        // A span links to its profile if any exporter stores samples under the span's own id.
        let span_scope = if self
            .exporters
            .iter()
            .any(|e| e.span_scope() == SpanScope::All)
        {
            SpanScope::All
        } else {
            SpanScope::LocalRoot
        };
        Ok(Profiler {
            span_scope,
            registry: self.registry,
            spans: self.spans,
            counters,
            ledger,
            failures,
            done_rx,
            stopping,
            threads: Mutex::new(Some((sampler_thread, exporter_thread))),
        })
    }
}

/// Resource attributes kept in each window; the rest are dropped and counted (issue 27).
const MAX_RESOURCE_ATTRIBUTES: usize = 128;
/// Bytes of a resource attribute's key or value kept; longer ones are cut and counted.
const MAX_RESOURCE_VALUE_BYTES: usize = 4096;

/// Drops the attributes past [`MAX_RESOURCE_ATTRIBUTES`] and cuts keys and values to
/// [`MAX_RESOURCE_VALUE_BYTES`] (at a character boundary); returns how many attributes were
/// dropped or cut.
fn cap_resource(r: &mut Resource) -> u64 {
    let mut capped = r.attributes.len().saturating_sub(MAX_RESOURCE_ATTRIBUTES) as u64;
    r.attributes.truncate(MAX_RESOURCE_ATTRIBUTES);
    for (k, v) in &mut r.attributes {
        let mut cut = false;
        for s in [k, v] {
            if s.len() > MAX_RESOURCE_VALUE_BYTES {
                let mut end = MAX_RESOURCE_VALUE_BYTES;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
                cut = true;
            }
        }
        capped += u64::from(cut);
    }
    capped
}

/// The builder's failure handler (a closure, so `Debug` by hand).
#[derive(Clone)]
struct HandlerField(FailureHandler);

impl std::fmt::Debug for HandlerField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FailureHandler")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_attributes_are_capped_in_count_and_length_and_counted() {
        let mut r = Resource {
            attributes: (0..10_000).map(|i| (format!("k{i}"), "v".into())).collect(),
            ..Resource::default()
        };
        r.attributes[0].1 = "é".repeat(3000);
        assert_eq!(cap_resource(&mut r), 10_000 - 128 + 1);
        assert_eq!(r.attributes.len(), MAX_RESOURCE_ATTRIBUTES);
        assert!(r.attributes[0].1.len() <= MAX_RESOURCE_VALUE_BYTES);
        assert_eq!(r.attributes[1], ("k1".into(), "v".into()));
    }
    use crate::Profiler;

    #[test]
    fn no_registry_is_made_until_someone_asks_for_one() {
        let b = Profiler::builder();
        assert!(b.registry.made().is_none());
        let r = b.registry().clone();
        let again = b.registry();
        assert!(Arc::ptr_eq(&r, again), "one registry, made once");

        let given = Arc::new(ActiveSpanRegistry::with_capacity(64));
        let b = Profiler::builder().with_registry(given.clone());
        assert!(Arc::ptr_eq(b.registry.made().unwrap(), &given));
    }
}
