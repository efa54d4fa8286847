//! `span-profile overhead --rate-rps N --url URL -- python service.py`: the fixed-load mode.
//!
//! Each arm starts the user's service through the same runner as the closed-loop mode, waits
//! until the URL's port accepts connections, sends `--warmup` seconds of load, then measures
//! `--duration` seconds of open-loop load from the built-in generator ([`super::loadgen`], in
//! this process, so its CPU is not the service's). Per run it reads:
//!
//! - the service process's utime+stime over the measured load (`/proc/<pid>/stat`: all its
//!   threads, so the agent's threads, the span hooks and any interference count), plus
//!   py-spy's own for that arm, per completed request;
//! - latency from each request's scheduled arrival to the end of its response;
//! - the median `VmRSS` over the second half of the measured load (steady) and `VmHWM` (peak,
//!   or the highest `VmRSS` seen if that is higher);
//! - for this agent, its ticks per second over the service's whole run (the runner's
//!   `span_profile.stats()` at exit).
//!
//! Then it stops the service with SIGTERM (the runner turns that into a clean exit). Arms run
//! alternated (none A B ... none A B ...), and each arm's CPU and p99 are compared with the
//! none run of the same round (paired ratios). The table describes those ratios (median and
//! range); the decision below it says whether each arm is within a target: the ratios'
//! geometric mean with a 95% interval ([`Change`]), "within" only when all of the interval is
//! at or under the target, "above" when all of it is over ([`Verdict`], ADR 0030).

use std::io::Read;
use std::net::TcpStream;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::loadgen::{self, Arrivals, LoadResult, Target};
use super::measure::{arm_command, proc_cpu};
use super::report::Spread;
use super::{Arm, OverheadArgs};
use span_profile_export::store::stats::t_critical;

/// One run of one arm at the fixed load.
#[derive(Debug, Clone, Serialize)]
pub(super) struct FixedRun {
    pub(super) arm: &'static str,
    pub(super) run: usize,
    #[serde(flatten)]
    pub(super) load: LoadResult,
    /// The service's CPU seconds over the measured load (py-spy's added for that arm).
    pub(super) cpu_s: f64,
    /// `cpu_s` per completed request, in ms.
    pub(super) cpu_ms_per_req: Option<f64>,
    pub(super) rss_steady_mb: Option<f64>,
    pub(super) rss_peak_mb: Option<f64>,
    /// This agent's ticks per second over the service's whole run.
    pub(super) sample_hz: Option<f64>,
}

/// One arm's figures over its runs.
#[derive(Debug, Serialize)]
pub(super) struct FixedArmSummary {
    pub(super) arm: &'static str,
    pub(super) runs: usize,
    pub(super) sent: u64,
    pub(super) completed: u64,
    pub(super) errors: u64,
    /// Requests sent again on a new connection: the service had closed the kept-alive one.
    pub(super) retried: u64,
    pub(super) cpu_ms_per_req: Option<Spread>,
    /// Per round, this arm's CPU per request over the none run's: median [min–max].
    pub(super) cpu_vs_none: Option<Spread>,
    pub(super) p50_ms: Option<Spread>,
    pub(super) p99_ms: Option<Spread>,
    /// Per round, this arm's p99 over the none run's.
    pub(super) p99_vs_none: Option<Spread>,
    /// The change in CPU per request, decided from the paired ratios (not for none).
    pub(super) cpu_change: Option<Change>,
    /// Whether that change is within `--cpu-target` (not for none).
    pub(super) cpu_verdict: Option<Verdict>,
    /// The change in p99, decided from the paired ratios (not for none).
    pub(super) p99_change: Option<Change>,
    /// Whether that change is within `--p99-target` (not for none).
    pub(super) p99_verdict: Option<Verdict>,
    pub(super) p999_ms: Option<Spread>,
    pub(super) rss_steady_mb: Option<Spread>,
    pub(super) rss_peak_mb: Option<Spread>,
    pub(super) sample_hz: Option<Spread>,
}

