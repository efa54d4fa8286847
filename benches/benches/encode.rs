//! Encoding one window to gzip pprof: 10k distinct stacks of depth ~20, spans on half the
//! samples. Target: ≤ 20 ms per window.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use span_profile_core::{
    Frame, Profile, ProfileSample, Resource, SpanContext, SpanId, SpanRecord, Stack, TraceId,
};
use span_profile_test::XorShift;

const STACKS: usize = 10_000;

/// The workspace's generator with a fixed seed, so every run encodes the same window.
struct Rng(XorShift);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
}

fn window() -> Profile {
    let mut rng = Rng(XorShift(0x9e37_79b9_7f4a_7c15));
    let (resource, _) = Resource::from_vars(
        Some("checkout"),
        Some("service.version=1.4.2,deployment.environment=prod,service.instance.id=web-7f9c-42"),
    );
    let mut p = Profile::empty(
        resource,
        1_700_000_000_000_000_000,
        10_000_000_000,
        10_000_000,
    );
    let modules = [
        "app/views",
        "app/pricing",
        "app/db/session",
        "app/cache",
        "django/core/handlers/base",
        "django/db/models/query",
        "sqlalchemy/orm/session",
        "json/decoder",
        "_strptime",
        "asyncio/base_events",
        "urllib3/connectionpool",
        "jinja2/environment",
    ];
    let verbs = [
        "get",
        "load",
        "render",
        "calculate",
        "parse",
        "dispatch",
        "execute",
        "fetch",
    ];
    let nouns = [
        "order", "cart", "price", "user", "session", "template", "row", "response",
    ];
    // ~2.3k distinct frames: function × module × a few lines each.
    for m in modules {
        for v in verbs {
            for n in nouns {
                for line in [12, 40, 133] {
                    p.frames.push(Frame::new(
                        format!("{}.{v}_{n}", m.rsplit('/').next().unwrap_or(m)),
                        format!("/srv/{m}.py"),
                        line,
                    ));
                }
            }
        }
    }
    // Shared roots (server loop, middleware), then distinct tails: 10k distinct stacks.
    let n_frames = p.frames.len();
    let roots: Vec<Vec<u32>> = (0..32)
        .map(|_| (0..8).map(|_| rng.below(n_frames) as u32).collect())
        .collect();
    let mut seen = std::collections::HashSet::new();
    while p.stacks.len() < STACKS {
        let depth = 12 + rng.below(4);
        let mut frames: Vec<u32> = (0..depth).map(|_| rng.below(n_frames) as u32).collect();
        frames.extend(&roots[rng.below(roots.len())]);
        let s = Stack {
            frames,
            truncated: rng.below(50) == 0,
        };
        if seen.insert(s.clone()) {
            p.stacks.push(s);
        }
    }
    let routes: Vec<Arc<str>> = [
        "/checkout/{id}",
        "/cart",
        "/orders/{id}",
        "/health",
        "/search",
    ]
    .into_iter()
    .map(Arc::from)
    .collect();
    let threads: Vec<Arc<str>> = (0..8).map(|i| Arc::from(format!("worker-{i}"))).collect();
    let spans: Vec<SpanContext> = (1..=500u64)
        .map(|i| SpanContext {
            trace_id: TraceId::from_u128(
                u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834),
            )
            .expect("nonzero"),
            span_id: SpanId::from_u64(i.wrapping_mul(0x2545_f491_4f6c_dd1d)).expect("nonzero"),
            local_root_span_id: SpanId::from_u64((i / 4 + 1) * 0x1000_0001).expect("nonzero"),
        })
        .collect();
    for stack in 0..STACKS as u32 {
        let span = (stack % 2 == 0).then(|| spans[rng.below(spans.len())]);
        let wall = 1 + rng.below(20) as u64;
        let cpu = rng.below(wall as usize + 1) as u64;
        let route = if span.is_some() {
            routes[rng.below(routes.len())].clone()
        } else {
            Arc::from("background")
        };
        p.samples.push(
            ProfileSample::new(stack, route, threads[rng.below(threads.len())].clone())
                .with_span(span)
                .with_cpu(cpu, cpu * 10_000_000)
                .with_wall(wall, wall * 10_000_000),
        );
    }
    p.spans = spans
        .iter()
        .map(|c| {
            SpanRecord::new(
                c.trace_id,
                c.span_id,
                c.local_root_span_id,
                "pricing.calculate".into(),
                1_700_000_001_000_000_000,
            )
            .with_parent_span_id(Some(c.local_root_span_id))
            .with_end_unix_ns(Some(1_700_000_001_720_000_000))
        })
        .collect();
    p
}

/// The same window with the span table of a busy service: 50,000 records (a 60 s window of
/// the bench's threads variant keeps about that many; ADR 0013).
fn busy_window() -> Profile {
    let mut p = window();
    let template = p.spans[0].clone();
    p.spans.extend((1..=50_000u64 - 500).map(|i| {
        let mut r = template.clone();
        r.span_id = SpanId::from_u64(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1).expect("nonzero");
        r.start_unix_ns = template.start_unix_ns + i * 1_000_000;
        r.end_unix_ns = Some(template.start_unix_ns + i * 1_000_000 + 720_000_000);
        r
    }));
    p
}

fn encode(c: &mut Criterion) {
    let p = window();
    let gz = span_profile_export::encode_pprof(&p);
    let raw = span_profile_export::encode_pprof_raw(&p);
    eprintln!(
        "window: {} stacks, raw {} B, gzip {} B",
        p.stacks.len(),
        raw.len(),
        gz.len()
    );
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Elements(p.samples.len() as u64));
    g.bench_function("pprof_gzip_10k_stacks", |b| {
        b.iter(|| span_profile_export::encode_pprof(black_box(&p)))
    });
    g.bench_function("pprof_raw_10k_stacks", |b| {
        b.iter(|| span_profile_export::encode_pprof_raw(black_box(&p)))
    });
    g.bench_function("pprof_decode_gzip_10k_stacks", |b| {
        b.iter(|| span_profile_export::decode_pprof(black_box(&gz)))
    });
    g.finish();
    let busy = busy_window();
    let mut g = c.benchmark_group("encode");
    g.sample_size(20);
    g.bench_function("pprof_gzip_10k_stacks_50k_spans", |b| {
        b.iter(|| span_profile_export::encode_pprof(black_box(&busy)))
    });
    g.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
