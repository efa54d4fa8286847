//! The native agent: one running [`Profiler`] plus the span hooks that feed its registry and
//! span table.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};

use span_profile_core::{
    ActiveSpanRegistry, ExportError, Profiler, ProfilerStats, SpanEnd, SpanId, SpanScope,
    SpanStart, SpanTable, StartError, TraceId,
};
use span_profile_export::{exporter_for_output, parse_output, ExporterEnv, Output};

use super::context::{slot_layout, HookCounters, PyActiveSpan, TaskTag};
use super::settings;
use super::span_hooks::{
    set_profile_id, set_profile_id_ending, span_context, text, time_ns, Attributes, Hex16,
    TraceIds, CONTEXT, END_TIME, NAME, PARENT, START_TIME,
};
use super::span_objects::SpanObjects;
use super::walker::{self, WalkerHandles};
use crate::walker::{
    otel_span_object, ContextTarget, DictLayout, HamtTypes, MemoryReader, OtelTarget,
    ProcessVmReader, PythonVersion, ReadMode, SlotData, SlotVar,
};
use span_profile_core::labels::LabelValues;
use span_profile_core::{ActiveSpan, SpanContext};

/// A running profiler and its hooks. Created by `span_profile.start()`; at most one per
/// process is installed at a time (the Python package enforces that).
#[pyclass(frozen, name = "Agent", module = "span_profile._native")]
#[derive(Debug)]
pub(crate) struct NativeAgent {
    profiler: Mutex<Option<Profiler>>,
    final_stats: Mutex<Option<ProfilerStats>>,
    /// What stopped sampling, if a failure did (kept across `stop`).
    final_failure: Mutex<Option<String>>,
    registry: Arc<ActiveSpanRegistry>,
    spans: Arc<SpanTable>,
    /// The SDK span objects our processor started, by address (ADR 0011).
    span_objects: Arc<SpanObjects>,
    /// Trace ids the span starts converted lately.
    trace_ids: TraceIds,
    /// Whether the sampler reads OpenTelemetry's current context (else no sample has a span).
    reads_otel_context: bool,
    counters: Arc<HookCounters>,
    walker_handles: WalkerHandles,
    walker_kind: String,
    service: String,
    instance: Option<String>,
    output: String,
    /// Which spans get `pyroscope.profile.id`: those whose own id the output keeps samples
    /// under ([`SpanScope::links`]).
    link_scope: SpanScope,
    resource_problems: Vec<String>,
    /// The span slot and task tag ContextVars the walker looks up (kept alive with it).
    _context_vars: Vec<Py<PyAny>>,
}

/// OpenTelemetry's context, as `start()` hands it over: its runtime context's ContextVar, the
/// `Context` class, the span key, and a probe (a `Context` holding `probe_span` as its span).
type OtelArgs<'a, 'py> = (
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
);

/// [`OtelArgs`] as the constructor receives them.
type OtelObjects<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
);

/// The [`OtelTarget`] for OpenTelemetry's context, once a read of the probe context found the
/// probe span; else the reason it cannot be read.
fn otel_target(
    reader: &dyn MemoryReader,
    layout: DictLayout,
    (var, context_type, span_key, probe_context, probe_span): OtelArgs<'_, '_>,
) -> Result<OtelTarget, String> {
    let target = OtelTarget {
        var: var.as_ptr() as u64,
        hash: var.hash().map_err(|e| e.to_string())? as i64,
        context_type: context_type.as_ptr() as u64,
        span_key: span_key.as_ptr() as u64,
    };
    match otel_span_object(reader, layout, &target, probe_context.as_ptr() as u64) {
        Ok(Some(found)) if found == probe_span.as_ptr() as u64 => Ok(target),
        Ok(found) => Err(format!(
            "a probe context's span was read as {found:?}, not {:#x}",
            probe_span.as_ptr() as u64
        )),
        Err(e) => Err(format!("a probe context could not be read: {e:?}")),
    }
}

