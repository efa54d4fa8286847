//! Encoding one 10k-stack window for each backend: the file store's pprof, Pyroscope's push
//! body (pprof per series, gzip), and OTLP profiles (protobuf, and gzip as sent). Prints the
//! encoded sizes once.
//!
//!     cargo bench -p span-profile-benches --bench export_encode

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use span_profile_core::SpanScope;
use span_profile_export::otlp::{encode_otlp_raw, OtlpConfig, OtlpExporter};
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

mod export_window;

fn encode(c: &mut Criterion) {
    let p = export_window::window(Duration::ZERO);
    // Never sends: `requests` only encodes.
    let pyro =
        PyroscopeExporter::new(PyroscopeConfig::new("http://127.0.0.1:9").expect("valid url"))
            .expect("exporter");
    let otlp = OtlpExporter::new(OtlpConfig::new("http://127.0.0.1:9").expect("valid url"))
        .expect("exporter");
    let pprof_raw = span_profile_export::encode_pprof_raw(&p);
    let pprof_gz = span_profile_export::encode_pprof(&p);
    let push: usize = pyro.requests(&p).iter().map(|r| r.body.len()).sum();
    let otlp_raw = encode_otlp_raw(&p, SpanScope::All, true);
    let otlp_cpu_only = encode_otlp_raw(&p, SpanScope::All, false);
    eprintln!(
        "10k-stack window: pprof (file store, 4 values) raw {} B gzip {} B | Pyroscope push (cpu) gzip {} B | \
         OTLP cpu+wall raw {} B gzip {} B | OTLP cpu raw {} B",
        pprof_raw.len(),
        pprof_gz.len(),
        push,
        otlp_raw.len(),
        otlp.request(&p).body.len(),
        otlp_cpu_only.len(),
    );
    let mut g = c.benchmark_group("export_encode");
    g.throughput(Throughput::Elements(p.samples.len() as u64));
    g.bench_function("pprof_raw_10k", |b| {
        b.iter(|| span_profile_export::encode_pprof_raw(black_box(&p)))
    });
    g.bench_function("pprof_gzip_10k", |b| {
        b.iter(|| span_profile_export::encode_pprof(black_box(&p)))
    });
    g.bench_function("pyroscope_push_body_10k", |b| {
        b.iter(|| pyro.requests(black_box(&p)))
    });
    g.bench_function("otlp_raw_10k", |b| {
        b.iter(|| encode_otlp_raw(black_box(&p), SpanScope::All, true))
    });
    g.bench_function("otlp_gzip_10k", |b| b.iter(|| otlp.request(black_box(&p))));
    g.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
