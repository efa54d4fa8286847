//! Chooses the stack walker for this interpreter: the CPython walker when it can read this
//! process, otherwise a stand-in that reports no samples (the reason is in `stats()`). Also
//! finds what the walker needs to read spans and task names from thread contexts
//! ([`context_target`]).

use std::sync::{Arc, OnceLock};

use pyo3::prelude::*;

use span_profile_core::labels::LabelValues;
use span_profile_core::{ActiveSpan, SpanContext, SpanId, TraceId};

use crate::walker::{
    otel_span_object, ContextCounters, ContextTarget, DictLayout, HamtTypes, MemoryReader,
    OtelTarget, ProcessVmReader, PythonVersion, PythonWalker, ReadMode, SlotData, SlotVar,
    SpanObjectTable, TaskNames, ThreadRegistry, WalkerConfig, WalkerCounters,
};

use super::context::{slot_layout, PyActiveSpan, TaskTag};

use super::standin::{Boxed, NoSamples};

/// The walker's side tables that the Python hooks feed and `stats()` reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct WalkerHandles {
    pub(crate) threads: ThreadRegistry,
    pub(crate) counters: Option<Arc<WalkerCounters>>,
    /// Context reads (spans and task names of the running context), when enabled.
    pub(crate) context: Option<Arc<ContextCounters>>,
    /// Task names by id, filled by `Agent.task_tag`.
    pub(crate) task_names: TaskNames,
    /// Whether the walker reads which thread holds the GIL
    /// ([`PythonWalker::check_gil_holder`]).
    pub(crate) gil_readable: bool,
}

/// The walker for `major.minor`, its handles, and a description for `stats()` (`"cpython 3.12"`
/// or `"none: <why>"`). With `context`, samples take their span and task name from the
/// context running on each thread, resolving span objects in the span-object table that comes
/// with it. `reads` says how interpreter memory is copied. Frames of code under `hidden` (our
/// own package, [`own_package_dir`]) are left out of stacks. `sched_watch` says whether waiting
/// threads' clock reads may be saved (ADR 0033). `caller_tstate` is the calling thread's
/// `PyThreadState`, which holds the GIL: the walker checks against it that it reads the GIL's
/// holder right.
pub(crate) fn build(
    major: u8,
    minor: u8,
    context: Option<(ContextTarget, Arc<SpanObjectTable>)>,
    reads: ReadMode,
    hidden: Option<&'static str>,
    sched_watch: bool,
    caller_tstate: u64,
) -> (Boxed, WalkerHandles, String) {
    let version = PythonVersion::new(major, minor);
    let config = WalkerConfig {
        hidden_file_prefix: hidden,
        sched_watch,
        ..WalkerConfig::default()
    };
    match PythonWalker::for_current_process_with(version, config, reads) {
        Ok(mut w) => {
            let gil_readable = w.check_gil_holder(caller_tstate);
            let with_context = context.is_some();
            if let Some((target, span_objects)) = context {
                w = w.with_context(target).with_span_objects(span_objects);
            }
            let handles = WalkerHandles {
                threads: w.registry().clone(),
                counters: Some(w.counters().clone()),
                context: with_context.then(|| w.context_counters().clone()),
                task_names: w.task_names().clone(),
                gil_readable,
            };
            (Boxed(Box::new(w)), handles, format!("cpython {version}"))
        }
        Err(e) => (
            Boxed(Box::new(NoSamples)),
            WalkerHandles::default(),
            format!("none: {e}"),
        ),
    }
}

/// The directory of the `span_profile` package with a trailing separator, as its code
/// objects' file names start (ADR 0020), found once per process; `None` if the package has no
/// `__file__`.
pub(crate) fn own_package_dir(py: Python<'_>) -> Option<&'static str> {
    static DIR: OnceLock<Option<String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let os_path = py.import("os.path").ok()?;
        let file = py.import("span_profile").ok()?.getattr("__file__").ok()?;
        let dir = os_path.call_method1("dirname", (file,)).ok()?;
        let dir: String = dir.extract().ok()?;
        (!dir.is_empty()).then(|| format!("{dir}{}", std::path::MAIN_SEPARATOR))
    })
    .as_deref()
}

/// OpenTelemetry's context, as `start()` hands it over: its runtime context's ContextVar, the
/// `Context` class, the span key, and a probe (a `Context` holding `probe_span` as its span).
pub(crate) type OtelArgs<'a, 'py> = (
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
);

/// [`OtelArgs`] as the constructor receives them.
pub(crate) type OtelObjects<'py> = (
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
pub(crate) fn context_target(
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
