//! Merging windows into one: the roll-ups of a retention policy.
//!
//! A merged window holds the same samples as its sources, so every aggregate question (a
//! route's, service's or version's samples and frames, the routes behind a frame, a diff) gets
//! the same answer from it as from the sources. Optionally it drops trace and span ids and the
//! span table, so that rows of different requests with the same stack, route and thread fold
//! into one: then span and trace questions can no longer be asked of it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::{
    Frame, Profile, ProfileSample, RouteRequests, SpanContext, SpanId, SpanRecord, Stack,
    WindowStats,
};

/// Why windows could not be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// The windows belong to different resources (service, version, instance…).
    #[error("cannot merge windows of different resources ({first} and {other}); group windows by resource first")]
    ResourceMismatch {
        /// The first window's service.
        first: String,
        /// The other window's service.
        other: String,
    },
    /// The windows were sampled at different periods.
    #[error("cannot merge windows sampled every {first} ns and every {other} ns; group windows by period first")]
    PeriodMismatch {
        /// The first window's period.
        first: u64,
        /// The other window's period.
        other: u64,
    },
}

/// The key of a merged row: stack, span, route, thread, task.
type RowKey = (
    u32,
    Option<SpanContext>,
    Arc<str>,
    Arc<str>,
    Option<Arc<str>>,
);

/// Merges windows of one resource one at a time, so a day of windows never needs to be in
/// memory at once.
///
/// ```
/// use span_profile_core::{Profile, Resource, WindowMerger};
/// let a = Profile::empty(Resource::default(), 0, 60_000_000_000, 10_000_000);
/// let b = Profile::empty(Resource::default(), 60_000_000_000, 60_000_000_000, 10_000_000);
/// let mut m = WindowMerger::new(true);
/// m.add(&a).unwrap();
/// m.add(&b).unwrap();
/// let merged = m.finish().unwrap();
/// assert_eq!((merged.start_unix_ns, merged.duration_ns), (0, 120_000_000_000));
/// ```
#[derive(Debug)]
pub struct WindowMerger {
    keep_spans: bool,
    out: Option<Profile>,
    end_unix_ns: u64,
    frames: HashMap<Frame, u32>,
    stacks: HashMap<Stack, u32>,
    rows: HashMap<RowKey, usize>,
    spans: HashMap<SpanId, usize>,
    /// The sources' request counts summed by route; `None` once a source did not count them.
    requests: Option<HashMap<Arc<str>, u64>>,
    /// Sum of `effective_rate_millihz * ticks`, for the tick-weighted mean rate.
    rate_ticks: u128,
}

impl WindowMerger {
    /// A merger; with `keep_spans` false, trace and span ids and the span table are dropped.
    pub fn new(keep_spans: bool) -> Self {
        Self {
            keep_spans,
            out: None,
            end_unix_ns: 0,
            frames: HashMap::new(),
            stacks: HashMap::new(),
            rows: HashMap::new(),
            spans: HashMap::new(),
            requests: Some(HashMap::new()),
            rate_ticks: 0,
        }
    }

