//! Generators and checks shared by the fuzz targets.
//!
//! Profiles are built from a small pool of names and ids most of the time, so that the merger
//! and the encoder see colliding frames, stacks and rows, and from arbitrary values the rest of
//! the time, so that odd strings and out-of-range indices are covered too.

use std::collections::BTreeMap;
use std::sync::Arc;

use arbitrary::{Result, Unstructured};
use span_profile_core::{
    Frame, Profile, ProfileSample, Resource, SpanContext, SpanId, SpanRecord, Stack, TraceId,
    WindowStats,
};

const NAMES: [&str; 6] = ["main", "handle", "parse_date", "<module>", "", "é🙂"];
const FILES: [&str; 4] = ["app.py", "/srv/pricing.py", "", "a,b=c"];
const ROUTES: [&str; 5] = ["background", "/orders/{id}", "/checkout", "", "_other"];
const THREADS: [&str; 3] = ["MainThread", "worker-1", ""];

/// How large the numbers in a generated profile may be.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Counts and times up to `u32::MAX` (sums cannot overflow `u64`), else any `u64`.
    pub small_counts: bool,
    /// Keep the resource and period fixed, so that every window can be merged.
    pub mergeable: bool,
}

/// A string from `pool` most of the time, else arbitrary.
pub fn pick(u: &mut Unstructured<'_>, pool: &[&str]) -> Result<String> {
    if u.ratio(7, 8)? {
        Ok((*u.choose(pool)?).to_owned())
    } else {
        u.arbitrary()
    }
}

fn count(u: &mut Unstructured<'_>, shape: Shape) -> Result<u64> {
    if shape.small_counts {
        Ok(u64::from(u.arbitrary::<u32>()?))
    } else {
        u.arbitrary()
    }
}

/// A span context from a pool of 4 (trace, span, root) triples, or arbitrary non-zero ids.
pub fn span_context(u: &mut Unstructured<'_>) -> Result<SpanContext> {
    let small = u.ratio(7, 8)?;
    let (t, s, r) = if small {
        let i: u8 = u.int_in_range(1..=4)?;
        (u128::from(i), u64::from(i) * 10, u64::from(i % 2) + 1)
    } else {
        (u.arbitrary()?, u.arbitrary()?, u.arbitrary()?)
    };
    Ok(SpanContext {
        trace_id: TraceId::from_u128(t.max(1)).unwrap_or_else(|| unreachable!()),
        span_id: SpanId::from_u64(s.max(1)).unwrap_or_else(|| unreachable!()),
        local_root_span_id: SpanId::from_u64(r.max(1)).unwrap_or_else(|| unreachable!()),
    })
}

fn resource(u: &mut Unstructured<'_>, shape: Shape) -> Result<Resource> {
    if shape.mergeable || u.ratio(1, 2)? {
        return Ok(Resource {
            service: "checkout".into(),
            version: Some("1.0".into()),
            environment: None,
            instance: Some("host-1".into()),
            attributes: vec![("team".into(), "payments".into())],
        });
    }
    Ok(Resource {
        service: u.arbitrary()?,
        version: u.arbitrary()?,
        environment: u.arbitrary()?,
        instance: u.arbitrary()?,
        attributes: u.arbitrary()?,
    })
}

fn stats(u: &mut Unstructured<'_>, shape: Shape) -> Result<WindowStats> {
    let mut s = WindowStats::default();
    for f in [
        &mut s.ticks,
        &mut s.missed_ticks,
        &mut s.walk_errors,
        &mut s.truncated_stacks,
        &mut s.skipped_threads,
        &mut s.dropped_samples,
        &mut s.label_overflow,
        &mut s.dropped_spans,
        &mut s.dropped_windows,
        &mut s.export_errors,
        &mut s.agent_cpu_ns,
        &mut s.effective_rate_millihz,
    ] {
        *f = if shape.small_counts {
            u64::from(u.arbitrary::<u16>()?)
        } else {
            u.arbitrary()?
        };
    }
    Ok(s)
}

/// An index below `len` most of the time, else any value (out of range on purpose).
fn index(u: &mut Unstructured<'_>, len: usize) -> Result<u32> {
    if len > 0 && u.ratio(15, 16)? {
        Ok(u.choose_index(len)? as u32)
    } else if u.ratio(1, 2)? {
        Ok(len as u32)
    } else {
        u.arbitrary()
    }
}

