//! OpenTelemetry-Rust integration (feature `otel`).
//!
//! - [`SpanProfileProcessor`]: an `opentelemetry_sdk` span processor that records every span's
//!   name, parent, local root, `http.route`, start and end in the [`SpanTable`], and sets the
//!   `pyroscope.profile.id` attribute so that Grafana can link the span to its profile.
//! - [`install`]: registers a global `ContextObserver` (opentelemetry 0.33's
//!   `experimental_context_observer`) that publishes the span current on each thread to the
//!   [`ActiveSpanRegistry`] on every context attach and detach. A service using
//!   `opentelemetry_sdk` then gets span-labelled samples with no code per span.
//! - [`ContextGuard`]: the explicit alternative where a global observer is not wanted.
//!
//! Threads are keyed by [`ExecutionKey::current_thread`], which walkers of native threads use
//! too. A tokio task that moves between workers re-attaches its context on every poll, so its
//! span follows it.
//!
//! ```
//! use std::time::Duration;
//! use opentelemetry::trace::{Tracer, TracerProvider as _};
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//! use span_profile_core::{otel, Profiler};
//! use span_profile_test::{FakeWalker, InMemoryExporter};
//!
//! let builder = Profiler::builder();
//! let registry = builder.registry().clone();
//! let profiler = builder
//!     .with_walker(FakeWalker::threads(1, 3).with_registry(registry.clone()))
//!     .with_exporter(InMemoryExporter::default())
//!     .start()
//!     .unwrap();
//! let provider = SdkTracerProvider::builder()
//!     .with_span_processor(otel::install(&profiler))
//!     .build();
//! let tracer = provider.tracer("checkout");
//! tracer.in_span("pricing.calculate", |_cx| {
//!     let key = span_profile_core::ExecutionKey::current_thread();
//!     assert!(profiler.registry().current(key).is_some());
//! });
//! profiler.shutdown_with_timeout(Duration::from_secs(5)).unwrap();
//! ```

use std::any::Any;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime};

use opentelemetry::context::{ContextObserver, GlobalContextObserver, ObserverContextView};
use opentelemetry::trace::{Span as _, TraceContextExt};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

use crate::registry::ActiveSpan;
use crate::time::unix_ns;
use crate::{
    ActiveSpanRegistry, ExecutionKey, Profiler, SpanId, SpanScope, SpanStart, SpanTable, TraceId,
};

/// The span attribute that Grafana's traces-to-profiles joins on.
pub const PROFILE_ID_ATTRIBUTE: &str = "pyroscope.profile.id";

fn ids(sc: &opentelemetry::trace::SpanContext) -> Option<(TraceId, SpanId)> {
    if !sc.is_valid() {
        return None;
    }
    Some((
        TraceId::from_bytes(sc.trace_id().to_bytes())?,
        SpanId::from_bytes(sc.span_id().to_bytes())?,
    ))
}

/// Records span metadata in the profiler's [`SpanTable`] and tags spans with
/// [`PROFILE_ID_ATTRIBUTE`]: the spans whose own id the exporters store samples under, as
/// the profiler's [`Profiler::span_scope`] and [`SpanScope::links`] tell. With a Pyroscope
/// exporter at its default scope ([`SpanScope::LocalRoot`]), only local roots carry it, so a
/// link never leads to an empty profile. Made by [`install`].
#[derive(Debug, Clone)]
pub struct SpanProfileProcessor {
    spans: Arc<SpanTable>,
    scope: SpanScope,
}

impl SpanProcessor for SpanProfileProcessor {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        let Some((trace_id, span_id)) = ids(span.span_context()) else {
            return;
        };
        let parent = cx.span();
        let parent_sc = parent.span_context();
        let parent_span_id = ids(parent_sc).map(|(_, s)| s);
        let is_local_root = parent_span_id.is_none() || parent_sc.is_remote();
        if self.scope.links(is_local_root) {
            span.set_attribute(KeyValue::new(PROFILE_ID_ATTRIBUTE, span_id.to_string()));
        }
        let data = span.exported_data();
        let name = data.as_ref().map(|d| d.name.as_ref()).unwrap_or("");
        let route = data.as_ref().and_then(|d| {
            d.attributes
                .iter()
                .find(|kv| kv.key.as_str() == "http.route")
                .map(|kv| kv.value.as_str().into_owned())
        });
        let start = data
            .as_ref()
            .map(|d| unix_ns(d.start_time))
            .unwrap_or_else(|| unix_ns(SystemTime::now()));
        self.spans.start(SpanStart {
            trace_id,
            span_id,
            parent_span_id,
            parent_is_remote: parent_sc.is_remote(),
            name,
            route: route.as_deref(),
            start_unix_ns: start,
        });
    }

    fn on_end(&self, span: SpanData) {
        let Some((_, span_id)) = ids(&span.span_context) else {
            return;
        };
        let route = span
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "http.route")
            .map(|kv| kv.value.as_str().into_owned());
        self.spans
            .end(span_id, unix_ns(span.end_time), route.as_deref());
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The registry entry a context carries, computed once when the context is created.
#[derive(Debug)]
struct View(Option<ActiveSpan>);

