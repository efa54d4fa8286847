//! `span-profile routes --frame F`: the reverse query, which routes produce a frame's CPU.

use crate::text::Shown;
use serde::Serialize;
use span_profile_export::store::frames::display_name;
use span_profile_export::store::query::{self, Report, RouteShare, Tally};
use span_profile_export::store::summary::WindowSummary;
use span_profile_export::store::Store;

use crate::select::WindowArgs;
use crate::{Empty, Usage};

/// Arguments of `routes`.
#[derive(Debug, clap::Args)]
pub(crate) struct RoutesArgs {
    /// The frame: `module:function` as `top` shows it (e.g. dateutil.parser._parser:_parse),
    /// `path/file.py:function`, or a bare function name when only one file defines it (if
    /// several do, they are listed and nothing is counted).
    #[arg(long)]
    pub(crate) frame: String,
    #[command(flatten)]
    pub(crate) windows: WindowArgs,
}

pub(crate) fn run(store: &Store, args: &RoutesArgs, json: bool) -> anyhow::Result<()> {
    let filter = args.windows.filter();
    let frame = args.frame.as_str();
    // Which frames the name names: one, or the candidates to choose from.
    let frames = store.stream_summarized(
        &filter,
        false,
        query::report,
        WindowSummary::report,
        Report::merge,
    )?;
    let named = query::frames_named(&frames, frame);
    if named.len() > 1 {
        let mut list = String::new();
        for f in &named {
            list.push_str(&format!(
                "\n  {}  ({}, {} samples on the stack)",
                Shown(&display_name(&f.function, &f.file)),
                Shown(&f.file),
                f.total_samples
            ));
        }
        return Err(Usage(format!(
            "{} names {} frames; give one as module:function or path/file.py:function:{list}",
            Shown(frame),
            named.len(),
        ))
        .into());
    }
    let shown = named
        .first()
        .map_or_else(|| frame.to_string(), |f| display_name(&f.function, &f.file));
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
            "{} is on none of the {} CPU samples of the selected windows",
            Shown(frame),
            tally.total
        ))
        .into());
    }
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            frame: &'a str,
            function: Option<&'a str>,
            file: Option<&'a str>,
            share_of_cpu: f64,
            cpu_samples: u64,
            routes: &'a [RouteShare],
        }
        let out = Out {
            frame: &shown,
            function: named.first().map(|f| f.function.as_str()),
            file: named.first().map(|f| f.file.as_str()),
            share_of_cpu: share,
            cpu_samples: tally.total,
            routes: &routes,
        };
        crate::json_out(store, &out)?;
        return Ok(());
    }
    outln!(
        "{} costs {:.1}% of CPU; {:.0}% of that comes from {}",
        Shown(&shown),
        share * 100.0,
        routes[0].share_of_frame * 100.0,
        Shown(&routes[0].route)
    );
    outln!(
        "{:>14}  {:>12}  {:>11}  route",
        "share of frame",
        "share of CPU",
        "CPU samples"
    );
    for r in &routes {
        outln!(
            "{:>13.1}%  {:>11.1}%  {:>11}  {}",
            r.share_of_frame * 100.0,
            r.share_of_total * 100.0,
            r.cpu_samples,
            Shown(&r.route)
        );
    }
    Ok(())
}