/// A window of up to 8 frames, 8 stacks, 16 sample rows and 4 span records.
pub fn profile(u: &mut Unstructured<'_>, shape: Shape) -> Result<Profile> {
    let start = if shape.mergeable {
        u64::from(u.int_in_range(0u32..=100)?) * 10_000_000_000
    } else {
        u.arbitrary()?
    };
    let duration = if shape.mergeable {
        u64::from(u.int_in_range(1u32..=60)?) * 1_000_000_000
    } else {
        u.arbitrary()?
    };
    let period = if shape.mergeable {
        10_000_000
    } else {
        u.arbitrary()?
    };
    let mut p = Profile::empty(resource(u, shape)?, start, duration, period);
    for _ in 0..u.int_in_range(0..=8)? {
        p.frames.push(Frame::new(
            pick(u, &NAMES)?,
            pick(u, &FILES)?,
            u.int_in_range(0..=4)?,
        ));
    }
    for _ in 0..u.int_in_range(0..=8)? {
        let n = u.int_in_range(0..=6)?;
        let mut frames = Vec::with_capacity(n);
        for _ in 0..n {
            frames.push(index(u, p.frames.len())?);
        }
        p.stacks.push(Stack {
            frames,
            truncated: u.ratio(1, 8)?,
        });
    }
    for _ in 0..u.int_in_range(0..=16)? {
        let span = if u.arbitrary()? {
            Some(span_context(u)?)
        } else {
            None
        };
        let task = if u.ratio(1, 4)? {
            Some(Arc::from(pick(u, &["task-a", "Task-1", ""])?))
        } else {
            None
        };
        // Drawn in the order the fuzz inputs were written for.
        let stack = index(u, p.stacks.len())?;
        let route = Arc::from(pick(u, &ROUTES)?);
        let thread_name = Arc::from(pick(u, &THREADS)?);
        let (cpu_samples, wall_samples) = (count(u, shape)?, count(u, shape)?);
        let (cpu_ns, wall_ns) = (count(u, shape)?, count(u, shape)?);
        p.samples.push(
            ProfileSample::new(stack, route, thread_name)
                .with_span(span)
                .with_task_name(task)
                .with_cpu(cpu_samples, cpu_ns)
                .with_wall(wall_samples, wall_ns),
        );
    }
    for _ in 0..u.int_in_range(0..=4)? {
        let c = span_context(u)?;
        // Drawn in the order the fuzz inputs were written for.
        let parent = if u.arbitrary()? {
            Some(c.local_root_span_id)
        } else {
            None
        };
        let name = pick(u, &["pricing.calculate", "GET /orders/{id}", ""])?.into();
        let route = if u.arbitrary()? {
            Some(pick(u, &ROUTES)?.into())
        } else {
            None
        };
        let start = u.arbitrary()?;
        let end = u.arbitrary()?;
        p.spans.push(
            SpanRecord::new(c.trace_id, c.span_id, c.local_root_span_id, name, start)
                .with_parent_span_id(parent)
                .with_route(route)
                .with_end_unix_ns(end),
        );
    }
    p.stats = stats(u, shape)?;
    Ok(p)
}

/// What a row is about, independent of table indices: its frames (leaf first; `None` when its
/// stack index is out of range), the stack's truncation mark, span and labels.
pub type RowKey = (
    Option<(Vec<Frame>, bool)>,
    Option<SpanContext>,
    Arc<str>,
    Arc<str>,
    Option<Arc<str>>,
);

/// cpu_samples, wall_samples, cpu_ns, wall_ns, summed without overflow.
pub type Totals = [u128; 4];

/// Sums a profile's rows by [`RowKey`], optionally forgetting spans (a merge that drops them).
pub fn tally_into(p: &Profile, keep_spans: bool, out: &mut BTreeMap<String, Totals>) {
    for s in &p.samples {
        let stack = p.stacks.get(s.stack as usize).map(|st| {
            (
                st.frames
                    .iter()
                    .filter_map(|&f| p.frames.get(f as usize).cloned())
                    .collect::<Vec<_>>(),
                st.truncated,
            )
        });
        let key: RowKey = (
            stack,
            if keep_spans { s.span } else { None },
            s.route.clone(),
            s.thread_name.clone(),
            s.task_name.clone(),
        );
        let t = out.entry(format!("{key:?}")).or_default();
        for (acc, v) in t
            .iter_mut()
            .zip([s.cpu_samples, s.wall_samples, s.cpu_ns, s.wall_ns])
        {
            *acc += u128::from(v);
        }
    }
}

/// [`tally_into`] over one profile.
pub fn tally(p: &Profile, keep_spans: bool) -> BTreeMap<String, Totals> {
    let mut out = BTreeMap::new();
    tally_into(p, keep_spans, &mut out);
    out
}

/// Sample totals per span id (`None`: background), the question "what did this span cost".
pub fn per_span(p: &Profile) -> BTreeMap<Option<u64>, u128> {
    let mut out = BTreeMap::new();
    for s in &p.samples {
        *out.entry(s.span.map(|c| c.span_id.to_u64())).or_default() += u128::from(s.wall_samples);
    }
    out
}

/// Sample totals per route.
pub fn per_route(p: &Profile) -> BTreeMap<String, u128> {
    let mut out = BTreeMap::new();
    for s in &p.samples {
        *out.entry(s.route.to_string()).or_default() += u128::from(s.wall_samples);
    }
    out
}
