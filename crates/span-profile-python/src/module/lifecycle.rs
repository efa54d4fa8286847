//! The native agent's lifecycle: `span_profile._native.Agent` starts one [`Profiler`] with
//! the walker and exporter for its settings, owns the [`SpanRecorder`] the span processor
//! feeds (`processor.rs`), reports `stats()`, and stops (or, after `fork`, abandons) it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use span_profile_core::{Profiler, ProfilerStats, SpanTable, StartError};
use span_profile_export::{exporter_for_output, parse_output, redact_url, ExporterEnv, Output};

use super::context::{PyActiveSpan, TaskTag};
use super::processor::{self, SpanRecorder};
use super::settings;
use super::span_objects::SpanObjects;
use super::walker::{self, context_target, OtelObjects, WalkerHandles};
use crate::walker::{ReadMode, SlotData};

/// A running profiler and its span recorder. Created by `span_profile.start()`; at most one per
/// process is installed at a time (the Python package enforces that).
#[pyclass(frozen, name = "Agent", module = "span_profile._native")]
#[derive(Debug)]
pub(crate) struct NativeAgent {
    profiler: Mutex<Option<Profiler>>,
    final_stats: Mutex<Option<ProfilerStats>>,
    /// What stopped sampling, if a failure did (kept across `stop`).
    final_failure: Mutex<Option<String>>,
    /// What the span processor records spans in, while this agent is installed.
    recorder: Arc<SpanRecorder>,
    /// Whether the sampler reads OpenTelemetry's current context (else no sample has a span).
    reads_otel_context: bool,
    walker_handles: WalkerHandles,
    walker_kind: String,
    service: String,
    instance: Option<String>,
    output: String,
    resource_problems: Vec<String>,
    /// The span slot and task tag ContextVars the walker looks up (kept alive with it).
    _context_vars: Vec<Py<PyAny>>,
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
        let window = Duration::try_from_secs_f64(window_s).map_err(|_| {
            PyValueError::new_err(format!("window_s={window_s} is not a number of seconds"))
        })?;
        // The core checks the ranges (`ProfilerBuilder::check`), before anything is created.
        let builder = Profiler::builder()
            .with_sample_rate_hz(sample_rate_hz)
            // 0 turns the cap off.
            .with_overhead_budget((overhead_budget != 0.0).then_some(overhead_budget))
            .with_window(window);
        builder.check().map_err(start_error)?;
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
        let sched_watch = match std::env::var("SPAN_PROFILE_SCHED_WATCH") {
            Ok(v) => parse_switch("SPAN_PROFILE_SCHED_WATCH", &v).map_err(PyValueError::new_err)?,
            Err(_) => true,
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
        // SAFETY: (1) `py` proves this thread holds the GIL, so it has a current thread state.
        let caller_tstate = unsafe { pyo3::ffi::PyThreadState_Get() } as u64;
        let (walker, walker_handles, walker_kind) = walker::build(
            python_version.0,
            python_version.1,
            target.map(|t| (t, span_objects.table())),
            read_mode,
            walker::own_package_dir(py),
            sched_watch,
            caller_tstate,
        );
        // No registry: the sampler reads OpenTelemetry's own context, and spans resolve
        // through the span-object table (ADR 0011); a sample whose context cannot be read
        // says `SpanSource::Unknown`.
        let spans = Arc::new(SpanTable::default());
        let profiler = builder
            .with_resource(resource)
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
            recorder: Arc::new(SpanRecorder::new(spans, span_objects, link_scope)),
            reads_otel_context,
            walker_handles,
            walker_kind,
            service,
            instance,
            // Shown in repr, errors and warnings: never with its credentials.
            output: redact_url(output),
            resource_problems,
            _context_vars: slot_var
                .into_iter()
                .chain(task_var)
                .chain(otel.iter().flat_map(|(var, ty, key, _, _)| [var, ty, key]))
                .map(|v| v.clone().unbind())
                .collect(),
        })
    }

    /// The tag to store in a new asyncio task's context: the id of `name` (already folded to
    /// few values by the caller; past the name cap it is reported as `Task`).
    fn task_tag(&self, name: &str) -> TaskTag {
        TaskTag(SlotData::task(self.walker_handles.task_names.intern(name)))
    }

    /// Counts a failure inside a Python hook (which never raises into the application).
    fn hook_error(&self) {
        self.recorder
            .counters
            .hook_errors
            .fetch_add(1, Ordering::Relaxed);
    }

    /// What `span` (an SDK span object) is listed as in the span-object table: the span the
    /// sampler attributes samples to while `span` is current, or `None` if our processor did
    /// not start it (or let it go).
    fn active_of(&self, span: &Bound<'_, PyAny>) -> Option<PyActiveSpan> {
        self.recorder.span_objects.get(span).map(PyActiveSpan::new)
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
        self.recorder.clear();
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
        let _ = result;
        undelivered_message(&stats, &self.output)
    }

    /// In a forked child: the parent's threads do not exist here, so the profiler is
    /// abandoned without a shutdown (which would wait for them).
    fn abandon_after_fork(&self) {
        self.recorder.clear();
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

    /// The output setting, with any password or token redacted.
    #[getter]
    fn output(&self) -> &str {
        &self.output
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

    /// Counters: the profiler's and the hooks'.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let p = self.profiler_stats();
        let c = &self.recorder.counters;
        let d = PyDict::new(py);
        d.set_item("running", self.running())?;
        d.set_item("walker", &self.walker_kind)?;
        d.set_item("ticks", p.ticks)?;
        d.set_item("samples", p.samples)?;
        d.set_item("windows", p.windows)?;
        // Every window made is in exactly one of the next seven (ADR 0027).
        d.set_item("exported_windows", p.exported_windows)?;
        d.set_item("waiting_windows", p.waiting_windows)?;
        d.set_item("dropped_windows", p.dropped_windows)?;
        d.set_item("dropped_spool_full_windows", p.dropped_spool_full_windows)?;
        d.set_item("dropped_expired_windows", p.dropped_expired_windows)?;
        d.set_item("dropped_rejected_windows", p.dropped_rejected_windows)?;
        d.set_item("dropped_at_shutdown_windows", p.dropped_at_shutdown_windows)?;
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
        d.set_item("capped_resource_attributes", p.capped_resource_attributes)?;
        d.set_item("failed", p.failed)?;
        d.set_item("failure", self.failure())?;
        d.set_item("spans_started", c.spans_started.load(Ordering::Relaxed))?;
        d.set_item("spans_ended", c.spans_ended.load(Ordering::Relaxed))?;
        d.set_item("hook_errors", c.hook_errors.load(Ordering::Relaxed))?;
        d.set_item("links_unwritten", c.links_unwritten.load(Ordering::Relaxed))?;
        let o = self.recorder.span_objects.stats();
        d.set_item("span_objects", o.listed)?;
        d.set_item("span_objects_full", o.full)?;
        d.set_item("span_objects_evicted", o.evicted)?;
        d.set_item("span_objects_contended_reads", o.contended)?;
        if let Some(w) = &self.walker_handles.counters {
            let w = w.snapshot();
            d.set_item("walker_samples", w.samples)?;
            d.set_item("walker_frames", w.frames)?;
            d.set_item("walker_truncated", w.truncated)?;
            d.set_item("walker_torn_roots", w.torn_roots)?;
            d.set_item("walker_moved_chains", w.moved_chains)?;
            d.set_item("walker_idle_threads", w.idle_threads)?;
            d.set_item("walker_skipped_threads", w.skipped_threads)?;
            d.set_item("walker_invalid_reads", w.invalid_reads)?;
            d.set_item("walker_unreadable_stacks", w.unreadable_stacks)?;
            d.set_item("walker_code_cache_full", w.code_cache_full)?;
            d.set_item("walker_clock_reads_saved", w.clock_reads_saved)?;
            d.set_item("walker_thread_states_skipped", w.thread_states_skipped)?;
            d.set_item("walker_reused_stacks", w.reused_stacks)?;
            d.set_item("walker_samples_repeated", w.repeated_samples)?;
            d.set_item("walker_sched_page_failures", w.sched_page_failures)?;
            d.set_item("walker_sched_pages_opened", w.sched_pages_opened)?;
            d.set_item("walker_gil_holders_asked", w.gil_holders_asked)?;
            d.set_item("walker_gil_readable", self.walker_handles.gil_readable)?;
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

/// What `stop()` says when windows were not delivered: how many, where the waiting ones are
/// (`SPAN_PROFILE_SPOOL_DIR`, or memory, which the process takes with it), and what was lost;
/// `None` when every window was delivered.
fn undelivered_message(p: &ProfilerStats, output: &str) -> Option<String> {
    let lost = [
        (p.dropped_windows, "export queue full"),
        (p.dropped_spool_full_windows, "spool full"),
        (p.dropped_expired_windows, "too old"),
        (p.dropped_rejected_windows, "rejected"),
        (p.dropped_at_shutdown_windows, "lost at shutdown"),
    ];
    let lost_total: u64 = lost.iter().map(|(n, _)| n).sum();
    if p.waiting_windows == 0 && lost_total == 0 {
        return None;
    }
    let mut parts = Vec::new();
    if p.waiting_windows > 0 {
        parts.push(match std::env::var("SPAN_PROFILE_SPOOL_DIR") {
            Ok(dir) if !dir.is_empty() && !output.contains("://") => format!(
                "{} wait in memory and are lost when the process exits",
                p.waiting_windows
            ),
            Ok(dir) if !dir.is_empty() => format!(
                "{} are spooled to {dir} (SPAN_PROFILE_SPOOL_DIR) and go out at the next start, or with `span-profile push {dir} URL`",
                p.waiting_windows
            ),
            _ => format!(
                "{} wait in memory and are lost when the process exits (set SPAN_PROFILE_SPOOL_DIR to keep them)",
                p.waiting_windows
            ),
        });
    }
    if lost_total > 0 {
        let why: Vec<String> = lost
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, why)| format!("{n} {why}"))
            .collect();
        parts.push(format!("{lost_total} were lost ({})", why.join(", ")));
    }
    Some(format!(
        "span_profile.stop(): {} of {} window(s) were not delivered to {output}: {}",
        p.waiting_windows + lost_total,
        p.windows,
        parts.join("; ")
    ))
}

/// Installs `agent`'s span recorder as the one the span processor feeds, or none: called by
/// `span_profile.start()` and `stop()`.
#[pyfunction]
#[pyo3(signature = (agent))]
pub(crate) fn set_span_hooks(agent: Option<Py<NativeAgent>>) {
    processor::install(agent.map(|a| a.get().recorder.clone()));
}

/// An on/off environment variable: `1`, `on`, `true`, `yes` or `0`, `off`, `false`, `no`.
fn parse_switch(name: &str, value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Ok(true),
        "0" | "off" | "false" | "no" => Ok(false),
        _ => Err(format!(
            "{name}={value:?} is not understood: use 1 (the default) or 0"
        )),
    }
}
