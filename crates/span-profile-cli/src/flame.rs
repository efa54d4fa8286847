//! `span-profile flame`: an interactive SVG flame graph (inferno) of any selection.

use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use span_profile_export::store::query::{self, Tally};
use span_profile_export::store::Store;

use crate::select::{self, SelectorArgs};
use crate::{Empty, Usage};

/// Arguments of `flame`.
#[derive(Debug, clap::Args)]
pub(crate) struct FlameArgs {
    #[command(flatten)]
    pub(crate) select: SelectorArgs,
    /// Where to write the SVG (`-` for standard output).
    #[arg(short, long, value_name = "FILE")]
    pub(crate) output: PathBuf,
    /// The graph's title (default: the selection).
    #[arg(long)]
    pub(crate) title: Option<String>,
}

pub(crate) fn run(store: &Store, args: &FlameArgs, json: bool) -> anyhow::Result<()> {
    if json && args.output.as_os_str() == "-" {
        return Err(Usage(
            "--json and -o - both want standard output: write the SVG to a file (-o flame.svg) to get its JSON summary".into(),
        )
        .into());
    }
    let (filter, stacks) = select::query(store, &args.select, query::folded_stacks, Tally::merge)?;
    let what = match filter.span_id {
        Some(id) => format!("span {id}"),
        None => args.select.describe(&filter),
    };
    if stacks.total == 0 {
        return Err(Empty(format!("no samples for {what}")).into());
    }
    let lines: Vec<String> = stacks
        .sorted()
        .into_iter()
        .map(|(stack, n)| format!("{stack} {n}"))
        .collect();
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = args
        .title
        .clone()
        .unwrap_or_else(|| format!("{what}: {} samples", stacks.total));
    opts.count_name = "samples".into();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)
        .context("cannot render the flame graph")?;
    if args.output.as_os_str() == "-" {
        io::stdout().write_all(&svg).map_err(crate::Output)?;
    } else {
        fs::write(&args.output, &svg)
            .with_context(|| format!("cannot write {}", args.output.display()))?;
        if json {
            let out = serde_json::json!({
                "output": args.output,
                "selection": what,
                "samples": stacks.total,
                "stacks": lines.len(),
            });
            crate::json_out(store, &out)?;
        } else {
            outln!(
                "wrote {} ({what}: {} samples, {} stacks)",
                args.output.display(),
                stacks.total,
                lines.len()
            );
        }
    }
    Ok(())
}
