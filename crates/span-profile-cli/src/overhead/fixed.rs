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
//! none run of the same round (paired ratios).

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
    pub(super) arms: Vec<FixedArmSummary>,
    pub(super) runs: Vec<FixedRun>,
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

/// Each arm's spreads, and its paired ratios against the none run of the same round.
pub(super) fn summarize(arms: &[Arm], runs: &[FixedRun]) -> Vec<FixedArmSummary> {
    let none = |run: usize| runs.iter().find(|r| r.arm == "none" && r.run == run);
    arms.iter()
        .map(|a| {
            let n = a.name();
            let mine: Vec<&FixedRun> = runs.iter().filter(|r| r.arm == n).collect();
            let col = |f: &dyn Fn(&FixedRun) -> Option<f64>| {
                Spread::of(&mine.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            let paired = |f: &dyn Fn(&FixedRun) -> Option<f64>| {
                if n == "none" {
                    return None;
                }
                let v: Vec<f64> = mine
                    .iter()
                    .filter_map(|r| match (f(r), none(r.run).and_then(f)) {
                        (Some(x), Some(b)) if b > 0.0 => Some(x / b),
                        _ => None,
                    })
                    .collect();
                Spread::of(&v)
            };
            FixedArmSummary {
                arm: n,
                runs: mine.len(),
                sent: mine.iter().map(|r| r.load.sent).sum(),
                completed: mine.iter().map(|r| r.load.completed).sum(),
                errors: mine.iter().map(|r| r.load.errors).sum(),
                retried: mine.iter().map(|r| r.load.retried).sum(),
                cpu_ms_per_req: col(&|r| r.cpu_ms_per_req),
                cpu_vs_none: paired(&|r| r.cpu_ms_per_req),
                p50_ms: col(&|r| r.load.p50_ms),
                p99_ms: col(&|r| r.load.p99_ms),
                p99_vs_none: paired(&|r| r.load.p99_ms),
                p999_ms: col(&|r| r.load.p999_ms),
                rss_steady_mb: col(&|r| r.rss_steady_mb),
                rss_peak_mb: col(&|r| r.rss_peak_mb),
                sample_hz: col(&|r| r.sample_hz),
            }
        })
        .collect()
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

    #[test]
    fn ratios_pair_each_run_with_the_none_run_of_its_round() {
        let runs = [
            run("none", 0, 2.0, 10.0),
            run("span-profile", 0, 2.2, 12.0),
            run("none", 1, 4.0, 20.0),
            run("span-profile", 1, 4.0, 20.0),
        ];
        let s = summarize(&[Arm::None, Arm::SpanProfile], &runs);
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
}