/// The fixed-load report (`--json`).
#[derive(Debug, Serialize)]
pub(super) struct FixedReport {
    pub(super) mode: &'static str,
    pub(super) command: Vec<String>,
    pub(super) url: String,
    pub(super) rate_rps: f64,
    pub(super) arrivals: Arrivals,
    pub(super) duration_s: f64,
    pub(super) warmup_s: f64,
    pub(super) rate: u32,
    pub(super) budget: f64,
    pub(super) targets: Targets,
    pub(super) arms: Vec<FixedArmSummary>,
    pub(super) runs: Vec<FixedRun>,
}

/// The changes an arm may add and still be within target, in percent of none's.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Targets {
    pub(super) cpu_pct: f64,
    pub(super) p99_pct: f64,
}

/// A change estimated from one arm's paired ratios (one a round): their geometric mean and its
/// 95% interval, Student's t on the logs, as fractions of the baseline (0.02 is +2%). The
/// interval is wide at a few rounds, where a bootstrap would be too narrow to be honest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(super) struct Change {
    pub(super) geo_mean: f64,
    pub(super) low: f64,
    pub(super) high: f64,
    pub(super) rounds: usize,
}

/// Fewest rounds a [`Change`] is estimated from: two give an interval too wide to decide.
pub(super) const MIN_ROUNDS: usize = 3;

impl Change {
    /// From the paired ratios; `None` with fewer than [`MIN_ROUNDS`] usable (positive, finite).
    pub(super) fn of(ratios: &[f64]) -> Option<Self> {
        let logs: Vec<f64> = ratios
            .iter()
            .filter(|r| r.is_finite() && **r > 0.0)
            .map(|r| r.ln())
            .collect();
        let n = logs.len();
        if n < MIN_ROUNDS {
            return None;
        }
        let mean = logs.iter().sum::<f64>() / n as f64;
        let var = logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let half = t_critical(0.05, (n - 1) as f64) * (var / n as f64).sqrt();
        Some(Self {
            geo_mean: mean.exp_m1(),
            low: (mean - half).exp_m1(),
            high: (mean + half).exp_m1(),
            rounds: n,
        })
    }

    /// Within `target_pct` only when the whole interval is; above when all of it is over.
    pub(super) fn verdict(change: Option<Self>, target_pct: f64) -> Verdict {
        let target = target_pct / 100.0;
        match change {
            None => Verdict::TooFewRounds,
            Some(c) if c.high <= target => Verdict::Within,
            Some(c) if c.low > target => Verdict::Above,
            Some(_) => Verdict::NotDecided,
        }
    }
}

/// Whether an arm's [`Change`] is within its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Verdict {
    /// The whole interval is at or under the target.
    Within,
    /// The whole interval is over it.
    Above,
    /// The interval straddles it: more rounds (`--runs`) may decide.
    NotDecided,
    /// Fewer than [`MIN_ROUNDS`] paired rounds.
    TooFewRounds,
}

/// The settings of the fixed-load mode, checked.
#[derive(Debug)]
pub(super) struct Load {
    pub(super) target: Target,
    pub(super) url: String,
    pub(super) rate_rps: f64,
    pub(super) duration: Duration,
    pub(super) warmup: Duration,
    pub(super) connections: usize,
    pub(super) arrivals: Arrivals,
}

