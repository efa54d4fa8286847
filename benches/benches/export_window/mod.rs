//! The window the export benches use: 10,000 distinct stacks 12-24 frames deep over ~2,300
//! frames, spans on half the samples (500 spans under 125 local roots), five routes, eight
//! threads. It ends `ago` before now, so Pyroscope's ingestion window accepts it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use span_profile_core::{
    Frame, Profile, ProfileSample, Resource, SpanContext, SpanId, Stack, TraceId,
};

pub const STACKS: usize = 10_000;

pub fn window(ago: Duration) -> Profile {
    let mut rng = span_profile_test::XorShift(0x9e37_79b9_7f4a_7c15);
    let mut next = move |n: usize| rng.below(n as u64) as usize;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let (resource, _) = Resource::from_vars(
        Some("checkout"),
        Some("service.version=1.4.2,deployment.environment=prod"),
    );
    let mut p = Profile::empty(
        resource,
        now - ago.as_nanos() as u64 - 10_000_000_000,
        10_000_000_000,
        10_000_000,
    );
    for i in 0..2300u32 {
        p.frames.push(Frame::new(
            format!("app.module_{}.function_{i}", i % 40),
            format!("/srv/app/module_{}.py", i % 40),
            i % 300 + 1,
        ));
    }
    let spans: Vec<SpanContext> = (1..=500u64)
        .filter_map(|i| {
            Some(SpanContext {
                trace_id: TraceId::from_u128(u128::from(i) * 0x9e37_79b9_7f4a_7c15)?,
                span_id: SpanId::from_u64(i * 0x2545_f491)?,
                local_root_span_id: SpanId::from_u64(i / 4 + 1)?,
            })
        })
        .collect();
    let routes: Vec<Arc<str>> = [
        "/checkout/{id}",
        "/cart",
        "/orders/{id}",
        "/health",
        "/search",
    ]
    .map(Arc::from)
    .to_vec();
    let threads: Vec<Arc<str>> = (0..8).map(|i| Arc::from(format!("worker-{i}"))).collect();
    let mut seen = std::collections::HashSet::new();
    while p.stacks.len() < STACKS {
        let depth = 12 + next(13);
        let frames: Vec<u32> = (0..depth).map(|_| next(2300) as u32).collect();
        if seen.insert(frames.clone()) {
            p.stacks.push(Stack {
                frames,
                truncated: false,
            });
        }
    }
    for stack in 0..STACKS as u32 {
        let span = (stack % 2 == 0).then(|| spans[next(spans.len())]);
        let wall = 1 + next(20) as u64;
        let cpu = next(wall as usize + 1) as u64;
        let route = if span.is_some() {
            routes[next(5)].clone()
        } else {
            Arc::from("background")
        };
        p.samples.push(
            ProfileSample::new(stack, route, threads[next(8)].clone())
                .with_span(span)
                .with_cpu(cpu, cpu * 10_000_000)
                .with_wall(wall, wall * 10_000_000),
        );
    }
    p
}
