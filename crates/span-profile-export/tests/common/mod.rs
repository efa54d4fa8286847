//! Profiles built by hand, shared by the integration tests.
// Shared by several test binaries, each using some of it: `pub`, and no dead-code warnings.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use span_profile_core::{
    Frame, Profile, ProfileSample, Resource, SpanContext, SpanId, SpanRecord, Stack, TraceId,
};

pub const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
pub const ROOT: &str = "00f067aa0ba902b7";
pub const CHILD: &str = "53995c3f42cd8ad8";

pub fn ctx(span: &str) -> SpanContext {
    SpanContext {
        trace_id: TRACE.parse::<TraceId>().unwrap(),
        span_id: span.parse::<SpanId>().unwrap(),
        local_root_span_id: ROOT.parse::<SpanId>().unwrap(),
    }
}

pub fn sample(stack: u32, span: Option<&str>, route: &str, wall: u64, cpu: u64) -> ProfileSample {
    ProfileSample::new(stack, Arc::from(route), Arc::from("MainThread"))
        .with_span(span.map(ctx))
        .with_cpu(cpu, cpu * 10_000_000)
        .with_wall(wall, wall * 10_000_000)
}

/// The seed scenario: a checkout service whose `pricing.calculate` span is slow in date
/// parsing. Two spans (a root and its child), a background sample, a truncated stack.
pub fn checkout_profile() -> Profile {
    let (resource, _) = Resource::from_vars(
        Some("checkout"),
        Some("service.version=1.4.2,deployment.environment=prod,service.instance.id=host-1/pid 42"),
    );
    let mut p = Profile::empty(
        resource,
        1_700_000_000_123_456_789,
        10_000_000_000,
        10_000_000,
    );
    p.frames = vec![
        Frame::new("_strptime", "/usr/lib/python3.12/_strptime.py", 565),
        Frame::new("parse_date", "/app/pricing.py", 12),
        Frame::new("calculate", "/app/pricing.py", 40),
        Frame::new("checkout", "/app/views.py", 88),
        Frame::new("handle", "/app/server.py", 7),
        Frame::new("calculate", "/app/pricing.py", 41),
        Frame::new("sleep", "", 0),
        Frame::new("run", "/app/worker.py", 3),
    ];
    p.stacks = vec![
        Stack {
            frames: vec![0, 1, 2, 3, 4],
            truncated: false,
        },
        Stack {
            frames: vec![3, 4],
            truncated: false,
        },
        Stack {
            frames: vec![6, 7],
            truncated: false,
        },
        Stack {
            frames: vec![5, 3, 4],
            truncated: true,
        },
    ];
    p.samples = vec![
        sample(0, Some(CHILD), "/checkout/{id}", 60, 55),
        sample(1, Some(ROOT), "/checkout/{id}", 10, 2),
        sample(2, None, "background", 100, 0),
        sample(3, Some(CHILD), "/checkout/{id}", 12, 12),
    ];
    p.samples[2].thread_name = Arc::from("worker-1");
    p.samples[3].task_name = Some(Arc::from("Task-7"));
    p.spans = vec![
        SpanRecord::new(
            TRACE.parse().unwrap(),
            ROOT.parse().unwrap(),
            ROOT.parse().unwrap(),
            "POST /checkout/{id}".into(),
            1_700_000_000_200_000_000,
        )
        .with_route(Some("/checkout/{id}".into()))
        .with_end_unix_ns(Some(1_700_000_000_920_000_000)),
        SpanRecord::new(
            TRACE.parse().unwrap(),
            CHILD.parse().unwrap(),
            ROOT.parse().unwrap(),
            "pricing.calculate".into(),
            1_700_000_000_250_000_000,
        )
        .with_parent_span_id(Some(ROOT.parse().unwrap())),
    ];
    p.stats.ticks = 1000;
    p.stats.truncated_stacks = 12;
    p.stats.dropped_spans = 3;
    p.stats.agent_cpu_ns = 4_200_000;
    p
}

pub mod python;
pub mod server;

pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The checkout window, moved to end now (inside Pyroscope's ingestion window).
pub fn recent_checkout() -> Profile {
    let mut p = checkout_profile();
    p.start_unix_ns = now_ns() - p.duration_ns;
    p
}

/// A window with `n` distinct stacks (`depth` frames each), ending now.
pub fn wide_profile(n: usize, depth: usize) -> Profile {
    let mut p = Profile::empty(
        Resource::default(),
        now_ns() - 10_000_000_000,
        10_000_000_000,
        10_000_000,
    );
    p.resource.service = "wide".into();
    for f in 0..(n + depth) {
        p.frames.push(Frame::new(
            format!("module.function_{f}"),
            format!("/app/module_{}.py", f % 97),
            f as u32 % 500 + 1,
        ));
    }
    for s in 0..n {
        p.stacks.push(Stack {
            frames: (0..depth).map(|d| (s + d) as u32).collect(),
            truncated: false,
        });
        let span = (s % 3 != 0).then_some(if s % 2 == 0 { CHILD } else { ROOT });
        p.samples.push(sample(
            s as u32,
            span,
            if span.is_some() {
                "/orders/{id}"
            } else {
                "background"
            },
            3,
            2,
        ));
    }
    p
}

/// `time_nanos` of the first profile of a captured Pyroscope push request.
pub fn first_profile_start(r: &server::Captured) -> i64 {
    use prost::Message;
    let push = span_profile_export::pyroscope::push::PushRequest::decode(r.plain_body().as_slice())
        .expect("a PushRequest");
    span_profile_export::pprof::Profile::decode(push.series[0].samples[0].raw_profile.as_slice())
        .expect("a pprof profile")
        .time_nanos
}

/// Every combination of these routes, services, versions and `(since, until)` ranges as a
/// window filter: what the summary specs ask of every window.
pub fn window_filters(
    routes: &[Option<&str>],
    services: &[Option<&str>],
    versions: &[Option<&str>],
    times: &[(Option<u64>, Option<u64>)],
) -> Vec<span_profile_export::store::query::Filter> {
    let mut out = Vec::new();
    for route in routes {
        for service in services {
            for version in versions {
                for &(since, until) in times {
                    let mut f =
                        span_profile_export::store::query::Filter::default().between(since, until);
                    f.route = route.map(str::to_string);
                    f.service = service.map(str::to_string);
                    f.version = version.map(str::to_string);
                    out.push(f);
                }
            }
        }
    }
    out
}

/// A resource of service `checkout` or `cart`, with no version, version `1` or version `2`:
/// what the summary specs' generated windows run as.
pub fn random_resource(rng: &mut span_profile_test::XorShift) -> Resource {
    Resource {
        service: rng.pick(&["checkout", "cart"]).to_string(),
        version: match rng.below(3) {
            0 => None,
            1 => Some("1".into()),
            _ => Some("2".into()),
        },
        ..Resource::default()
    }
}
