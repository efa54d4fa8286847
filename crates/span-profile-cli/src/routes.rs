//! `span-profile routes --frame F`: the reverse query, which routes produce a frame's CPU.

use crate::text::Shown;
use serde::Serialize;
use span_profile_export::store::query::{self, RouteShare, Tally};
use span_profile_export::store::summary::WindowSummary;
use span_profile_export::store::Store;

use crate::select::WindowArgs;
use crate::Empty;

/// Arguments of `routes`.
#[derive(Debug, clap::Args)]
pub(crate) struct RoutesArgs {
    /// The function name, as the profiles show it (e.g. parse_date or Pricing.calculate).
    #[arg(long)]
    pub(crate) frame: String,
    #[command(flatten)]
    pub(crate) windows: WindowArgs,
}

pub(crate) fn run(store: &Store, args: &RoutesArgs, json: bool) -> anyhow::Result<()> {
    let filter = args.windows.filter();
    let frame = args.frame.as_str();
    let tally = store.stream_summarized(
        &filter,
        true,
        |p, f| query::frame_cpu_by_route(p, f, frame),
        |s: &WindowSummary, f| s.frame_cpu_by_route(f, frame),
        Tally::merge,
    )?;
    if tally.total == 0 {
        return Err(Empty("no CPU samples in the selected windows".into()).into());
    }
    let (share, routes) = query::route_shares(&tally);
    if routes.is_empty() {
        return Err(Empty(format!(
            "{frame} is on none of the {} CPU samples of the selected windows",
            tally.total
        ))
        .into());
    }
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            frame: &'a str,
            share_of_cpu: f64,
            cpu_samples: u64,
            routes: &'a [RouteShare],
        }
        let out = Out {
            frame,
            share_of_cpu: share,
            cpu_samples: tally.total,
            routes: &routes,
        };
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    outln!(
        "{} costs {:.1}% of CPU; {:.0}% of that comes from {}",
        Shown(frame),
        share * 100.0,
        routes[0].share_of_frame * 100.0,
        Shown(&routes[0].route)
    );
    outln!(
        "{:>10}  {:>8}  {:>11}  route",
        "of frame",
        "of CPU",
        "CPU samples"
    );
    for r in &routes {
        outln!(
            "{:>9.1}%  {:>7.1}%  {:>11}  {}",
            r.share_of_frame * 100.0,
            r.share_of_total * 100.0,
            r.cpu_samples,
            Shown(&r.route)
        );
    }
    Ok(())
}
