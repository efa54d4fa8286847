//! encode → decode gives back the original profile, gzip or not.

mod common;

use std::sync::Arc;

use span_profile_core::{
    Frame, Profile, ProfileSample, Resource, RouteRequests, SpanContext, SpanId, SpanRecord, Stack,
    TraceId,
};
use span_profile_export::{decode_pprof, encode_pprof, encode_pprof_raw, TRUNCATED_FRAME};
use span_profile_test::XorShift;

fn assert_round_trips(p: &Profile) {
    let gz = encode_pprof(p);
    assert_eq!(&gz[..2], &[0x1f, 0x8b]);
    assert_eq!(&decode_pprof(&gz).unwrap(), p);
    assert_eq!(&decode_pprof(&encode_pprof_raw(p)).unwrap(), p);
}

#[test]
fn checkout_window_round_trips() {
    assert_round_trips(&common::checkout_profile());
}

#[test]
fn empty_window_round_trips() {
    assert_round_trips(&Profile::empty(Resource::default(), 0, 0, 0));
}

#[test]
fn stack_tables_the_samples_do_not_imply_round_trip() {
    let mut p = common::checkout_profile();
    // An unused stack, a duplicate, out-of-order use and an out-of-range frame index.
    p.stacks.push(Stack {
        frames: vec![0, 1],
        truncated: false,
    });
    p.stacks.push(p.stacks[0].clone());
    p.stacks.push(Stack {
        frames: vec![0, 999],
        truncated: true,
    });
    p.samples.swap(0, 2);
    p.samples.push(common::sample(6, None, "x", 1, 1));
    p.samples.push(common::sample(5, None, "x", 1, 1));
    assert_round_trips(&p);
}

#[test]
fn a_real_frame_named_truncated_is_not_taken_for_the_marker() {
    let mut p = common::checkout_profile();
    p.frames.push(Frame::new(TRUNCATED_FRAME, "", 0));
    p.stacks.push(Stack {
        frames: vec![8],
        truncated: false,
    });
    p.samples.push(common::sample(4, None, "background", 1, 0));
    assert_round_trips(&p);
}

/// Numbers a format must carry: 0, the largest, and ordinary ones.
fn number(rng: &mut XorShift) -> u64 {
    match rng.below(4) {
        0 => 0,
        1 => u64::MAX - rng.below(3),
        _ => rng.below(1 << 40),
    }
}

const ODD: &[&str] = &[
    "",
    "main",
    "Pricing.calculate",
    "ünïcødé 名前 🦀",
    "with\nnewline\tand\u{0}nul",
    "=;,{}\"quoted\"\\",
    "[truncated]",
    "span-profile.meta={\"v\":99}",
    "/orders/{id}",
    "background",
    "_other",
];