impl ObserverContextView for View {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The profiler that the global observer currently feeds. The observer is process-global
/// and can be set once, so it forwards to whichever profiler was installed last.
#[derive(Debug, Default)]
struct Target {
    registry: Option<Arc<ActiveSpanRegistry>>,
    spans: Option<Arc<SpanTable>>,
}

static TARGET: OnceLock<RwLock<Target>> = OnceLock::new();

#[derive(Debug)]
struct Observer;

impl Observer {
    fn publish(&self, to: &Context) {
        let Some(target) = TARGET.get().and_then(|t| t.read().ok()) else {
            return;
        };
        let Some(registry) = &target.registry else {
            return;
        };
        let active = match to
            .observer_view()
            .as_ref()
            .and_then(|v| v.as_any().downcast_ref::<View>())
        {
            Some(View(a)) => *a,
            None => None,
        };
        registry.set_current(ExecutionKey::current_thread(), active);
    }
}

impl ContextObserver for Observer {
    fn on_context_enter(&self, _from: &Context, to: &Context) {
        self.publish(to);
    }

    fn on_context_exit(&self, _from: &Context, to: &Context) {
        self.publish(to);
    }

    fn make_view(&self, ctx: &Context) -> Option<Arc<dyn ObserverContextView>> {
        // Only getters on `ctx` here: the context module's thread-local is borrowed.
        let (trace_id, span_id) = ids(ctx.span().span_context())?;
        let target = TARGET.get()?.read().ok()?;
        let spans = target.spans.as_ref()?;
        let active = spans.active(span_id).unwrap_or(ActiveSpan {
            ctx: crate::SpanContext {
                trace_id,
                span_id,
                local_root_span_id: span_id,
            },
            route: crate::labels::LabelValues::BACKGROUND,
        });
        Some(Arc::new(View(Some(active))))
    }
}

/// Connects OpenTelemetry-Rust to `profiler`: installs the global context observer (once per
/// process; later calls redirect it to the new profiler) and returns the span processor to add
/// to the `SdkTracerProvider`. The processor links the spans of the profiler's
/// [`Profiler::span_scope`], which its exporters state.
pub fn install(profiler: &Profiler) -> SpanProfileProcessor {
    let target = TARGET.get_or_init(|| RwLock::new(Target::default()));
    if let Ok(mut t) = target.write() {
        t.registry = Some(profiler.registry().clone());
        t.spans = Some(profiler.span_table().clone());
    }
    static OBSERVER_SET: OnceLock<()> = OnceLock::new();
    OBSERVER_SET.get_or_init(|| GlobalContextObserver::set(Arc::new(Observer)));
    SpanProfileProcessor {
        spans: profiler.span_table().clone(),
        scope: profiler.span_scope(),
    }
}

/// Makes a context's span current for the profiler on this thread until dropped: the explicit
/// alternative to the global observer.
#[derive(Debug)]
pub struct ContextGuard {
    registry: Arc<ActiveSpanRegistry>,
    key: ExecutionKey,
    span_id: Option<SpanId>,
}

impl ContextGuard {
    /// Enters `cx`'s span on this thread (nothing if it has no valid span).
    pub fn enter(profiler: &Profiler, cx: &Context) -> Self {
        let key = ExecutionKey::current_thread();
        let registry = profiler.registry().clone();
        let span_id = ids(cx.span().span_context()).map(|(trace_id, span_id)| {
            let active = profiler.span_table().active(span_id).unwrap_or(ActiveSpan {
                ctx: crate::SpanContext {
                    trace_id,
                    span_id,
                    local_root_span_id: span_id,
                },
                route: crate::labels::LabelValues::BACKGROUND,
            });
            registry.enter(key, active);
            span_id
        });
        Self {
            registry,
            key,
            span_id,
        }
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        if let Some(id) = self.span_id {
            self.registry.exit(self.key, id);
        }
    }
}