/// What the walker needs to find OpenTelemetry's context and our ContextVars' values in
/// thread contexts, or `None` when this interpreter's HAMT node types cannot be found (samples
/// then carry no span). A problem with OpenTelemetry's context is pushed to `problems`.
fn context_target(
    py: Python<'_>,
    python_version: (u8, u8),
    otel: Option<OtelArgs<'_, '_>>,
    slot_var: Option<&Bound<'_, PyAny>>,
    task_var: Option<&Bound<'_, PyAny>>,
    problems: &mut Vec<String>,
) -> PyResult<Option<ContextTarget>> {
    let types = match HamtTypes::current_process() {
        Some(t) => Some(t),
        None => {
            // 3.11/3.12 keep the node types private: find them from a live empty Context.
            let empty = py.import("contextvars")?.getattr("Context")?.call0()?;
            let type_type = py.get_type::<pyo3::types::PyType>();
            ProcessVmReader::new().ok().and_then(|r| {
                HamtTypes::discover(&r, empty.as_ptr() as u64, type_type.as_ptr() as u64)
            })
        }
    };
    let Some(types) = types else {
        return Ok(None);
    };
    let (Some(trace_id), Some(span_id)) = (TraceId::from_u128(1), SpanId::from_u64(1)) else {
        return Ok(None);
    };
    let var =
        |v: &Bound<'_, PyAny>, (value_type, data_offset): (u64, usize)| -> PyResult<SlotVar> {
            Ok(SlotVar {
                var: v.as_ptr() as u64,
                hash: v.hash()? as i64,
                value_type,
                data_offset,
            })
        };
    let span = match slot_var {
        Some(v) => {
            let probe = Bound::new(
                py,
                PyActiveSpan::new(ActiveSpan {
                    ctx: SpanContext {
                        trace_id,
                        span_id,
                        local_root_span_id: span_id,
                    },
                    route: LabelValues::BACKGROUND,
                }),
            )?;
            var(v, slot_layout(&probe, |p| &p.1))?
        }
        None => SlotVar::default(),
    };
    let task = match task_var {
        Some(v) => {
            let probe = Bound::new(py, TaskTag(SlotData::task(0)))?;
            var(v, slot_layout(&probe, |t| &t.0))?
        }
        None => SlotVar::default(),
    };
    let layout = DictLayout::for_version(PythonVersion::new(python_version.0, python_version.1));
    let otel = match (otel, ProcessVmReader::new()) {
        (Some(args), Ok(reader)) => otel_target(&reader, layout, args).unwrap_or_else(|why| {
            problems.push(format!(
                "OpenTelemetry's current context cannot be read ({why}); samples carry no spans"
            ));
            OtelTarget::default()
        }),
        (Some(_), Err(e)) => {
            problems.push(format!(
                "OpenTelemetry's current context cannot be read ({e}); samples carry no spans"
            ));
            OtelTarget::default()
        }
        (None, _) => OtelTarget::default(),
    };
    Ok(Some(ContextTarget {
        types,
        otel,
        span,
        task,
    }))
}

fn start_error(e: StartError) -> PyErr {
    match e {
        StartError::InvalidSetting { .. } => PyValueError::new_err(e.to_string()),
        other => PyRuntimeError::new_err(format!(
            "span_profile could not start: {other}; check the process's thread limits"
        )),
    }
}