    /// Adds one window. Windows may come in any order; the merged window spans from the
    /// earliest start to the latest end.
    pub fn add(&mut self, p: &Profile) -> Result<(), MergeError> {
        let out = self.out.get_or_insert_with(|| {
            Profile::empty(
                p.resource.clone(),
                p.start_unix_ns,
                p.duration_ns,
                p.period_ns,
            )
        });
        if out.resource != p.resource {
            return Err(MergeError::ResourceMismatch {
                first: describe(&out.resource),
                other: describe(&p.resource),
            });
        }
        if out.period_ns != p.period_ns {
            return Err(MergeError::PeriodMismatch {
                first: out.period_ns,
                other: p.period_ns,
            });
        }
        out.start_unix_ns = out.start_unix_ns.min(p.start_unix_ns);
        self.end_unix_ns = self
            .end_unix_ns
            .max(p.start_unix_ns.saturating_add(p.duration_ns));

        let frame_map: Vec<u32> = p
            .frames
            .iter()
            .map(|f| {
                *self.frames.entry(f.clone()).or_insert_with(|| {
                    out.frames.push(f.clone());
                    (out.frames.len() - 1) as u32
                })
            })
            .collect();
        let stack_map: Vec<u32> = p
            .stacks
            .iter()
            .map(|s| {
                let mapped = Stack {
                    frames: s
                        .frames
                        .iter()
                        .filter_map(|&f| frame_map.get(f as usize).copied())
                        .collect(),
                    truncated: s.truncated,
                };
                *self.stacks.entry(mapped).or_insert_with_key(|k| {
                    out.stacks.push(k.clone());
                    (out.stacks.len() - 1) as u32
                })
            })
            .collect();
        for s in &p.samples {
            // A sample pointing past the stack table keeps an out-of-range index, as before.
            let stack = stack_map.get(s.stack as usize).copied().unwrap_or(u32::MAX);
            let span = if self.keep_spans { s.span } else { None };
            let key = (
                stack,
                span,
                s.route.clone(),
                s.thread_name.clone(),
                s.task_name.clone(),
            );
            match self.rows.get(&key) {
                Some(&i) => {
                    let row = &mut out.samples[i];
                    row.cpu_samples += s.cpu_samples;
                    row.wall_samples += s.wall_samples;
                    row.cpu_ns += s.cpu_ns;
                    row.wall_ns += s.wall_ns;
                }
                None => {
                    self.rows.insert(key, out.samples.len());
                    out.samples.push(ProfileSample {
                        stack,
                        span,
                        ..s.clone()
                    });
                }
            }
        }
        if self.keep_spans {
            for r in &p.spans {
                add_span(&mut out.spans, &mut self.spans, r);
            }
        }
        // Requests are counted, not recorded, so a roll-up keeps them whether or not it keeps
        // spans; one source that did not count them leaves the merge uncounted (ADR 0032).
        match (&mut self.requests, &p.requests) {
            (Some(sum), Some(counts)) => {
                for r in counts {
                    *sum.entry(r.route.clone()).or_default() += r.requests;
                }
            }
            _ => self.requests = None,
        }
        self.rate_ticks += u128::from(p.stats.effective_rate_millihz) * u128::from(p.stats.ticks);
        add_stats(&mut out.stats, &p.stats);
        Ok(())
    }

    /// The merged window, or `None` if no window was added.
    pub fn finish(self) -> Option<Profile> {
        let mut out = self.out?;
        out.duration_ns = self.end_unix_ns.saturating_sub(out.start_unix_ns);
        out.requests = self.requests.map(|sum| {
            let mut v: Vec<RouteRequests> = sum
                .into_iter()
                .map(|(route, requests)| RouteRequests { route, requests })
                .collect();
            v.sort_unstable_by(|a, b| a.route.cmp(&b.route));
            v
        });
        if out.stats.ticks > 0 {
            out.stats.effective_rate_millihz =
                u64::try_from(self.rate_ticks / u128::from(out.stats.ticks)).unwrap_or(u64::MAX);
        }
        Some(out)
    }
}

/// Merges `windows` (all of one resource and period) into one; see [`WindowMerger`].
pub fn merge_windows(windows: &[Profile], keep_spans: bool) -> Result<Option<Profile>, MergeError> {
    let mut m = WindowMerger::new(keep_spans);
    for w in windows {
        m.add(w)?;
    }
    Ok(m.finish())
}

fn describe(r: &crate::Resource) -> String {
    format!(
        "service {} version {} instance {}",
        r.service,
        r.version.as_deref().unwrap_or("-"),
        r.instance.as_deref().unwrap_or("-")
    )
}

/// One record per span id; an ended record wins over an open one.
fn add_span(out: &mut Vec<SpanRecord>, at: &mut HashMap<SpanId, usize>, r: &SpanRecord) {
    match at.get(&r.span_id) {
        Some(&i) if out[i].end_unix_ns.is_some() => {}
        Some(&i) => out[i] = r.clone(),
        None => {
            at.insert(r.span_id, out.len());
            out.push(r.clone());
        }
    }
}

/// Sums every counter; the rate is set in `finish`.
fn add_stats(out: &mut WindowStats, s: &WindowStats) {
    out.ticks += s.ticks;
    out.missed_ticks += s.missed_ticks;
    out.walk_errors += s.walk_errors;
    out.truncated_stacks += s.truncated_stacks;
    out.skipped_threads += s.skipped_threads;
    out.dropped_samples += s.dropped_samples;
    out.label_overflow += s.label_overflow;
    out.dropped_spans += s.dropped_spans;
    out.unsampled_spans += s.unsampled_spans;
    out.dropped_windows += s.dropped_windows;
    out.export_errors += s.export_errors;
    out.agent_cpu_ns += s.agent_cpu_ns;
}
