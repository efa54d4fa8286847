//! `span-profile export`: a selection's samples written out for other tools: pprof (`go tool
//! pprof`, Pyroscope, anything that reads pprof), collapsed stacks (Brendan Gregg's
//! `root;…;leaf count` lines, for `flamegraph.pl` and inferno) or speedscope's JSON.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use span_profile_core::Profile;
use span_profile_export::store::query::{self, Filter};
use span_profile_export::store::{Selection, Store};

use crate::select::{self, SelectorArgs};
use crate::Empty;

/// The schema URL every speedscope file names.
const SPEEDSCOPE_SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

/// Arguments of `export`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    pub(crate) select: SelectorArgs,
    /// The file format.
    #[arg(long, value_enum, default_value_t = Format::Pprof)]
    pub(crate) format: Format,
    /// Where to write it (`-` for standard output).
    #[arg(short, long, value_name = "FILE")]
    pub(crate) output: PathBuf,
}

/// The formats `export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// gzip pprof, as the store keeps windows: every sample type, with the span labels.
    Pprof,
    /// One `root;…;leaf count` line per stack, counted in wall samples.
    Collapsed,
    /// speedscope's JSON: wall samples, and CPU samples as a second profile.
    Speedscope,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Pprof => "pprof",
            Format::Collapsed => "collapsed",
            Format::Speedscope => "speedscope",
        }
    }
}

pub(crate) fn run(store: &Store, args: &ExportArgs, json: bool) -> anyhow::Result<()> {
    let (filter, selection) = select::query(store, &args.select, Selection::of, Selection::merge)?;
    let what = match filter.span_id {
        Some(id) => format!("span {id}"),
        None => args.select.describe(&filter),
    };
    let (samples, windows) = (selection.samples(), selection.windows());
    let Some(profile) = selection.into_profile().filter(|_| samples > 0) else {
        return Err(Empty(format!("no samples for {what}; nothing was written")).into());
    };
    let bytes = match args.format {
        Format::Pprof => span_profile_export::encode_pprof(&profile),
        Format::Collapsed => collapsed(&profile).into_bytes(),
        Format::Speedscope => serde_json::to_vec(&speedscope(&profile, &what))?,
    };
    if args.output.as_os_str() == "-" {
        io::stdout()
            .lock()
            .write_all(&bytes)
            .map_err(crate::Output)?;
        return Ok(());
    }
    fs::write(&args.output, &bytes).with_context(|| {
        format!(
            "cannot write {}; check that its directory exists and is writable",
            args.output.display()
        )
    })?;
    if json {
        let out = serde_json::json!({
            "output": args.output,
            "format": args.format.name(),
            "selection": what,
            "samples": samples,
            "stacks": profile.stacks.len(),
            "windows": windows,
            "bytes": bytes.len(),
        });
        crate::json_out(store, &out)?;
    } else {
        outln!(
            "wrote {} ({}; {what}: {samples} samples, {} stacks, from {windows} window(s))",
            args.output.display(),
            args.format.name(),
            profile.stacks.len()
        );
    }
    Ok(())
}

/// Collapsed stacks, one line per stack, most samples first: the flame graph's input
/// ([`query::folded_stacks`]).
fn collapsed(p: &Profile) -> String {
    let folded = query::folded_stacks(std::slice::from_ref(p), &Filter::default());
    let mut out = String::new();
    for (stack, n) in folded.sorted() {
        out.push_str(stack);
        out.push(' ');
        out.push_str(&n.to_string());
        out.push('\n');
    }
    out
}

/// speedscope's file format (its `file-format-spec.ts`): the frames once, then a sampled
/// profile per weight, each sample a stack of frame indices, root first.
fn speedscope(p: &Profile, what: &str) -> serde_json::Value {
    let frames: Vec<serde_json::Value> = p
        .frames
        .iter()
        .map(|f| {
            let mut v = serde_json::json!({ "name": f.function });
            if !f.file.is_empty() {
                v["file"] = f.file.as_str().into();
            }
            if f.line > 0 {
                v["line"] = f.line.into();
            }
            v
        })
        .collect();
    // Samples of one stack with different spans or routes are one stack here.
    let mut by_stack: HashMap<u32, (u64, u64)> = HashMap::new();
    for s in &p.samples {
        let e = by_stack.entry(s.stack).or_default();
        e.0 += s.wall_samples;
        e.1 += s.cpu_samples;
    }
    let mut stacks: Vec<(u32, (u64, u64))> = by_stack.into_iter().collect();
    stacks.sort_unstable_by_key(|&(i, _)| i);
    let n_frames = p.frames.len() as u32;
    let profile = |name: &str, weight: fn(&(u64, u64)) -> u64| {
        let (mut samples, mut weights) = (Vec::new(), Vec::new());
        for (stack, w) in &stacks {
            let w = weight(w);
            if w == 0 {
                continue;
            }
            let frames: Vec<u32> = p
                .stacks
                .get(*stack as usize)
                .map(|st| {
                    st.frames
                        .iter()
                        .rev()
                        .copied()
                        .filter(|&f| f < n_frames)
                        .collect()
                })
                .unwrap_or_default();
            samples.push(frames);
            weights.push(w);
        }
        let total: u64 = weights.iter().sum();
        serde_json::json!({
            "type": "sampled",
            "name": name,
            "unit": "none",
            "startValue": 0,
            "endValue": total,
            "samples": samples,
            "weights": weights,
        })
    };
    let mut profiles = vec![profile(&format!("{what}: wall samples"), |w| w.0)];
    if stacks.iter().any(|(_, w)| w.1 > 0) {
        profiles.push(profile(&format!("{what}: CPU samples"), |w| w.1));
    }
    serde_json::json!({
        "$schema": SPEEDSCOPE_SCHEMA,
        "version": "0.0.1",
        "exporter": concat!("span-profile ", env!("CARGO_PKG_VERSION")),
        "name": what,
        "activeProfileIndex": 0,
        "shared": { "frames": frames },
        "profiles": profiles,
    })
}
