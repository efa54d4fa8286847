//! A selection's samples gathered into one [`Profile`], to be written out in another format
//! (`span-profile export`). Which samples are selected is [`query::for_each_sample`]'s rule, the
//! one every report uses; this module only keeps what they need.

use std::collections::{HashMap, HashSet};

use span_profile_core::{Profile, ProfileSample, Resource, SpanId, Stack, WindowMerger};

use crate::store::query::{self, Filter};

/// The selected samples of some windows, merged into one profile as they are added: each
/// window contributes only its selected samples, the frames and stacks they use, and the span
/// records they name. An accumulator for [`select`](crate::store::select): [`Selection::of`]
/// is the question, [`Selection::merge`] combines answers.
///
/// Windows of different resources (instances, versions, services) and periods merge: the
/// merged profile keeps the resource fields and the period that all its windows share, and
/// clears the others. Its window stats are left at zero: a selection is not a window, and
/// the stats count whole windows.
///
/// ```
/// use span_profile_core::{Profile, Resource};
/// use span_profile_export::store::query::Filter;
/// use span_profile_export::store::Selection;
///
/// let w = Profile::empty(Resource::default(), 0, 60_000_000_000, 10_000_000);
/// let s = Selection::of(&[w], &Filter::default());
/// assert_eq!(s.samples(), 0);
/// assert!(s.into_profile().is_none());
/// ```
#[derive(Debug, Default)]
pub struct Selection {
    merged: Option<WindowMerger>,
    shared: Option<Shared>,
    samples: u64,
    windows: usize,
}

/// What every window added so far has in common.
#[derive(Debug, Clone, PartialEq)]
struct Shared {
    resource: Resource,
    period_ns: Option<u64>,
}

impl Shared {
    fn of(p: &Profile) -> Self {
        Shared {
            resource: p.resource.clone(),
            period_ns: Some(p.period_ns),
        }
    }

    /// Keeps what `other` shares with `self`.
    fn meet(&mut self, other: &Shared) {
        let r = &mut self.resource;
        let o = &other.resource;
        if r.service != o.service {
            r.service = Resource::default().service;
        }
        if r.version != o.version {
            r.version = None;
        }
        if r.environment != o.environment {
            r.environment = None;
        }
        if r.instance != o.instance {
            r.instance = None;
        }
        r.attributes.retain(|a| o.attributes.contains(a));
        if self.period_ns != other.period_ns {
            self.period_ns = None;
        }
    }
}

impl Selection {
    /// The samples of `profiles` that `filter` selects (see [`query::for_each_sample`]).
    pub fn of(profiles: &[Profile], filter: &Filter) -> Self {
        let mut by_window: Vec<(&Profile, Vec<&ProfileSample>)> = Vec::new();
        query::for_each_sample(profiles, filter, |p, s| match by_window.last_mut() {
            Some((last, samples)) if std::ptr::eq(*last, p) => samples.push(s),
            _ => by_window.push((p, vec![s])),
        });
        let mut out = Selection::default();
        for (p, samples) in by_window {
            if out.add(&selected_part(p, &samples), Shared::of(p)) {
                out.samples += samples.iter().map(|s| s.wall_samples).sum::<u64>();
                out.windows += 1;
            }
        }
        out
    }

    /// Adds `other`'s samples to these.
    pub fn merge(&mut self, other: Selection) {
        let (Some(shared), Some(p)) = (other.shared, other.merged.and_then(WindowMerger::finish))
        else {
            return;
        };
        if self.add(&p, shared) {
            self.samples += other.samples;
            self.windows += other.windows;
        }
    }

    /// Adds a profile of selected samples whose windows share `shared`; false if it could not
    /// be merged (never, as every part has the same resource and period).
    fn add(&mut self, part: &Profile, shared: Shared) -> bool {
        match &mut self.shared {
            Some(s) => s.meet(&shared),
            None => self.shared = Some(shared),
        }
        // Every part carries the default resource and no period, so any two merge; the
        // shared ones are put back in `into_profile`.
        let merger = self.merged.get_or_insert_with(|| WindowMerger::new(true));
        merger.add(part).is_ok()
    }

    /// Wall samples selected.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Windows that had selected samples.
    pub fn windows(&self) -> usize {
        self.windows
    }

    /// The merged profile, or `None` if nothing was selected.
    pub fn into_profile(self) -> Option<Profile> {
        let mut p = self.merged?.finish()?;
        if let Some(shared) = self.shared {
            p.resource = shared.resource;
            p.period_ns = shared.period_ns.unwrap_or(0);
        }
        Some(p)
    }
}

