//! Writes a synthetic day of one service into a file store, for the CLI's figures:
//! `cargo run --release -p span-profile-cli --example gen_store -- /tmp/store [windows] [stacks] [versions]`
//! (default 1440 windows of 60 s, 10,000 distinct stacks each, starting 2024-05-01T00:00Z, all
//! of version 1.4.2; with `versions` N, consecutive runs of windows are versions 1.4.2, 1.4.3,
//! and so on, for `diff`).
//!
//! Each window has 10,000 rows, one per stack. The service's stacks are the same in every
//! window (its code paths), each tied to one route and thread: 80% are in requests (20 routes,
//! rows spread over about 2,000 spans per window, each with its span record), 20% background.
//! Frames come from a pool of 600 functions; counts vary per window. Each window counts ten
//! requests per span record (ADR 0032: most requests of a busy service get no sample).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use span_profile_core::{
    Frame, Profile, ProfileSample, Resource, RouteRequests, SpanContext, SpanId, SpanRecord, Stack,
    TraceId,
};
use span_profile_export::FileStore;
use span_profile_test::XorShift as Rng;

const DAY_START_NS: u64 = 1_714_521_600_000_000_000; // 2024-05-01T00:00:00Z
const WINDOW_NS: u64 = 60_000_000_000;
const PERIOD_NS: u64 = 10_000_000;

/// Requests counted per span record kept.
const REQUESTS_PER_RECORD: u64 = 10;

pub(crate) fn window(i: u64, stacks: usize, version: &str) -> Profile {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (i + 1));
    let mut p = Profile::empty(
        Resource {
            service: "checkout".into(),
            version: Some(version.into()),
            environment: Some("prod".into()),
            instance: Some("checkout-7f9c-1".into()),
            attributes: Vec::new(),
        },
        DAY_START_NS + i * WINDOW_NS,
        WINDOW_NS,
        PERIOD_NS,
    );
    p.frames = (0..600)
        .map(|f| {
            Frame::new(
                format!("module_{}.function_{f}", f % 40),
                format!("app/module_{}.py", f % 40),
                (f * 7 % 300) as u32 + 1,
            )
        })
        .collect();
    let routes: Vec<Arc<str>> = (0..20)
        .map(|r| Arc::from(format!("/api/v1/resource_{r}/{{id}}")))
        .collect();
    let background: Arc<str> = Arc::from("background");
    let threads: Vec<Arc<str>> = (0..8).map(|t| Arc::from(format!("worker-{t}"))).collect();
    let spans_per_window = (stacks / 5).max(1) as u64;
    let mut shape = Rng(0x5eed);
    for s in 0..stacks {
        let depth = 8 + shape.below(24) as usize;
        // Roots: 0..3; then deeper frames drift through the pool, leaf anywhere.
        let mut frames: Vec<u32> = (0..depth)
            .map(|d| {
                if d == 0 {
                    shape.below(3) as u32
                } else {
                    3 + shape.below(597) as u32
                }
            })
            .collect();
        frames.reverse(); // leaf first
        p.stacks.push(Stack {
            frames,
            truncated: false,
        });
        let n = 1 + rng.below(4);
        let in_request = s % 5 != 0;
        let (span, route) = if in_request {
            let r = (s % 20) as u64;
            let k = rng.below(spans_per_window / 20) * 20 + r;
            let id = i * 1_000_000 + k + 1;
            let span_id = SpanId::from_u64(id).expect("ids start at 1");
            let ctx = SpanContext {
                trace_id: TraceId::from_u128(u128::from(id) << 64 | 1).expect("non-zero"),
                span_id,
                local_root_span_id: span_id,
            };
            (Some(ctx), routes[(k % 20) as usize].clone())
        } else {
            (None, background.clone())
        };
        p.samples.push(
            ProfileSample::new(s as u32, route, threads[s % 8].clone())
                .with_span(span)
                .with_cpu(n, n * PERIOD_NS)
                .with_wall(n, n * PERIOD_NS),
        );
    }
    for k in 0..spans_per_window {
        let id = i * 1_000_000 + k + 1;
        let span_id = SpanId::from_u64(id).expect("ids start at 1");
        let start = p.start_unix_ns + rng.below(WINDOW_NS / 2);
        let trace_id = TraceId::from_u128(u128::from(id) << 64 | 1).expect("non-zero");
        let name = format!("GET /api/v1/resource_{}/{{id}}", k % 20).into();
        p.spans.push(
            SpanRecord::new(trace_id, span_id, span_id, name, start)
                .with_route(Some(format!("/api/v1/resource_{}/{{id}}", k % 20).into()))
                .with_end_unix_ns(Some(start + 1_000_000 * (1 + rng.below(2_000)))),
        );
    }
    let mut counts: Vec<RouteRequests> = routes
        .iter()
        .map(|r| RouteRequests {
            route: r.clone(),
            requests: REQUESTS_PER_RECORD * (spans_per_window / 20),
        })
        .collect();
    counts.sort_by(|a, b| a.route.cmp(&b.route));
    p.requests = Some(counts);
    p.stats.ticks = WINDOW_NS / PERIOD_NS;
    p.stats.effective_rate_millihz = 100_000;
    p
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: gen_store DIR [windows] [stacks]"))?;
    let windows: u64 = args.next().map_or(Ok(1440), |s| s.parse())?;
    let stacks: usize = args.next().map_or(Ok(10_000), |s| s.parse())?;
    let versions: u64 = args.next().map_or(Ok(1), |s| s.parse())?;
    let per_version = windows.div_ceil(versions.max(1)).max(1);
    let store = FileStore::new(&dir);
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as u64;
                if i >= windows {
                    break;
                }
                let version = format!("1.4.{}", 2 + i / per_version);
                if let Err(e) = store.write(&window(i, stacks, &version)) {
                    eprintln!("window {i}: {e}");
                }
            });
        }
    });
    println!("wrote {windows} windows of {stacks} stacks to {dir}");
    Ok(())
}