fn status_mb(pid: u32, key: &str) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// The first child of `pid` (the service py-spy started), from `/proc/<pid>/task/*/children`.
fn child_of(pid: u32) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for t in tasks.flatten() {
        if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
            if let Some(first) = c.split_whitespace().next().and_then(|p| p.parse().ok()) {
                return Some(first);
            }
        }
    }
    None
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Stops the service (SIGTERM to `pid`, the runner's clean exit), then its wrapper `child`.
fn stop(child: &mut Child, pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs one arm at the fixed load.
pub(super) fn run_once(
    args: &OverheadArgs,
    load: &Load,
    arm: Arm,
    run: usize,
    sink: &str,
) -> Result<FixedRun> {
    let mut cmd = arm_command(args, arm, sink)?;
    cmd.env("SPAN_PROFILE_OVERHEAD_SIGTERM", "1");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting the {} arm: {:?}", arm.name(), cmd.get_program()))?;
    let mut out_pipe = child.stdout.take().context("child stdout")?;
    let mut err_pipe = child.stderr.take().context("child stderr")?;
    let out_reader = std::thread::spawn(move || {
        // The service's own output is not read; drained so that it never blocks on a pipe.
        let _ = std::io::copy(&mut out_pipe, &mut std::io::sink());
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let result = measure(&mut child, load, arm, run);
    // py-spy exits when the service it runs does: stopping the service stops both.
    let pid = match &result {
        Ok((_, pid)) => *pid,
        Err(_) if arm == Arm::PySpy => child_of(child.id()).unwrap_or(child.id()),
        Err(_) => child.id(),
    };
    stop(&mut child, pid);
    let _ = out_reader.join();
    let stderr = err_reader.join().unwrap_or_default();
    let (mut r, _) = match result {
        Ok(r) => r,
        Err(e) => bail!("{e:#}\nthe service's last output:\n{}", tail(&stderr, 8)),
    };
    let report: Option<serde_json::Value> = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("SPAN_PROFILE_OVERHEAD "))
        .and_then(|j| serde_json::from_str(j).ok());
    if arm == Arm::SpanProfile {
        let num = |k: &str| {
            report
                .as_ref()
                .and_then(|v| v.get(k))
                .and_then(serde_json::Value::as_f64)
        };
        if let (Some(ticks), Some(wall)) = (num("ticks"), num("wall_s")) {
            r.sample_hz = (wall > 0.0).then(|| ticks / wall);
        }
    }
    Ok(r)
}

/// Waits for the service, loads it and reads its costs; returns the run and the service's pid.
fn measure(child: &mut Child, load: &Load, arm: Arm, run: usize) -> Result<(FixedRun, u32)> {
    let wrapper = child.id();
    let t0 = Instant::now();
    let ready_within = Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!(
                "the {} arm's service exited ({status}) before {} accepted connections",
                arm.name(),
                load.url
            );
        }
        if TcpStream::connect(&load.target.authority).is_ok() {
            break;
        }
        if t0.elapsed() > ready_within {
            bail!(
                "the {} arm's service did not accept connections on {} within {} s: \
                 check that --url names the port the service listens on",
                arm.name(),
                load.target.authority,
                ready_within.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = if arm == Arm::PySpy {
        child_of(wrapper).context("py-spy's child process (the service) is not in /proc")?
    } else {
        wrapper
    };
    let seed = run as u64 + 1;
    let rate = load.rate_rps;
    let conns = load.connections;
    loadgen::run(
        &load.target,
        rate,
        load.warmup,
        load.arrivals,
        conns,
        0,
        seed + 1000,
    );
    let cpu = |p: u32| proc_cpu(p).map_or(0.0, |(c, _)| c);
    let extra = |p: u32| if arm == Arm::PySpy { cpu(p) } else { 0.0 };
    let c0 = cpu(pid) + extra(wrapper);
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut rss = Vec::new();
            // Relaxed: a plain stop flag, no data is published through it.
            while !stop.load(Ordering::Relaxed) {
                if let Some(v) = status_mb(pid, "VmRSS:") {
                    rss.push(v);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            rss
        })
    };
    let res = loadgen::run(
        &load.target,
        rate,
        load.duration,
        load.arrivals,
        conns,
        1_000_000,
        seed,
    );
    let c1 = cpu(pid) + extra(wrapper);
    stop.store(true, Ordering::Relaxed);
    let rss = poller.join().unwrap_or_default();
    // VmHWM can trail a VmRSS reading by the kernel's per-thread counter caches: the peak is
    // the higher of the two.
    let seen = rss.iter().copied().fold(f64::NAN, f64::max);
    let peak = status_mb(pid, "VmHWM:")
        .map(|h| h.max(seen))
        .or(Spread::of(&rss).map(|s| s.max));
    let cpu_s = c1 - c0;
    let r = FixedRun {
        arm: arm.name(),
        run,
        cpu_ms_per_req: (res.completed > 0).then(|| 1000.0 * cpu_s / res.completed as f64),
        load: res,
        cpu_s,
        rss_steady_mb: Spread::of(&rss[rss.len() / 2..]).map(|s| s.median),
        rss_peak_mb: peak,
        sample_hz: None,
    };
    Ok((r, pid))
}

/// Each arm's spreads, its paired ratios against the none run of the same round, and the
/// changes decided from them against `targets`.
pub(super) fn summarize(arms: &[Arm], runs: &[FixedRun], targets: Targets) -> Vec<FixedArmSummary> {
    let none = |run: usize| runs.iter().find(|r| r.arm == "none" && r.run == run);
    arms.iter()
        .map(|a| {
            let n = a.name();
            let mine: Vec<&FixedRun> = runs.iter().filter(|r| r.arm == n).collect();
            let col = |f: &dyn Fn(&FixedRun) -> Option<f64>| {
                Spread::of(&mine.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            let ratios = |f: &dyn Fn(&FixedRun) -> Option<f64>| -> Option<Vec<f64>> {
                (n != "none").then(|| {
                    mine.iter()
                        .filter_map(|r| match (f(r), none(r.run).and_then(f)) {
                            (Some(x), Some(b)) if b > 0.0 => Some(x / b),
                            _ => None,
                        })
                        .collect()
                })
            };
            let cpu = ratios(&|r| r.cpu_ms_per_req);
            let p99 = ratios(&|r| r.load.p99_ms);
            let cpu_change = cpu.as_deref().and_then(Change::of);
            let p99_change = p99.as_deref().and_then(Change::of);
            FixedArmSummary {
                arm: n,
                runs: mine.len(),
                sent: mine.iter().map(|r| r.load.sent).sum(),
                completed: mine.iter().map(|r| r.load.completed).sum(),
                errors: mine.iter().map(|r| r.load.errors).sum(),
                retried: mine.iter().map(|r| r.load.retried).sum(),
                cpu_ms_per_req: col(&|r| r.cpu_ms_per_req),
                cpu_vs_none: cpu.as_deref().and_then(Spread::of),
                p50_ms: col(&|r| r.load.p50_ms),
                p99_ms: col(&|r| r.load.p99_ms),
                p99_vs_none: p99.as_deref().and_then(Spread::of),
                cpu_change,
                cpu_verdict: cpu
                    .is_some()
                    .then(|| Change::verdict(cpu_change, targets.cpu_pct)),
                p99_change,
                p99_verdict: p99
                    .is_some()
                    .then(|| Change::verdict(p99_change, targets.p99_pct)),
                p999_ms: col(&|r| r.load.p999_ms),
                rss_steady_mb: col(&|r| r.rss_steady_mb),
                rss_peak_mb: col(&|r| r.rss_peak_mb),
                sample_hz: col(&|r| r.sample_hz),
            }
        })
        .collect()
}

/// Whether this agent's CPU or p99 was decided above its target (the command's exit status).
pub(super) fn agent_above(r: &FixedReport) -> bool {
    r.arms.iter().any(|a| {
        a.arm == Arm::SpanProfile.name()
            && (a.cpu_verdict == Some(Verdict::Above) || a.p99_verdict == Some(Verdict::Above))
    })
}

fn cell(s: Option<Spread>, prec: usize) -> String {
    s.map_or("n/a".into(), |s| {
        format!("{:.p$} [{:.p$}–{:.p$}]", s.median, s.min, s.max, p = prec)
    })
}

fn change(s: Option<Spread>) -> String {
    s.map_or(String::new(), |s| {
        format!(
            "{:+.1}% [{:+.1}–{:+.1}]",
            100.0 * (s.median - 1.0),
            100.0 * (s.min - 1.0),
            100.0 * (s.max - 1.0)
        )
    })
}

/// One decided change: `+3.1% [+2.0..+4.2]: above +2%`.
fn decision(c: Option<Change>, v: Option<Verdict>, target_pct: f64) -> String {
    let pct = |x: f64| format!("{:+.1}", 100.0 * x);
    let what = match v {
        Some(Verdict::Within) => format!("within +{target_pct}%"),
        Some(Verdict::Above) => format!("above +{target_pct}%"),
        Some(Verdict::NotDecided) => format!("not decided against +{target_pct}%"),
        Some(Verdict::TooFewRounds) | None => {
            return format!("too few rounds ({MIN_ROUNDS} needed: --runs)")
        }
    };
    match c {
        Some(c) => format!(
            "{}% [{}..{}]: {what}",
            pct(c.geo_mean),
            pct(c.low),
            pct(c.high)
        ),
        None => what,
    }
}

/// The text table of the fixed-load report.
pub(super) fn render(r: &FixedReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "overhead at a fixed load: {} requests/s ({:?} arrivals) to {}, {} s measured after {} s of warm-up; \
         medians [min–max] of {} alternating runs per arm; \"vs none\" pairs each run with the none run of its round",
        r.rate_rps,
        r.arrivals,
        r.url,
        r.duration_s,
        r.warmup_s,
        r.arms.first().map_or(0, |a| a.runs)
    );
    let _ = writeln!(
        s,
        "{:<13} {:>13} {:>24} {:>24} {:>20} {:>22} {:>22} {:>20} {:>8} {:>8} {:>9}",
        "arm",
        "ok/sent",
        "CPU ms/request",
        "CPU vs none",
        "p50 ms",
        "p99 ms",
        "p99 vs none",
        "p99.9 ms",
        "RSS MB",
        "peak MB",
        "sample Hz"
    );
    for a in &r.arms {
        let _ = writeln!(
            s,
            "{:<13} {:>13} {:>24} {:>24} {:>20} {:>22} {:>22} {:>20} {:>8} {:>8} {:>9}",
            a.arm,
            format!("{}/{}", a.completed, a.sent),
            cell(a.cpu_ms_per_req, 3),
            change(a.cpu_vs_none),
            cell(a.p50_ms, 1),
            cell(a.p99_ms, 1),
            change(a.p99_vs_none),
            cell(a.p999_ms, 1),
            a.rss_steady_mb
                .map_or("n/a".into(), |v| format!("{:.1}", v.median)),
            a.rss_peak_mb
                .map_or("n/a".into(), |v| format!("{:.1}", v.median)),
            a.sample_hz
                .map_or("n/a".into(), |v| format!("{:.0}", v.median)),
        );
    }
    let _ = writeln!(
        s,
        "\ndecided: each arm's paired ratios as a geometric mean [95% interval, Student's t on the logs]; \
         within a target only when the whole interval is"
    );
    for a in r.arms.iter().filter(|a| a.cpu_verdict.is_some()) {
        let _ = writeln!(
            s,
            "{:<13} CPU/request {}   p99 {}",
            a.arm,
            decision(a.cpu_change, a.cpu_verdict, r.targets.cpu_pct),
            decision(a.p99_change, a.p99_verdict, r.targets.p99_pct),
        );
    }
    if r.arms.iter().any(|a| {
        a.cpu_verdict == Some(Verdict::NotDecided) || a.p99_verdict == Some(Verdict::NotDecided)
    }) {
        let _ = writeln!(
            s,
            "not decided: the interval straddles the target; more rounds (--runs) narrow it"
        );
    }
    let errors: u64 = r.arms.iter().map(|a| a.errors).sum();
    if errors > 0 {
        let _ = writeln!(
            s,
            "{errors} requests got no 2xx response: check the URL, or lower --rate-rps if the service is overloaded"
        );
    }
    let retried: u64 = r.arms.iter().map(|a| a.retried).sum();
    if retried > 0 {
        let _ = writeln!(
            s,
            "{retried} requests were sent again on a new connection: the service closed kept-alive connections under them (counted once each)"
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(arm: &'static str, run: usize, cpu: f64, p99: f64) -> FixedRun {
        FixedRun {
            arm,
            run,
            load: LoadResult {
                sent: 10,
                completed: 10,
                p99_ms: Some(p99),
                ..LoadResult::default()
            },
            cpu_s: cpu / 100.0,
            cpu_ms_per_req: Some(cpu),
            rss_steady_mb: None,
            rss_peak_mb: None,
            sample_hz: None,
        }
    }

    const TARGETS: Targets = Targets {
        cpu_pct: 2.0,
        p99_pct: 5.0,
    };

    #[test]
    fn ratios_pair_each_run_with_the_none_run_of_its_round() {
        let runs = [
            run("none", 0, 2.0, 10.0),
            run("span-profile", 0, 2.2, 12.0),
            run("none", 1, 4.0, 20.0),
            run("span-profile", 1, 4.0, 20.0),
        ];
        let s = summarize(&[Arm::None, Arm::SpanProfile], &runs, TARGETS);
        assert!(s[0].cpu_vs_none.is_none());
        let c = s[1].cpu_vs_none.unwrap();
        // Round 0: 2.2 / 2.0; round 1: 4.0 / 4.0. Unpaired medians would give 3.1 / 3.0.
        assert!(
            (c.min - 1.0).abs() < 1e-9 && (c.max - 1.1).abs() < 1e-9,
            "{c:?}"
        );
        let p = s[1].p99_vs_none.unwrap();
        assert!(
            (p.max - 1.2).abs() < 1e-9 && (p.median - 1.1).abs() < 1e-9,
            "{p:?}"
        );
        assert_eq!((s[1].sent, s[1].completed, s[1].runs), (20, 20, 2));
    }

    #[test]
    fn a_change_is_the_geometric_mean_of_the_ratios_with_a_t_interval() {
        // Logs of 1.02, 1.04, 1.06: mean 0.039097, sd 0.019234; t(0.975, 2) = 4.3027, so the
        // half-width is 4.3027 × 0.019234 / √3 = 0.047780 (worked by hand): +4.0% [−0.9..+9.1].
        let c = Change::of(&[1.02, 1.04, 1.06]).unwrap();
        assert!((c.geo_mean - 0.039871).abs() < 1e-5, "{c:?}");
        assert!((c.low - -0.008645).abs() < 1e-5, "{c:?}");
        assert!((c.high - 0.090763).abs() < 1e-5, "{c:?}");
        assert_eq!(c.rounds, 3);
        // Two rounds, or ratios that are not ratios, decide nothing.
        assert_eq!(Change::of(&[1.1, 1.1]), None);
        assert_eq!(Change::of(&[1.1, 1.1, 0.0, f64::NAN]), None);
    }

    #[test]
    fn a_target_holds_only_when_the_whole_interval_is_within_it() {
        let steady = |r: f64| Change::of(&[r; 5]);
        assert_eq!(Change::verdict(steady(1.01), 2.0), Verdict::Within);
        assert_eq!(Change::verdict(steady(1.10), 5.0), Verdict::Above);
        // A median of +1% whose rounds straddle +2%.
        let mixed = Change::of(&[0.99, 1.01, 1.04, 1.00, 1.03]);
        assert_eq!(Change::verdict(mixed, 2.0), Verdict::NotDecided);
        assert_eq!(Change::verdict(None, 2.0), Verdict::TooFewRounds);
    }

    #[test]
    fn the_agent_decided_above_its_target_fails_the_command() {
        let runs: Vec<FixedRun> = (0..4)
            .flat_map(|i| [run("none", i, 2.0, 10.0), run("span-profile", i, 2.2, 10.0)])
            .collect();
        let arms = summarize(&[Arm::None, Arm::SpanProfile], &runs, TARGETS);
        assert_eq!(
            arms[0].cpu_verdict, None,
            "none is not compared with itself"
        );
        assert_eq!(arms[1].cpu_verdict, Some(Verdict::Above));
        assert_eq!(arms[1].p99_verdict, Some(Verdict::Within));
        let mut report = FixedReport {
            mode: "fixed-load",
            command: vec![],
            url: String::new(),
            rate_rps: 1.0,
            arrivals: Arrivals::Fixed,
            duration_s: 1.0,
            warmup_s: 0.0,
            rate: 100,
            budget: 0.01,
            targets: TARGETS,
            arms,
            runs,
        };
        assert!(agent_above(&report));
        let text = render(&report);
        assert!(
            text.contains("span-profile  CPU/request +10.0% [+10.0..+10.0]: above +2%"),
            "{text}"
        );
        report.targets.cpu_pct = 20.0;
        report.arms = summarize(&[Arm::None, Arm::SpanProfile], &report.runs, report.targets);
        assert!(!agent_above(&report));
    }
}
