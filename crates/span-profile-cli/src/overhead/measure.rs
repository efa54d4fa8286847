//! One run of one arm: the command it runs (the runner, under py-spy for that arm), the
//! child's own CPU read from `/proc` while it runs, and what the runner and the workload
//! printed.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::{Arm, OverheadArgs};
use crate::Usage;

/// The Python runner every arm runs (see the module docs of `overhead`).
const RUNNER: &str = include_str!("runner.py");

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on Linux x86_64).
const USER_HZ: f64 = 100.0;

/// One run's measurements.
#[derive(Debug, Clone, Serialize)]
pub(super) struct RunResult {
    pub(super) arm: &'static str,
    pub(super) run: usize,
    pub(super) wall_s: f64,
    pub(super) throughput: f64,
    pub(super) throughput_from_output: bool,
    pub(super) cpu_s: f64,
    pub(super) peak_rss_mb: f64,
    pub(super) agent_cpu_pct: Option<f64>,
}

/// utime + stime of `pid` in seconds, and whether it has exited (a zombie not yet reaped).
pub(super) fn proc_cpu(pid: u32) -> Option<(f64, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = *f.first()?;
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some(((utime + stime) / USER_HZ, state == "Z"))
}

/// The throughput a workload printed: a JSON object line with `rps` or `throughput`, or a
/// `throughput: N` / `rps: N` line (the last one wins).
fn parse_throughput(stdout: &str) -> Option<(f64, Option<f64>)> {
    let mut found = None;
    for line in stdout.lines() {
        let t = line.trim();
        if t.starts_with('{') {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(t) {
                let tp = v
                    .get("rps")
                    .or_else(|| v.get("throughput"))
                    .and_then(serde_json::Value::as_f64);
                if let Some(tp) = tp {
                    found = Some((
                        tp,
                        v.get("agent_cpu_pct").and_then(serde_json::Value::as_f64),
                    ));
                }
            }
        } else if let Some((k, v)) = t.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            if k == "throughput" || k == "rps" {
                if let Some(n) = v.split_whitespace().next().and_then(|n| n.parse().ok()) {
                    found = Some((n, None));
                }
            }
        }
    }
    found
}

fn py_spy_path(args: &OverheadArgs, python: &str) -> PathBuf {
    if let Some(p) = &args.py_spy {
        return p.clone();
    }
    let beside = std::path::Path::new(python).with_file_name("py-spy");
    if beside.exists() {
        return beside;
    }
    PathBuf::from("py-spy")
}

/// The command of one arm: the runner (under py-spy for that arm) with the arm's settings in
/// its environment, stdin closed and stdout and stderr piped.
pub(super) fn arm_command(args: &OverheadArgs, arm: Arm, sink: &str) -> Result<Command> {
    let (python, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Usage("overhead needs a command: -- python app.py ARGS".into()))?;
    let mut cmd = if arm == Arm::PySpy {
        let mut c = Command::new(py_spy_path(args, python));
        c.args(["record", "-r", &args.rate.to_string(), "--nonblocking"]);
        c.args(["-o", "/dev/null", "--", python]);
        c
    } else {
        Command::new(python)
    };
    cmd.arg("-c").arg(RUNNER).args(rest);
    let runner_arm = match arm {
        Arm::PySpy => "none",
        a => a.name(),
    };
    cmd.env("SPAN_PROFILE_OVERHEAD_ARM", runner_arm)
        .env("SPAN_PROFILE_OVERHEAD_RATE", args.rate.to_string())
        .env("SPAN_PROFILE_OVERHEAD_BUDGET", args.budget.to_string())
        .env("SPAN_PROFILE_OVERHEAD_SINK", sink)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if arm == Arm::Ddtrace {
        cmd.env("DD_TRACE_AGENT_URL", sink)
            .env("DD_TRACE_ENABLED", "false")
            .env("DD_PROFILING_ENABLED", "true")
            .env("DD_INSTRUMENTATION_TELEMETRY_ENABLED", "false");
    }
    Ok(cmd)
}

pub(super) fn run_once(args: &OverheadArgs, arm: Arm, run: usize, sink: &str) -> Result<RunResult> {
    let mut cmd = arm_command(args, arm, sink)?;
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting the {} arm: {:?}", arm.name(), cmd.get_program()))?;
    let pid = child.id();
    let mut out_pipe = child.stdout.take().context("child stdout")?;
    let mut err_pipe = child.stderr.take().context("child stderr")?;
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    // Poll the child's own CPU (py-spy's, for that arm) until it has exited but is not yet
    // reaped: the last reading is its total.
    let mut own_cpu = None;
    while let Some((cpu, zombie)) = proc_cpu(pid) {
        own_cpu = Some(cpu);
        if zombie {
            break;
        }
        if child.try_wait()?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = child.wait()?;
    let wall = t0.elapsed().as_secs_f64();
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    if !status.success() {
        let tail: String = stderr
            .lines()
            .rev()
            .take(8)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        bail!("the {} arm failed ({status}):\n{tail}", arm.name());
    }
    let report: serde_json::Value = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("SPAN_PROFILE_OVERHEAD "))
        .and_then(|j| serde_json::from_str(j).ok())
        .with_context(|| {
            format!(
                "the {} arm printed no SPAN_PROFILE_OVERHEAD line",
                arm.name()
            )
        })?;
    let num = |k: &str| report.get(k).and_then(serde_json::Value::as_f64);
    let py_wall = num("wall_s").unwrap_or(wall);
    let parsed = parse_throughput(&stdout);
    let agent_cpu_pct = match arm {
        Arm::None => None,
        Arm::SpanProfile => num("agent_cpu_s").map(|c| 100.0 * c / py_wall.max(1e-9)),
        Arm::PySpy => own_cpu.map(|c| 100.0 * c / wall.max(1e-9)),
        Arm::Pyroscope | Arm::Ddtrace => parsed.and_then(|(_, a)| a),
    };
    Ok(RunResult {
        arm: arm.name(),
        run,
        wall_s: py_wall,
        throughput: parsed.map_or(1.0 / py_wall.max(1e-9), |(t, _)| t),
        throughput_from_output: parsed.is_some(),
        cpu_s: num("cpu_s").unwrap_or(f64::NAN),
        peak_rss_mb: num("maxrss_kb").map_or(f64::NAN, |k| k / 1024.0),
        agent_cpu_pct,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_lines() {
        assert_eq!(
            parse_throughput("x\n{\"rps\": 12.5, \"agent_cpu_pct\": 0.3}\n"),
            Some((12.5, Some(0.3)))
        );
        assert_eq!(parse_throughput("Throughput: 40 req/s"), Some((40.0, None)));
        assert_eq!(parse_throughput("nothing here"), None);
    }
}