impl NativeAgent {
    fn lock_profiler(&self) -> std::sync::MutexGuard<'_, Option<Profiler>> {
        // Only start/stop/fork take this lock and each leaves the Option coherent.
        self.profiler.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failure(&self) -> Option<String> {
        if let Some(p) = self.lock_profiler().as_ref() {
            return p.failure().map(str::to_string);
        }
        self.final_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn profiler_stats(&self) -> ProfilerStats {
        if let Some(p) = self.lock_profiler().as_ref() {
            return p.stats();
        }
        self.final_stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or_default()
    }
}

impl NativeAgent {
    fn try_on_start(&self, span: &Bound<'_, PyAny>) -> PyResult<()> {
        let sc = CONTEXT.of(span)?;
        let own = span_context(&sc)?;
        let (trace_id, span_id) = (own.trace_id(&self.trace_ids)?, own.span_id);
        let parent = PARENT.of(span)?;
        let (parent_id, remote) = if parent.is_none() {
            (0, false)
        } else {
            let p = span_context(&parent)?;
            (p.span_id, p.is_remote)
        };
        let is_root = parent_id == 0 || remote;
        // Only a local root's attributes are read: a local child inherits its root's route.
        // Where the SDK calls `_on_ending`, the link is set there, on the spans that may have
        // samples; before, every span in the link scope gets it now.
        let links = !ends_at_ending() && self.link_scope.links(is_root);
        let attributes = if is_root || links {
            Attributes::of(span)?
        } else {
            None
        };
        let route = match (&attributes, is_root) {
            (Some(a), true) => a.route()?,
            _ => None,
        };
        let route = route.as_ref().map(text).transpose()?;
        let name = NAME.of(span)?;
        let name = name.cast::<PyString>()?;
        let start_ns = time_ns(span, &START_TIME)?;
        let Some(active) = self.span_start(
            trace_id,
            span_id,
            parent_id,
            remote,
            &text(name)?,
            route.as_deref(),
            start_ns,
        ) else {
            return Ok(());
        };
        self.span_objects.insert(span, active.0);
        if links {
            let id = Hex16::new(active.0.ctx.span_id.to_u64());
            set_profile_id(span, attributes.as_ref(), id.as_str())?;
        }
        Ok(())
    }

    /// Records a span end (from any thread). Unknown ids are ignored.
    fn span_end(&self, span_id: u64, end_ns: u64, route: Option<&str>) -> SpanEnd {
        match SpanId::from_u64(span_id) {
            Some(id) => {
                self.counters.spans_ended.fetch_add(1, Ordering::Relaxed);
                self.spans.end(id, end_ns, route)
            }
            None => SpanEnd::NotOpen,
        }
    }

    /// The end of a span whose ids are read from the span itself: `on_end`'s `ReadableSpan`
    /// (made for the call, so never listed), or an ending span the span-object table did not
    /// list. Returns its id, whether it is a local root, and what the span table said.
    fn end_from_fields(&self, span: &Bound<'_, PyAny>) -> PyResult<(u64, bool, SpanEnd)> {
        let sc = CONTEXT.of(span)?;
        let span_id = span_context(&sc)?.span_id;
        let parent = PARENT.of(span)?;
        let is_root = parent.is_none() || span_context(&parent)?.is_remote;
        let end = self.record_end(span, span_id, is_root)?;
        Ok((span_id, is_root, end))
    }

    /// Records the end of span `span_id`, reading the end time and (for a local root) the
    /// route from `span`.
    fn record_end(
        &self,
        span: &Bound<'_, PyAny>,
        span_id: u64,
        read_route: bool,
    ) -> PyResult<SpanEnd> {
        let route = if read_route {
            Attributes::of(span)?
                .map(|a| a.route())
                .transpose()?
                .flatten()
        } else {
            None
        };
        let route = route.as_ref().map(text).transpose()?;
        let end_ns = time_ns(span, &END_TIME)?;
        Ok(self.span_end(span_id, end_ns, route.as_deref()))
    }

    fn try_on_end(&self, span: &Bound<'_, PyAny>) -> PyResult<()> {
        self.end_from_fields(span).map(drop)
    }