fn random_profile(rng: &mut XorShift) -> Profile {
    let resource = Resource {
        service: rng.pick(ODD).to_string(),
        version: (rng.below(2) == 0).then(|| rng.pick(ODD).to_string()),
        environment: (rng.below(2) == 0).then(|| rng.pick(ODD).to_string()),
        instance: (rng.below(2) == 0).then(|| rng.pick(ODD).to_string()),
        attributes: (0..rng.below(3))
            .map(|_| (rng.pick(ODD).to_string(), rng.pick(ODD).to_string()))
            .collect(),
    };
    let mut p = Profile::empty(resource, number(rng), number(rng), number(rng));
    let n_frames = rng.below(12);
    p.frames = (0..n_frames)
        .map(|_| {
            let line = match rng.below(3) {
                0 => 0,
                1 => u32::MAX,
                _ => rng.below(5000) as u32,
            };
            Frame::new(rng.pick(ODD), rng.pick(ODD), line)
        })
        .collect();
    p.stacks = (0..rng.below(8))
        .map(|_| Stack {
            // Mostly valid frame indices, sometimes one past the table.
            frames: (0..rng.below(6))
                .map(|_| rng.below(n_frames + 1) as u32)
                .collect(),
            truncated: rng.below(3) == 0,
        })
        .collect();
    let spans: Vec<SpanContext> = (0..1 + rng.below(3))
        .map(|_| SpanContext {
            trace_id: TraceId::from_u128(u128::from(rng.next_u64()) << 64 | 1).unwrap(),
            span_id: SpanId::from_u64(rng.next_u64() | 1).unwrap(),
            local_root_span_id: SpanId::from_u64(rng.next_u64() | 1).unwrap(),
        })
        .collect();
    let n_stacks = p.stacks.len() as u64;
    p.samples = (0..rng.below(10))
        .map(|_| {
            // In the order the generator has always drawn them.
            let stack = rng.below(n_stacks.max(1)) as u32;
            let span = (rng.below(2) == 0).then(|| spans[rng.below(spans.len() as u64) as usize]);
            let route = Arc::from(rng.pick(ODD));
            let thread_name = Arc::from(rng.pick(ODD));
            let task_name = (rng.below(2) == 0).then(|| Arc::from(rng.pick(ODD)));
            let (cpu_samples, wall_samples) = (number(rng), number(rng));
            let (cpu_ns, wall_ns) = (number(rng), number(rng));
            ProfileSample::new(stack, route, thread_name)
                .with_span(span)
                .with_task_name(task_name)
                .with_cpu(cpu_samples, cpu_ns)
                .with_wall(wall_samples, wall_ns)
        })
        .collect();
    p.spans = spans
        .iter()
        .map(|c| {
            // In the order the generator has always drawn them.
            let parent = (rng.below(2) == 0).then_some(c.local_root_span_id);
            let name = rng.pick(ODD).into();
            let route = (rng.below(2) == 0).then(|| rng.pick(ODD).into());
            let start = number(rng);
            let end = (rng.below(2) == 0).then(|| number(rng));
            SpanRecord::new(c.trace_id, c.span_id, c.local_root_span_id, name, start)
                .with_parent_span_id(parent)
                .with_route(route)
                .with_end_unix_ns(end)
        })
        .collect();
    p.stats.ticks = number(rng);
    p.stats.dropped_windows = number(rng);
    p.stats.effective_rate_millihz = number(rng);
    // Drawn last, so that the cases above stay as they were. Counted or not (ADR 0032).
    if rng.below(2) == 0 {
        p.requests = Some(
            (0..rng.below(4))
                .map(|_| RouteRequests {
                    route: rng.pick(ODD).into(),
                    requests: number(rng),
                })
                .collect(),
        );
    }
    p
}

#[test]
fn random_profiles_round_trip() {
    // Deterministic, so a failure reproduces.
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for i in 0..500 {
        let p = random_profile(&mut rng);
        let back = decode_pprof(&encode_pprof(&p)).unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert_eq!(back, p, "case {i}");
    }
}

#[test]
fn aggregator_shaped_windows_carry_no_stack_table_in_the_meta() {
    let p = common::checkout_profile();
    let meta = meta_field(&encode_pprof_raw(&p)).expect("the meta field");
    let meta = String::from_utf8(meta).unwrap();
    assert!(meta.starts_with("{\"v\":1,"), "{meta}");
    assert!(!meta.contains("sample_stacks"), "{meta}");
    assert!(meta.contains("pricing.calculate"));
}

/// The bytes of field 21328 of a bare pprof message (ADR 0024), read with prost's own
/// wire-format primitives.
fn meta_field(mut raw: &[u8]) -> Option<Vec<u8>> {
    use prost::encoding::{decode_key, skip_field, DecodeContext, WireType};
    let mut found = None;
    while !raw.is_empty() {
        let (tag, wire) = decode_key(&mut raw).unwrap();
        if tag == 21328 && wire == WireType::LengthDelimited {
            let mut v = Vec::new();
            prost::encoding::bytes::merge(wire, &mut v, &mut raw, DecodeContext::default())
                .unwrap();
            found = Some(v);
        } else {
            skip_field(wire, tag, &mut raw, DecodeContext::default()).unwrap();
        }
    }
    found
}

#[test]
fn the_profile_has_no_comment_and_pprof_readers_see_no_meta() {
    use prost::Message;
    let p = common::checkout_profile();
    let raw = encode_pprof_raw(&p);
    let msg = span_profile_export::pprof::Profile::decode(raw.as_slice()).unwrap();
    assert!(msg.comment.is_empty(), "{:?}", msg.comment);
    assert!(
        !msg.string_table
            .iter()
            .any(|s| s.contains("pricing.calculate")),
        "the span table is not in the string table"
    );
    // A reader that knows only pprof's fields, re-encoding what it read, drops the meta and
    // keeps every sample; ours then reads that as a foreign profile (no spans).
    let rewritten = decode_pprof(&msg.encode_to_vec()).unwrap();
    assert!(rewritten.spans.is_empty());
    assert_eq!(rewritten.samples.len(), p.samples.len());
}
