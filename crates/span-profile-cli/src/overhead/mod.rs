//! `span-profile overhead -- python app.py ARGS`: what the agent costs on the user's own
//! workload, measured by running it alternately without and with the agent (and with peer
//! profilers), N times each.
//!
//! Every arm runs the same command through a small Python runner given with `python -c`: it
//! starts the arm's profiler in-process (nothing for the baseline), runs the script with
//! `runpy` (`-m module` works too), and at exit prints one line on stderr,
//! `SPAN_PROFILE_OVERHEAD {json}`, with the process's CPU seconds and peak RSS
//! (`getrusage(RUSAGE_SELF)`), its wall time and, for this agent, the sampler's and exporter's
//! own CPU from `span_profile.stats()`. The runner was chosen over `sitecustomize` so that the
//! user's environment and `PYTHONPATH` are left alone. py-spy runs out of process around the
//! same runner; its CPU is read from `/proc/<pid>/stat` until it exits.
//!
//! Throughput comes from the workload's output when it prints a JSON line with `rps` or
//! `throughput` (`../shared/bench/workload.py` does), or a `throughput: N` line; otherwise
//! it is runs per second of wall time (1 / wall). When the workload reports `agent_cpu_pct`
//! (CPU of threads it did not start), that figure is used for in-process peers.
//!
//! The pieces: `runner.py` (the Python runner, embedded), [`measure`] (one run of one arm and
//! what it measured), [`sink`] (the local HTTP endpoint peers upload to) and [`report`]
//! (spreads, ratios, the budget verdict and its text).

mod measure;
mod report;
mod sink;

use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use crate::Usage;
use measure::{run_once, RunResult};
use report::{ratio, render, ArmSummary, Report, Spread};

/// A profiler compared against the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Arm {
    /// No profiler (always run).
    None,
    /// This agent (always run).
    SpanProfile,
    /// `py-spy record -r RATE --nonblocking -o /dev/null -- ...`
    PySpy,
    /// pyroscope-io, sending to a local sink.
    Pyroscope,
    /// ddtrace's profiler (`import ddtrace.profiling.auto`), uploading to a local sink.
    Ddtrace,
}

impl Arm {
    fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::SpanProfile => "span-profile",
            Self::PySpy => "py-spy",
            Self::Pyroscope => "pyroscope",
            Self::Ddtrace => "ddtrace",
        }
    }
}

/// Arguments of `span-profile overhead`.
#[derive(Debug, clap::Args)]
pub(crate) struct OverheadArgs {
    /// Runs of each arm, alternated (A B A B ...).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// The agent's CPU budget as a fraction of one core (passed as `overhead_budget`).
    #[arg(long, default_value_t = 0.01)]
    budget: f64,
    /// Samples per second, for this agent and the peers.
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// A peer profiler to run as an extra arm (repeatable): py-spy, pyroscope, ddtrace.
    #[arg(long = "arm", value_enum)]
    arms: Vec<Arm>,
    /// The py-spy executable (default: `py-spy` next to the Python interpreter, else on PATH).
    #[arg(long, value_name = "PATH")]
    py_spy: Option<PathBuf>,
    /// The workload: `python app.py ARGS` (or `python -m module ARGS`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Runs the comparison and prints it; exit code 0, or 1 when this agent went over budget.
pub(crate) fn run(args: &OverheadArgs, json: bool) -> Result<u8> {
    if args.runs == 0 {
        return Err(Usage("--runs must be at least 1".into()).into());
    }
    if !(args.budget > 0.0 && args.budget < 1.0) {
        return Err(Usage("--budget is a fraction of one core, between 0 and 1".into()).into());
    }
    let mut arms = vec![Arm::None, Arm::SpanProfile];
    for a in &args.arms {
        if !arms.contains(a) {
            arms.push(*a);
        }
    }
    let sink = sink::start()?;
    let mut runs = Vec::new();
    for i in 0..args.runs {
        for &arm in &arms {
            let r = run_once(args, arm, i, &sink)?;
            if !json {
                eprintln!(
                    "run {}/{} {:<12} wall {:.2}s throughput {:.2} cpu {:.2}s rss {:.1} MB{}",
                    i + 1,
                    args.runs,
                    r.arm,
                    r.wall_s,
                    r.throughput,
                    r.cpu_s,
                    r.peak_rss_mb,
                    r.agent_cpu_pct
                        .map_or(String::new(), |a| format!(" agent {a:.2}% of a core"))
                );
            }
            runs.push(r);
        }
    }
    let spread = |arm: &str, f: &dyn Fn(&RunResult) -> Option<f64>| {
        let v: Vec<f64> = runs.iter().filter(|r| r.arm == arm).filter_map(f).collect();
        Spread::of(&v)
    };
    let base_tp = spread("none", &|r| Some(r.throughput));
    let base_cpu = spread("none", &|r| Some(r.cpu_s));
    let base_rss = spread("none", &|r| Some(r.peak_rss_mb));
    let summaries: Vec<ArmSummary> = arms
        .iter()
        .map(|a| {
            let n = a.name();
            let tp = spread(n, &|r| Some(r.throughput));
            let cpu = spread(n, &|r| Some(r.cpu_s));
            let rss = spread(n, &|r| Some(r.peak_rss_mb));
            ArmSummary {
                arm: n,
                runs: runs.iter().filter(|r| r.arm == n).count(),
                throughput: tp,
                throughput_ratio: ratio(tp, base_tp),
                cpu_s: cpu,
                cpu_ratio: ratio(cpu, base_cpu),
                peak_rss_mb: rss,
                rss_ratio: ratio(rss, base_rss),
                agent_cpu_pct: spread(n, &|r| r.agent_cpu_pct),
            }
        })
        .collect();
    let agent = summaries
        .iter()
        .find(|s| s.arm == "span-profile")
        .and_then(|s| s.agent_cpu_pct);
    // The budget holds when the median agent CPU is within the budget plus 20 % (the
    // controller's tolerance: it acts on 250 ms periods).
    let budget_held = agent.map(|a| a.median <= args.budget * 100.0 * 1.2);
    let from_output = runs.iter().all(|r| r.throughput_from_output);
    let report = Report {
        command: args.command.clone(),
        budget: args.budget,
        rate: args.rate,
        throughput_unit: if from_output {
            "as printed by the workload"
        } else {
            "runs per second of wall time"
        },
        arms: summaries,
        runs,
        budget_held,
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", render(&report));
    }
    Ok(match budget_held {
        Some(false) => 1,
        _ => 0,
    })
}