/// The part of window `p` that `samples` (samples of `p`) need: those samples, the stacks and
/// frames they use, renumbered, and the span records of their spans and local roots. The
/// resource is the default and the period zero, so that parts of any windows merge.
fn selected_part(p: &Profile, samples: &[&ProfileSample]) -> Profile {
    let mut out = Profile::empty(Resource::default(), p.start_unix_ns, p.duration_ns, 0);
    let mut frame_map: HashMap<u32, u32> = HashMap::new();
    let mut stack_map: HashMap<u32, u32> = HashMap::new();
    let mut spans: HashSet<SpanId> = HashSet::new();
    for s in samples {
        let stack = *stack_map.entry(s.stack).or_insert_with(|| {
            let Some(src) = p.stacks.get(s.stack as usize) else {
                // A sample past the stack table keeps an index past the new one.
                return u32::MAX;
            };
            let frames = src
                .frames
                .iter()
                .filter_map(|&f| {
                    let frame = p.frames.get(f as usize)?;
                    Some(*frame_map.entry(f).or_insert_with(|| {
                        out.frames.push(frame.clone());
                        (out.frames.len() - 1) as u32
                    }))
                })
                .collect();
            out.stacks.push(Stack {
                frames,
                truncated: src.truncated,
            });
            (out.stacks.len() - 1) as u32
        });
        if let Some(ctx) = s.span {
            spans.insert(ctx.span_id);
            spans.insert(ctx.local_root_span_id);
        }
        let mut row = (*s).clone();
        row.stack = stack;
        out.samples.push(row);
    }
    out.spans = p
        .spans
        .iter()
        .filter(|r| spans.contains(&r.span_id))
        .cloned()
        .collect();
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use span_profile_core::{Frame, SpanContext, SpanRecord, TraceId};

    use super::*;

    fn window(service: &str, start: u64) -> Profile {
        let mut p = Profile::empty(
            Resource {
                service: service.into(),
                instance: Some(format!("i-{start}")),
                ..Resource::default()
            },
            start,
            10,
            7,
        );
        p.frames = ["leaf", "mid", "root", "unused"]
            .map(|f| Frame::new(f, "app.py", 1))
            .into();
        p.stacks = vec![
            Stack {
                frames: vec![0, 1, 2],
                truncated: false,
            },
            Stack {
                frames: vec![3],
                truncated: false,
            },
        ];
        let span = SpanContext {
            trace_id: TraceId::from_u128(9).unwrap(),
            span_id: SpanId::from_u64(2).unwrap(),
            local_root_span_id: SpanId::from_u64(1).unwrap(),
        };
        let route: Arc<str> = "/a".into();
        p.samples = vec![
            ProfileSample::new(0, route.clone(), "t".into())
                .with_span(Some(span))
                .with_wall(5, 50)
                .with_cpu(4, 40),
            ProfileSample::new(1, "/b".into(), "t".into()).with_wall(3, 30),
        ];
        p.spans = vec![
            SpanRecord::new(
                span.trace_id,
                span.span_id,
                span.local_root_span_id,
                "s".into(),
                1,
            ),
            SpanRecord::new(
                span.trace_id,
                SpanId::from_u64(8).unwrap(),
                span.local_root_span_id,
                "x".into(),
                1,
            ),
        ];
        p
    }

    #[test]
    fn a_selection_keeps_only_the_selected_samples_and_what_they_use() {
        let windows = [window("a", 0), window("a", 10)];
        let s = Selection::of(&windows, &Filter::default().route("/a"));
        assert_eq!((s.samples(), s.windows()), (10, 2));
        let p = s.into_profile().unwrap();
        let names: Vec<&str> = p.frames.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, ["leaf", "mid", "root"]);
        assert_eq!(p.samples.len(), 1, "the same row of two windows is one");
        assert_eq!(p.samples[0].wall_samples, 10);
        assert_eq!(p.samples[0].cpu_ns, 80);
        assert_eq!(p.spans.len(), 1, "only the sampled span's record");
        assert_eq!((p.start_unix_ns, p.duration_ns), (0, 20));
        assert_eq!(p.resource.service, "a");
        assert_eq!(p.resource.instance, None, "the instances differ");
        assert_eq!(p.period_ns, 7);
    }

    #[test]
    fn selections_merge_across_services_and_count_once() {
        let mut a = Selection::of(&[window("a", 0)], &Filter::default());
        let b = Selection::of(&[window("b", 10)], &Filter::default());
        a.merge(b);
        a.merge(Selection::default());
        assert_eq!((a.samples(), a.windows()), (16, 2));
        let p = a.into_profile().unwrap();
        assert_eq!(p.samples.iter().map(|s| s.wall_samples).sum::<u64>(), 16);
        assert_eq!(p.resource.service, Resource::default().service);
        let mut empty = Selection::default();
        empty.merge(Selection::of(&[window("c", 0)], &Filter::default()));
        assert_eq!((empty.samples(), empty.windows()), (8, 1));
    }
}
