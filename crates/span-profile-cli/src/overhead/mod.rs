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
//! With `--rate-rps N --url URL` the command is a service instead, and each arm gets a fixed,
//! open-loop load from a generator in this process ([`loadgen`]); the report is CPU per request,
//! latency from scheduled arrival, RSS and the sample rate, each arm paired with the none run
//! of its round, and whether each arm is within `--cpu-target` / `--p99-target` decided from
//! those pairs ([`fixed`], ADR 0030).
//!
//! The pieces: `runner.py` (the Python runner, embedded), [`measure`] (one run of one arm and
//! what it measured), [`sink`] (the local HTTP endpoint peers upload to) and [`report`]
//! (spreads, ratios, the budget verdict and its text).

mod fixed;
mod loadgen;
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
    /// Fixed-load mode: COMMAND is a service; send it this many requests a second (open loop,
    /// paced by the clock) and report CPU per request, latency and RSS. Needs --url.
    #[arg(long, value_name = "N", requires = "url")]
    rate_rps: Option<f64>,
    /// Fixed-load mode: the URL each request GETs (`http://HOST:PORT/PATH`; `i=N` is added to
    /// its query). The service must listen there once started. Needs --rate-rps.
    #[arg(long, value_name = "URL", requires = "rate_rps")]
    url: Option<String>,
    /// Fixed-load mode: seconds of load measured in each run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Fixed-load mode: seconds of load sent before measuring (not counted).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Fixed-load mode: connections (and sender threads) of the load generator; an arrival that
    /// finds them all busy waits, and the wait counts in its latency.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Fixed-load mode: how arrivals are spaced.
    #[arg(long, value_enum, default_value_t = loadgen::Arrivals::Poisson)]
    arrivals: loadgen::Arrivals,
    /// Fixed-load mode: the most CPU per request an arm may add, in percent of none's. An arm is
    /// within it only when the whole 95% interval of its change is; the command exits 1 when
    /// span-profile's is wholly above.
    #[arg(long, value_name = "PCT", default_value_t = 2.0, requires = "rate_rps")]
    cpu_target: f64,
    /// Fixed-load mode: the most p99 latency an arm may add, in percent of none's (decided as
    /// --cpu-target is).
    #[arg(long, value_name = "PCT", default_value_t = 5.0, requires = "rate_rps")]
    p99_target: f64,
    /// The workload: `python app.py ARGS` (or `python -m module ARGS`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Runs the comparison and prints it; exit code 0, or 1 when this agent went over budget (in
/// the fixed-load mode: when its CPU or p99 change was decided above its target).
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
    if let (Some(rate_rps), Some(url)) = (args.rate_rps, &args.url) {
        return run_fixed(args, &arms, rate_rps, url, json);
    }
    let sink = sink::start()?;
    let mut runs = Vec::new();
    for i in 0..args.runs {
        for &arm in &arms {
            let r = run_once(args, arm, i, &sink)?;
            if !json {
                errln!(
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

/// The fixed-load mode (`--rate-rps N --url URL`): see [`fixed`].
fn run_fixed(
    args: &OverheadArgs,
    arms: &[Arm],
    rate_rps: f64,
    url: &str,
    json: bool,
) -> Result<u8> {
    if !(rate_rps.is_finite() && rate_rps > 0.0 && rate_rps <= 100_000.0) {
        return Err(
            Usage("--rate-rps is requests per second, above 0 (at most 100000)".into()).into(),
        );
    }
    if !(args.duration.is_finite() && args.duration > 0.0) {
        return Err(Usage("--duration is seconds of measured load, above 0".into()).into());
    }
    if !(args.warmup.is_finite() && args.warmup >= 0.0) {
        return Err(Usage("--warmup is seconds of load before measuring, 0 or more".into()).into());
    }
    if args.connections == 0 || args.connections > 4096 {
        return Err(Usage("--connections is between 1 and 4096".into()).into());
    }
    for (flag, v) in [
        ("--cpu-target", args.cpu_target),
        ("--p99-target", args.p99_target),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(Usage(format!(
                "{flag} is a percentage of none's figure, 0 or more (2 for +2%)"
            ))
            .into());
        }
    }
    let targets = fixed::Targets {
        cpu_pct: args.cpu_target,
        p99_pct: args.p99_target,
    };
    let load = fixed::Load {
        target: loadgen::Target::parse(url).map_err(Usage)?,
        url: url.to_string(),
        rate_rps,
        duration: std::time::Duration::from_secs_f64(args.duration),
        warmup: std::time::Duration::from_secs_f64(args.warmup),
        connections: args.connections,
        arrivals: args.arrivals,
    };
    let sink = sink::start()?;
    let mut runs = Vec::new();
    for i in 0..args.runs {
        for &arm in arms {
            let r = fixed::run_once(args, &load, arm, i, &sink)?;
            if !json {
                eprintln!(
                    "run {}/{} {:<12} {}/{} ok, CPU {:.3} ms/request, p99 {} ms",
                    i + 1,
                    args.runs,
                    r.arm,
                    r.load.completed,
                    r.load.sent,
                    r.cpu_ms_per_req.unwrap_or(f64::NAN),
                    r.load.p99_ms.map_or("n/a".into(), |v| format!("{v:.1}")),
                );
            }
            runs.push(r);
        }
    }
    let report = fixed::FixedReport {
        mode: "fixed-load",
        command: args.command.clone(),
        url: url.to_string(),
        rate_rps,
        arrivals: args.arrivals,
        duration_s: args.duration,
        warmup_s: args.warmup,
        rate: args.rate,
        budget: args.budget,
        targets,
        arms: fixed::summarize(arms, &runs, targets),
        runs,
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", fixed::render(&report));
    }
    Ok(u8::from(fixed::agent_above(&report)))
}
