//! `span-profile diff --old version=A --new version=B`: the post-deploy check.

use crate::text::Shown;
use serde::Serialize;
use span_profile_export::store::diff::{self, FrameChange};
use span_profile_export::store::query::Tally;
use span_profile_export::store::{Store, Window};

use crate::args::{parse_duration, parse_fraction, parse_version_selector, VersionSelector};
use crate::select::WindowArgs;
use crate::{Empty, Usage};

/// Arguments of `diff`.
#[derive(Debug, clap::Args)]
pub(crate) struct DiffArgs {
    /// The deploy before: version=VALUE (`service.version`).
    #[arg(long, value_parser = parse_version_selector, value_name = "version=A")]
    pub(crate) old: VersionSelector,
    /// The deploy after: version=VALUE.
    #[arg(long, value_parser = parse_version_selector, value_name = "version=B")]
    pub(crate) new: VersionSelector,
    /// Growth of a frame's share of CPU that counts as a regression (0.02 = two points).
    #[arg(long, default_value_t = 0.02, value_parser = parse_fraction)]
    pub(crate) threshold: f64,
    /// Compare only the last WINDOW of the old deploy with the first WINDOW of the new one
    /// (e.g. 30m); by default all of each.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) window: Option<u64>,
    #[command(flatten)]
    pub(crate) windows: WindowArgs,
}

/// One window's CPU by frame, and which sides it is on.
#[derive(Debug)]
struct Side {
    old: bool,
    new: bool,
    start: u64,
    end: u64,
    cpu: Tally,
}

#[derive(Debug, Default, Serialize)]
struct Summary {
    selector: String,
    windows: usize,
    cpu_samples: u64,
}

/// Returns whether a regression was found.
pub(crate) fn run(store: &Store, args: &DiffArgs, json: bool) -> anyhow::Result<bool> {
    if args.windows.version.is_some() {
        return Err(Usage("diff takes versions from --old and --new, not --version".into()).into());
    }
    let filter = args.windows.filter();
    let (old_v, new_v) = (&args.old.0, &args.new.0);
    let files = store.list(&filter)?;
    let sides: Vec<Side> = store
        .fold_windows(&files, Some((&filter, false)), Vec::new, |acc, _, w| {
            let info = w.info();
            let old = info.version == Some(old_v.as_str());
            let new = info.version == Some(new_v.as_str());
            if !filter.matches(&info) || !(old || new) {
                return true;
            }
            let cpu = match &w {
                Window::Summary(s) => s.cpu_by_frame(&filter),
                Window::Profile(p) => Some(diff::cpu_by_frame(std::slice::from_ref(p), &filter)),
            };
            let Some(cpu) = cpu else {
                return false;
            };
            acc.push(Side {
                old,
                new,
                start: info.start_unix_ns,
                end: info.start_unix_ns.saturating_add(info.duration_ns),
                cpu,
            });
            true
        })
        .into_iter()
        .flatten()
        .collect();
    let old_end = sides.iter().filter(|s| s.old).map(|s| s.end).max();
    let new_start = sides.iter().filter(|s| s.new).map(|s| s.start).min();
    let (mut old, mut new) = (Tally::default(), Tally::default());
    let mut old_sum = summary(&args.old);
    let mut new_sum = summary(&args.new);
    for s in sides {
        // The last WINDOW of the old deploy, the first WINDOW of the new one.
        let in_old = s.old
            && args
                .window
                .is_none_or(|w| old_end.is_some_and(|e| s.end > e.saturating_sub(w)));
        let in_new = s.new
            && args
                .window
                .is_none_or(|w| new_start.is_some_and(|b| s.start < b.saturating_add(w)));
        for (on, t, sum) in [
            (in_old, &mut old, &mut old_sum),
            (in_new, &mut new, &mut new_sum),
        ] {
            if on {
                sum.windows += 1;
                sum.cpu_samples += s.cpu.total;
                t.merge(s.cpu.clone());
            }
        }
    }
    for sum in [&old_sum, &new_sum] {
        if sum.cpu_samples == 0 {
            return Err(Empty(format!(
                "no CPU samples for {} in the selected windows ({} window(s))",
                sum.selector, sum.windows
            ))
            .into());
        }
    }
    let grew: Vec<FrameChange> = diff::diff_tallies(&old, &new, args.threshold);
    if json {
        let out = serde_json::json!({
            "old": old_sum,
            "new": new_sum,
            "threshold": args.threshold,
            "regressions": grew,
        });
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(!grew.is_empty());
    }
    outln!(
        "old {}: {} window(s), {} CPU samples; new {}: {} window(s), {} CPU samples",
        old_sum.selector,
        old_sum.windows,
        old_sum.cpu_samples,
        new_sum.selector,
        new_sum.windows,
        new_sum.cpu_samples
    );
    for c in &grew {
        outln!(
            "REGRESSION {}: {:.1}% -> {:.1}%",
            Shown(&c.function),
            c.old_share * 100.0,
            c.new_share * 100.0
        );
    }
    if grew.is_empty() {
        outln!(
            "no frame's share of CPU grew by more than {:.1} points",
            args.threshold * 100.0
        );
    }
    Ok(!grew.is_empty())
}

fn summary(v: &VersionSelector) -> Summary {
    Summary {
        selector: format!("version={}", v.0),
        ..Summary::default()
    }
}