    /// `_on_ending`: the live span, which `on_start` listed with its ids, local root and route.
    /// Only its end time is read (and a root's route, if it had none at start: some
    /// instrumentations set it once routing is done). A span that may have samples gets
    /// `pyroscope.profile.id` if the link scope covers it, so a link never leads to an empty
    /// profile.
    fn try_on_ending(&self, span: &Bound<'_, PyAny>) -> PyResult<()> {
        let (span_id, is_root, end) = match self.span_objects.get(span) {
            Some(active) => {
                let span_id = active.ctx.span_id.to_u64();
                let is_root = active.ctx.local_root_span_id == active.ctx.span_id;
                let read_route = is_root && active.route == LabelValues::BACKGROUND;
                (
                    span_id,
                    is_root,
                    self.record_end(span, span_id, read_route)?,
                )
            }
            None => self.end_from_fields(span)?,
        };
        if end == SpanEnd::Sampled && self.link_scope.links(is_root) {
            let id = Hex16::new(span_id);
            let written = match Attributes::of(span)? {
                Some(a) => set_profile_id_ending(&a, id.as_str())?,
                None => false,
            };
            if !written {
                self.counters
                    .links_unwritten
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

#[pymethods]
impl NativeAgent {
    /// Starts the sampler and export threads. Every argument is already validated for type by
    /// the Python package; ranges are checked here and by the core.
    #[new]
    #[pyo3(signature = (*, output, sample_rate_hz, window_s, service=None, version=None,
                        environment=None, instance=None, forked=false, python_version=(3, 0),
                        overhead_budget=0.01, otel=None, slot_var=None, task_var=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        output: &str,
        sample_rate_hz: u32,
        window_s: f64,
        service: Option<&str>,
        version: Option<&str>,
        environment: Option<&str>,
        instance: Option<&str>,
        forked: bool,
        python_version: (u8, u8),
        overhead_budget: f64,
        otel: Option<OtelObjects<'_>>,
        slot_var: Option<&Bound<'_, PyAny>>,
        task_var: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        // One parser for every output form (directory, file://, pyroscope+http(s)://,
        // otlp+http(s)://), shared with the CLI; errors say what is accepted.
        let parsed = parse_output(output).map_err(|e| PyValueError::new_err(e.to_string()))?;
        if !window_s.is_finite() || !(1.0..=3600.0).contains(&window_s) {
            return Err(PyValueError::new_err(format!(
                "window_s={window_s} is out of range; use 1 to 3600 seconds"
            )));
        }
        if !(1..=10_000).contains(&sample_rate_hz) {
            return Err(PyValueError::new_err(format!(
                "sample_rate_hz={sample_rate_hz} is out of range; use 1 to 10000"
            )));
        }
        if let Output::Dir(dir) = &parsed {
            std::fs::create_dir_all(dir).map_err(|e| {
                PyValueError::new_err(format!(
                    "output directory {} cannot be created: {e}; pass a writable directory",
                    dir.display()
                ))
            })?;
        }
        let exporter = exporter_for_output(output, &ExporterEnv::from_process())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let (resource, mut resource_problems) =
            settings::resource(service, version, environment, instance, forked);
        let service = resource.service.clone();
        let instance = resource.instance.clone();
        let read_mode = match std::env::var("SPAN_PROFILE_MEMORY_READS") {
            Ok(v) => ReadMode::parse(&v).map_err(PyValueError::new_err)?,
            Err(_) => ReadMode::Guarded,
        };
        let span_objects = Arc::new(SpanObjects::default());
        let target = context_target(
            py,
            python_version,
            otel.as_ref().map(|(a, b, c, d, e)| (a, b, c, d, e)),
            slot_var,
            task_var,
            &mut resource_problems,
        )?;
        let reads_otel_context = target.is_some_and(|t| t.otel.var != 0);
        let (walker, walker_handles, walker_kind) = walker::build(
            python_version.0,
            python_version.1,
            target.map(|t| (t, span_objects.table())),
            read_mode,
            walker::own_package_dir(py),
        );
        // Nothing enters spans here: the sampler reads OpenTelemetry's own context, and spans
        // resolve through the span-object table (ADR 0011); a sample whose context cannot be
        // read says `SpanSource::Unknown`. No sample asks the registry, which the builder
        // still requires: it gets the smallest table (64 slots) rather than the default 4,096,
        // as every slot is written at start.
        let registry = Arc::new(ActiveSpanRegistry::with_capacity(64));
        let spans = Arc::new(SpanTable::default());
        let profiler = Profiler::builder()
            .with_resource(resource)
            .with_sample_rate_hz(sample_rate_hz)
            // 0 turns the cap off.
            .with_overhead_budget((overhead_budget != 0.0).then_some(overhead_budget))
            .with_window(Duration::from_secs_f64(window_s))
            .with_registry(registry.clone())
            .with_span_table(spans.clone())
            .with_shared_exporter(Arc::from(exporter))
            .with_walker(walker)
            .start()
            .map_err(start_error)?;
        // The spans to link are those the exporter stores samples under.
        let link_scope = profiler.span_scope();
        Ok(Self {
            profiler: Mutex::new(Some(profiler)),
            final_stats: Mutex::new(None),
            final_failure: Mutex::new(None),
            registry,
            spans,
            span_objects,
            trace_ids: TraceIds::default(),
            reads_otel_context,
            counters: Arc::new(HookCounters::default()),
            walker_handles,
            walker_kind,
            service,
            instance,
            output: output.to_string(),
            link_scope,
            resource_problems,
            _context_vars: slot_var
                .into_iter()
                .chain(task_var)
                .chain(otel.iter().flat_map(|(var, ty, key, _, _)| [var, ty, key]))
                .map(|v| v.clone().unbind())
                .collect(),
        })
    }

    /// Records a span start in the span table; returns what samples under the span are
    /// labelled with, or `None` for an invalid (all-zero) id.
    #[pyo3(signature = (trace_id, span_id, parent_span_id, parent_is_remote, name, route, start_ns))]
    #[allow(clippy::too_many_arguments)]
    fn span_start(
        &self,
        trace_id: u128,
        span_id: u64,
        parent_span_id: u64,
        parent_is_remote: bool,
        name: &str,
        route: Option<&str>,
        start_ns: u64,
    ) -> Option<PyActiveSpan> {
        let (Some(trace_id), Some(span_id)) =
            (TraceId::from_u128(trace_id), SpanId::from_u64(span_id))
        else {
            return None;
        };
        self.counters.spans_started.fetch_add(1, Ordering::Relaxed);
        Some(PyActiveSpan::new(self.spans.start(SpanStart {
            trace_id,
            span_id,
            parent_span_id: SpanId::from_u64(parent_span_id),
            parent_is_remote,
            name,
            route,
            start_unix_ns: start_ns,
        })))
    }

    /// `SpanProcessor.on_start`, natively: records the SDK span in the span table, caches its
    /// `ActiveSpan` on it (for the context hook) and sets `pyroscope.profile.id`. Never raises;
    /// failures are counted in `hook_errors`.
    fn on_start(&self, span: &Bound<'_, PyAny>) {
        self.span_objects.span_boundary();
        if self.try_on_start(span).is_err() {
            self.counters.hook_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `SpanProcessor.on_end`, natively: records the end time (and a root's `http.route`).
    /// Never raises.
    fn on_end(&self, span: &Bound<'_, PyAny>) {
        self.span_objects.span_boundary();
        if self.try_on_end(span).is_err() {
            self.counters.hook_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `SpanProcessor._on_ending`, natively: records the end and sets the link of a span that
    /// may have samples. Never raises.
    fn on_ending(&self, span: &Bound<'_, PyAny>) {
        self.span_objects.span_boundary();
        if self.try_on_ending(span).is_err() {
            self.counters.hook_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The tag to store in a new asyncio task's context: the id of `name` (already folded to
    /// few values by the caller; past the name cap it is reported as `Task`).
    fn task_tag(&self, name: &str) -> TaskTag {
        TaskTag(SlotData::task(self.walker_handles.task_names.intern(name)))
    }

    /// Counts a failure inside a Python hook (which never raises into the application).
    fn hook_error(&self) {
        self.counters.hook_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// What `span` (an SDK span object) is listed as in the span-object table: the span the
    /// sampler attributes samples to while `span` is current, or `None` if our processor did
    /// not start it (or let it go).
    fn active_of(&self, span: &Bound<'_, PyAny>) -> Option<PyActiveSpan> {
        self.span_objects.get(span).map(PyActiveSpan::new)
    }

    /// A thread started (or was found running at start): its name for samples, and its OS
    /// thread id (for CPU time on 3.9 and 3.10).
    #[pyo3(signature = (thread, name, native_id=0))]
    fn thread_started(&self, thread: u64, name: &str, native_id: u32) {
        self.walker_handles.threads.set_thread_name(thread, name);
        if native_id != 0 {
            self.walker_handles.threads.set_native_id(thread, native_id);
        }
    }

    /// A thread is about to exit: forget its name (thread idents are reused).
    fn thread_exited(&self, thread: u64) {
        self.walker_handles.threads.forget(thread);
    }

    /// Stops sampling, writes the last window and waits up to `timeout_s` for the exporter.
    /// Returns `None` on success or a message saying what did not finish. Idempotent.
    #[pyo3(signature = (timeout_s=5.0))]
    fn stop(&self, py: Python<'_>, timeout_s: f64) -> Option<String> {
        let profiler = self.lock_profiler().take()?;
        self.span_objects.clear();
        self.trace_ids.clear();
        let timeout = Duration::from_secs_f64(timeout_s.clamp(0.0, 3600.0));
        // The sampler and exporter never need the GIL; let Python threads run meanwhile.
        let (result, stats) = py.detach(move || {
            let r = profiler.shutdown_with_timeout(timeout);
            let stats = (profiler.stats(), profiler.failure().map(str::to_string));
            if r.is_err() {
                // Still exporting: leave its threads to finish, without a second wait in drop.
                std::mem::forget(profiler);
            }
            (r, stats)
        });
        let (stats, failure) = stats;
        *self
            .final_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = failure;
        *self
            .final_stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(stats);
        match result {
            Ok(_) | Err(ExportError::AlreadyShutdown) => None,
            Err(e) => Some(format!(
                "span_profile.stop(): {e}; the last window may be missing from {}",
                self.output
            )),
        }
    }

    /// In a forked child: the parent's threads do not exist here, so the profiler is
    /// abandoned without a shutdown (which would wait for them).
    fn abandon_after_fork(&self) {
        self.span_objects.clear();
        self.trace_ids.clear();
        if let Some(p) = self.lock_profiler().take() {
            *self
                .final_stats
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(p.stats());
            std::mem::forget(p);
        }
    }

    /// Whether sampling is running.
    #[getter]
    fn running(&self) -> bool {
        self.lock_profiler().is_some()
    }

    #[getter]
    fn service(&self) -> &str {
        &self.service
    }

    #[getter]
    fn instance(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    /// Whether samples take their span from OpenTelemetry's current context (false when the
    /// runtime context or this interpreter's contexts cannot be read).
    #[getter]
    fn reads_otel_context(&self) -> bool {
        self.reads_otel_context
    }

    #[getter]
    fn walker(&self) -> &str {
        &self.walker_kind
    }

    /// Problems found in `OTEL_RESOURCE_ATTRIBUTES` (the valid entries were used).
    #[getter]
    fn resource_problems(&self) -> Vec<String> {
        self.resource_problems.clone()
    }

    /// Counters: the profiler's, the registry's and the hooks'.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let p = self.profiler_stats();
        let r = self.registry.stats();
        let c = &self.counters;
        let d = PyDict::new(py);
        d.set_item("running", self.running())?;
        d.set_item("walker", &self.walker_kind)?;
        d.set_item("ticks", p.ticks)?;
        d.set_item("samples", p.samples)?;
        d.set_item("windows", p.windows)?;
        d.set_item("exported_windows", p.exported_windows)?;
        d.set_item("dropped_windows", p.dropped_windows)?;
        d.set_item("export_errors", p.export_errors)?;
        d.set_item("walk_errors", p.walk_errors)?;
        d.set_item("dropped_samples", p.dropped_samples)?;
        d.set_item("sampler_cpu_ns", p.sampler_cpu_ns)?;
        d.set_item("exporter_cpu_ns", p.exporter_cpu_ns)?;
        d.set_item("missed_ticks", p.missed_ticks)?;
        d.set_item("truncated_stacks", p.truncated_stacks)?;
        d.set_item("skipped_threads", p.skipped_threads)?;
        d.set_item("label_overflow", p.label_overflow)?;
        d.set_item("dropped_spans", p.dropped_spans)?;
        d.set_item("unsampled_spans", p.unsampled_spans)?;
        d.set_item("torn_samples", p.torn_samples)?;
        d.set_item("failed", p.failed)?;
        d.set_item("failure", self.failure())?;
        d.set_item("registry_active_keys", r.active_keys)?;
        d.set_item("registry_full", r.full)?;
        d.set_item("registry_unmatched_exits", r.unmatched_exits)?;
        d.set_item("registry_contended_reads", r.contended_reads)?;
        d.set_item("spans_started", c.spans_started.load(Ordering::Relaxed))?;
        d.set_item("spans_ended", c.spans_ended.load(Ordering::Relaxed))?;
        d.set_item("hook_errors", c.hook_errors.load(Ordering::Relaxed))?;
        d.set_item("links_unwritten", c.links_unwritten.load(Ordering::Relaxed))?;
        let o = self.span_objects.stats();
        d.set_item("span_objects", o.listed)?;
        d.set_item("span_objects_full", o.full)?;
        d.set_item("span_objects_evicted", o.evicted)?;
        d.set_item("span_objects_contended_reads", o.contended)?;
        if let Some(w) = &self.walker_handles.counters {
            let w = w.snapshot();
            d.set_item("walker_samples", w.samples)?;
            d.set_item("walker_frames", w.frames)?;
            d.set_item("walker_truncated", w.truncated)?;
            d.set_item("walker_idle_threads", w.idle_threads)?;
            d.set_item("walker_skipped_threads", w.skipped_threads)?;
            d.set_item("walker_invalid_reads", w.invalid_reads)?;
            d.set_item("walker_code_cache_full", w.code_cache_full)?;
            d.set_item(
                "walker_thread_names_busy",
                self.walker_handles.threads.busy_lookups(),
            )?;
            d.set_item("walker_ticks", w.ticks)?;
            d.set_item("walker_direct_ticks", w.direct_ticks)?;
        }
        if let Some(c) = &self.walker_handles.context {
            let c = c.snapshot();
            d.set_item("context_lookups", c.lookups)?;
            d.set_item("context_spans", c.spans)?;
            d.set_item("context_no_span", c.no_span)?;
            d.set_item("context_untracked", c.untracked)?;
            d.set_item("context_tasks", c.tasks)?;
            d.set_item("context_invalid", c.invalid)?;
            d.set_item("context_switched", c.switched)?;
        }
        Ok(d)
    }
}

/// The agent the span processor's entry points feed: set by `span_profile.start()`, cleared
/// by `stop()`. Read under the GIL on every span start and end.
static SPAN_HOOKS: std::sync::RwLock<Option<Py<NativeAgent>>> = std::sync::RwLock::new(None);

fn span_hooks_agent(py: Python<'_>) -> Option<Py<NativeAgent>> {
    SPAN_HOOKS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map(|a| a.clone_ref(py))
}

/// Points the span processor's entry points at `agent` (or at nothing).
#[pyfunction]
#[pyo3(signature = (agent))]
pub(crate) fn set_span_hooks(agent: Option<Py<NativeAgent>>) {
    let old = std::mem::replace(
        &mut *SPAN_HOOKS.write().unwrap_or_else(PoisonError::into_inner),
        agent,
    );
    // Released outside the lock.
    drop(old);
}

/// Whether the SDK calls `SpanProcessor._on_ending` with the live span just before `on_end`
/// (OpenTelemetry SDK 1.35 and later). Then the end is recorded there, from what `on_start`
/// listed, and `pyroscope.profile.id` goes only on the spans that may have samples; `on_end`
/// does nothing. Otherwise `on_start` links every span in the link scope and `on_end` records
/// the end from the `ReadableSpan`'s fields. One SDK per process: set once, at import.
static ENDS_AT_ENDING: AtomicBool = AtomicBool::new(false);

fn ends_at_ending() -> bool {
    // Relaxed: a flag set at import, before any span; it orders nothing else.
    ENDS_AT_ENDING.load(Ordering::Relaxed)
}

/// Tells the hooks whether the SDK calls `_on_ending` (see [`ENDS_AT_ENDING`]).
#[pyfunction]
pub(crate) fn set_ends_at_ending(yes: bool) {
    ENDS_AT_ENDING.store(yes, Ordering::Relaxed);
}

/// `span_profile.SpanProcessor`: links OpenTelemetry spans to profiles.
///
/// Add it to the TracerProvider: `provider.add_span_processor(span_profile.SpanProcessor())`.
/// On start it records the span (its parent, local root and `http.route`) in the agent's span
/// table and lists the span object for the sampler. As the span ends it records the end time
/// and sets the attribute `pyroscope.profile.id` to the span id (16 hex digits) if the span
/// may have samples and the output keeps samples under its own id: every span for a directory
/// or OTLP, the local roots only for Pyroscope (unless `PYROSCOPE_SPAN_SCOPE=all`). So a link
/// never leads to an empty profile. (SDKs before 1.35, which have no `_on_ending`, get the link
/// on every span in that scope, at start.) Which span is current on a thread is not tracked
/// here: the sampler reads OpenTelemetry's own context and attributes samples to its span when
/// this processor started it. Does nothing while no agent runs. It never raises into the
/// application: failures are counted in `stats()["hook_errors"]`.
///
/// A native class (ADR 0016), with the SDK `SpanProcessor`'s methods but not derived from it: the
/// SDK calls `on_start`, `_on_ending` and `on_end` for every span, and CPython caches the
/// lookup of a native class's method at the call site, with no Python frame run. Those three are
/// hand-written method descriptors (`processor_methods.rs`, ADR 0017), set on the type at
/// import. A subclass that overrides one of them must call the base:
/// `super().on_start(span, parent_context)`.
#[pyclass(name = "SpanProcessor", module = "span_profile", subclass, frozen)]
pub(crate) struct SpanProcessor;

#[pymethods]
impl SpanProcessor {
    /// `SpanProcessor()` takes no arguments. A subclass's constructor may have parameters of
    /// its own, for its `__init__`: they are let through, as `object.__new__` does.
    #[new]
    #[classmethod]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(
        cls: &Bound<'_, PyType>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let has_args = !args.is_empty() || kwargs.is_some_and(|k| !k.is_empty());
        if has_args && cls.is(cls.py().get_type::<Self>()) {
            return Err(PyTypeError::new_err(
                "SpanProcessor() takes no arguments; configure the agent with span_profile.start()",
            ));
        }
        Ok(Self)
    }

    /// Nothing to shut down: the agent is stopped by `agent.stop()` or at exit.
    fn shutdown(&self) {}

    /// Nothing is buffered here; always true. The timeout is not looked at, so no value of it
    /// (the SDK passes a float when the application gave one) can raise.
    #[pyo3(signature = (timeout_millis=None))]
    fn force_flush(&self, timeout_millis: Option<&Bound<'_, PyAny>>) -> bool {
        let _ = timeout_millis;
        true
    }
}

/// `SpanProcessor.on_start(span, parent_context=None)` (`processor_methods.rs`): records the
/// span with the running agent (see [`NativeAgent::on_start`]).
pub(crate) fn processor_on_start(py: Python<'_>, span: &Bound<'_, PyAny>) {
    if let Some(agent) = span_hooks_agent(py) {
        agent.get().on_start(span);
    }
}

/// `SpanProcessor._on_ending(span)`: records the end of the live span, where the SDK calls it
/// (see [`NativeAgent::on_ending`] and [`ENDS_AT_ENDING`]).
pub(crate) fn processor_on_ending(py: Python<'_>, span: &Bound<'_, PyAny>) {
    if !ends_at_ending() {
        return;
    }
    if let Some(agent) = span_hooks_agent(py) {
        agent.get().on_ending(span);
    }
}

/// `SpanProcessor.on_end(span)`: records the end from the `ReadableSpan`, for an SDK that does
/// not call `_on_ending` (see [`NativeAgent::on_end`]); else nothing.
pub(crate) fn processor_on_end(py: Python<'_>, span: &Bound<'_, PyAny>) {
    if ends_at_ending() {
        return;
    }
    if let Some(agent) = span_hooks_agent(py) {
        agent.get().on_end(span);
    }
}
