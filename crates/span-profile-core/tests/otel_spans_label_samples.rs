//! A Rust service using opentelemetry_sdk gets span-labelled samples with no code per span:
//! the processor records span metadata and the context observer publishes the current span.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use span_profile_core::{otel, ExecutionKey, Profiler, SpanScope};
use span_profile_test::{FakeWalker, InMemoryExporter};

/// `otel::install` points the process-wide context observer at one profiler, the last one
/// installed: the tests of this file take turns, or one would steal the other's spans.
static ONE_PROFILER_AT_A_TIME: Mutex<()> = Mutex::new(());

fn take_turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_PROFILER_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

#[test]
fn nested_spans_route_local_root_and_profile_id_attribute() {
    let _turn = take_turn();
    let key = ExecutionKey::current_thread();
    // It stands for a Pyroscope exporter at its default scope: samples under local roots.
    let exporter = InMemoryExporter::default().with_span_scope(SpanScope::LocalRoot);
    let builder = Profiler::builder();
    let registry = builder.registry().clone();
    let profiler = builder
        .with_sample_rate_hz(500)
        // The fake walker samples this very thread's key, so samples show what the registry
        // published for it.
        .with_walker(
            FakeWalker::threads(1, 2)
                .with_registry(registry.clone())
                .with_keys(vec![key]),
        )
        .with_exporter(exporter.clone())
        .start()
        .unwrap();
    let spans_out = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(otel::install(&profiler))
        .with_simple_exporter(spans_out.clone())
        .build();
    let tracer = provider.tracer("checkout");

    let mut ids = None;
    let root_span = tracer
        .span_builder("POST /checkout")
        .with_kind(SpanKind::Server)
        .with_attributes([KeyValue::new("http.route", "/checkout")])
        .start(&tracer);
    {
        let cx = opentelemetry::Context::current_with_span(root_span);
        let _attached = cx.clone().attach();
        let root = cx.span().span_context().span_id();
        tracer.in_span("pricing.calculate", |cx| {
            let child = cx.span().span_context().span_id();
            let a = profiler
                .registry()
                .current(key)
                .expect("the child is current");
            assert_eq!(a.ctx.span_id.to_bytes(), child.to_bytes());
            assert_eq!(a.ctx.local_root_span_id.to_bytes(), root.to_bytes());
            ids = Some((root, child));
            std::thread::sleep(Duration::from_millis(100));
        });
        let a = profiler
            .registry()
            .current(key)
            .expect("the root is current again");
        assert_eq!(a.ctx.span_id.to_bytes(), root.to_bytes());
        assert_eq!(&*profiler.span_table().route_name(a.route), "/checkout");
        cx.span().end();
    }
    assert!(
        profiler.registry().current(key).is_none(),
        "no span once the root is done"
    );
    profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();

    let (root, child) = ids.unwrap();
    let child_hex = format!("{child}");
    let windows = exporter.profiles();
    let child_samples: u64 = windows
        .iter()
        .flat_map(|w| &w.samples)
        .filter(|s| s.span.is_some_and(|c| c.span_id.to_string() == child_hex))
        .map(|s| s.wall_samples)
        .sum();
    assert!(
        child_samples >= 10,
        "100 ms at 500 Hz gives ~50 samples, got {child_samples}"
    );
    let recorded: Vec<_> = windows.iter().flat_map(|w| &w.spans).collect();
    assert!(recorded
        .iter()
        .any(|s| &*s.name == "pricing.calculate" && s.end_unix_ns.is_some()));
    assert!(recorded
        .iter()
        .any(|s| s.route.as_deref() == Some("/checkout")));

    // The exporter stores samples under the local root's id (Pyroscope's default span
    // scope): only the root carries the link, so a link never leads to an empty profile.
    let exported = spans_out.get_finished_spans().unwrap();
    assert_eq!(
        profile_id(&exported, "POST /checkout"),
        Some(root.to_string())
    );
    assert_eq!(profile_id(&exported, "pricing.calculate"), None);
}

fn profile_id(spans: &[SpanData], name: &str) -> Option<String> {
    let span = spans
        .iter()
        .find(|s| s.name == name)
        .expect("span exported");
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == otel::PROFILE_ID_ATTRIBUTE)
        .map(|kv| kv.value.as_str().into_owned())
}

/// With every span's samples kept under its own id (an exporter whose scope is
/// `SpanScope::All`, as the file store's is), every span links; and one such exporter among
/// others is enough.
#[test]
fn with_all_spans_scope_every_span_carries_its_own_profile_id() {
    let _turn = take_turn();
    let builder = Profiler::builder();
    let registry = builder.registry().clone();
    let profiler = builder
        .with_walker(FakeWalker::threads(1, 2).with_registry(registry.clone()))
        .with_exporter(InMemoryExporter::default().with_span_scope(SpanScope::LocalRoot))
        .with_exporter(InMemoryExporter::default())
        .start()
        .unwrap();
    assert_eq!(profiler.span_scope(), SpanScope::All);
    let spans_out = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(otel::install(&profiler))
        .with_simple_exporter(spans_out.clone())
        .build();
    let tracer = provider.tracer("checkout");
    let mut ids = Vec::new();
    tracer.in_span("root", |cx| {
        ids.push(cx.span().span_context().span_id());
        tracer.in_span("child", |cx| ids.push(cx.span().span_context().span_id()));
    });
    profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    let exported = spans_out.get_finished_spans().unwrap();
    assert_eq!(profile_id(&exported, "root"), Some(ids[0].to_string()));
    assert_eq!(profile_id(&exported, "child"), Some(ids[1].to_string()));
}
