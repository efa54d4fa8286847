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

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::Usage;

/// The Python runner every arm runs (see the module docs).
const RUNNER: &str = r#"
import atexit, json, os, resource, runpy, sys, tempfile, time
arm = os.environ.get("SPAN_PROFILE_OVERHEAD_ARM", "none")
rate = float(os.environ.get("SPAN_PROFILE_OVERHEAD_RATE", "100"))
t0 = time.perf_counter()
agent = None
if arm == "span-profile":
    import span_profile
    out = os.environ.get("SPAN_PROFILE_OVERHEAD_OUTPUT") or tempfile.mkdtemp(prefix="span-profile-overhead-")
    agent = span_profile.start(output=out, sample_rate_hz=rate,
                               overhead_budget=float(os.environ.get("SPAN_PROFILE_OVERHEAD_BUDGET", "0.01")))
elif arm == "pyroscope":
    import pyroscope
    pyroscope.configure(application_name="overhead", server_address=os.environ["SPAN_PROFILE_OVERHEAD_SINK"],
                        sample_rate=int(rate))
elif arm == "ddtrace":
    import ddtrace.profiling.auto

def _report():
    d = {"wall_s": time.perf_counter() - t0}
    if agent is not None:
        try:
            agent.stop()
        except Exception:
            pass
        import span_profile
        s = span_profile.stats()
        d["agent_cpu_s"] = (s.get("sampler_cpu_ns", 0) + s.get("exporter_cpu_ns", 0)) / 1e9
        d["ticks"] = s.get("ticks", 0)
    r = resource.getrusage(resource.RUSAGE_SELF)
    d["cpu_s"] = r.ru_utime + r.ru_stime
    d["maxrss_kb"] = r.ru_maxrss
    sys.stderr.write("SPAN_PROFILE_OVERHEAD " + json.dumps(d) + "\n")
    sys.stderr.flush()

atexit.register(_report)
sys.argv = sys.argv[1:]
if sys.argv and sys.argv[0] == "-m":
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    runpy.run_path(sys.argv[0], run_name="__main__")
"#;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on Linux x86_64).
const USER_HZ: f64 = 100.0;

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

/// One run's measurements.
#[derive(Debug, Clone, Serialize)]
struct RunResult {
    arm: &'static str,
    run: usize,
    wall_s: f64,
    throughput: f64,
    throughput_from_output: bool,
    cpu_s: f64,
    peak_rss_mb: f64,
    agent_cpu_pct: Option<f64>,
}

/// Median, min and max of one measure of one arm.
#[derive(Debug, Clone, Copy, Serialize)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Option<Self> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

#[derive(Debug, Serialize)]
struct ArmSummary {
    arm: &'static str,
    runs: usize,
    throughput: Option<Spread>,
    throughput_ratio: Option<f64>,
    cpu_s: Option<Spread>,
    cpu_ratio: Option<f64>,
    peak_rss_mb: Option<Spread>,
    rss_ratio: Option<f64>,
    agent_cpu_pct: Option<Spread>,
}

#[derive(Debug, Serialize)]
struct Report {
    command: Vec<String>,
    budget: f64,
    rate: u32,
    throughput_unit: &'static str,
    arms: Vec<ArmSummary>,
    runs: Vec<RunResult>,
    budget_held: Option<bool>,
}

/// Answers 200 to every HTTP request: the endpoint peers upload to.
fn start_sink() -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding the local sink")?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name("overhead-sink".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = std::thread::Builder::new()
                    .name("overhead-sink-conn".into())
                    .spawn(move || serve(stream));
            }
        })?;
    Ok(format!("http://{addr}"))
}

fn serve(stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut writer = write_half;
    loop {
        let mut len = 0usize;
        let mut line = String::new();
        let mut saw_request = false;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let l = line.trim_end();
            if l.is_empty() {
                if saw_request {
                    break;
                }
                continue;
            }
            saw_request = true;
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        if std::io::copy(&mut (&mut reader).take(len as u64), &mut std::io::sink()).is_err() {
            return;
        }
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}

/// utime + stime of `pid` in seconds, and whether it has exited (a zombie not yet reaped).
fn proc_cpu(pid: u32) -> Option<(f64, bool)> {
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

fn run_once(args: &OverheadArgs, arm: Arm, run: usize, sink: &str) -> Result<RunResult> {
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

fn ratio(a: Option<Spread>, base: Option<Spread>) -> Option<f64> {
    match (a, base) {
        (Some(a), Some(b)) if b.median != 0.0 => Some(a.median / b.median),
        _ => None,
    }
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
    let sink = start_sink()?;
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

fn fmt_spread(s: Option<Spread>, prec: usize) -> String {
    s.map_or("n/a".into(), |s| {
        format!("{:.p$} [{:.p$}–{:.p$}]", s.median, s.min, s.max, p = prec)
    })
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or("n/a".into(), |r| format!("{r:.3}"))
}

fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "overhead of span-profile at {} Hz, budget {:.2}% of a core; medians [min–max] of {} alternating runs per arm",
        r.rate,
        r.budget * 100.0,
        r.arms.first().map_or(0, |a| a.runs)
    );
    let _ = writeln!(s, "throughput: {}", r.throughput_unit);
    let _ = writeln!(
        s,
        "{:<13} {:>26} {:>7} {:>24} {:>7} {:>24} {:>7} {:>24}",
        "arm",
        "throughput",
        "ratio",
        "CPU s",
        "ratio",
        "peak RSS MB",
        "ratio",
        "agent CPU % of a core"
    );
    for a in &r.arms {
        let _ = writeln!(
            s,
            "{:<13} {:>26} {:>7} {:>24} {:>7} {:>24} {:>7} {:>24}",
            a.arm,
            fmt_spread(a.throughput, 2),
            fmt_ratio(a.throughput_ratio),
            fmt_spread(a.cpu_s, 2),
            fmt_ratio(a.cpu_ratio),
            fmt_spread(a.peak_rss_mb, 1),
            fmt_ratio(a.rss_ratio),
            fmt_spread(a.agent_cpu_pct, 3),
        );
    }
    match r.budget_held {
        Some(true) => {
            let _ = writeln!(
                s,
                "budget held: agent CPU within {:.2}% of a core (+20%)",
                r.budget * 100.0
            );
        }
        Some(false) => {
            let _ = writeln!(
                s,
                "budget NOT held: agent CPU above {:.2}% of a core (+20%)",
                r.budget * 100.0
            );
        }
        None => {
            let _ = writeln!(s, "budget: unknown (the agent reported no CPU)");
        }
    }
    s
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

    #[test]
    fn spreads() {
        let s = Spread::of(&[3.0, 1.0, 2.0, f64::NAN]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[1.0, 2.0]).unwrap().median, 1.5);
        assert!(Spread::of(&[]).is_none());
    }
}
