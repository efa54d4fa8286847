//! `span-profile overhead --rate-rps N --url URL -- python service.py`: the fixed-load mode
//! end to end, on a tiny HTTP service that burns a known CPU time per request and counts the
//! requests it served. No timing is asserted; the report's fields must be present and agree
//! with what the service itself saw.
//!
//! Needs a Python with the `span_profile` wheel installed: a venv under `target/venvs/*`
//! (`scripts/test-python.sh` builds them) or `$SPAN_PROFILE_PYTHON`. Without one the test is
//! skipped with a note, unless `CI` is set, in which case it fails.

use std::process::Command;

/// CPU each request burns in the service, ms (thread CPU time, so it is the service's CPU).
const BURN_MS: f64 = 5.0;
const RATE: u64 = 40;

const SERVICE: &str = r#"
import os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, out, burn_ms = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
served = []
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as a production server: else each body waits 40 ms
    def do_GET(self):
        t = time.thread_time()
        while time.thread_time() - t < burn_ms / 1000:
            pass
        i = int(self.path.split("i=")[1])
        served.append(i)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ThreadingHTTPServer.daemon_threads = True
srv = ThreadingHTTPServer(("127.0.0.1", port), H)
try:
    srv.serve_forever()
finally:
    with open(os.path.join(out, "served-%d.txt" % os.getpid()), "w") as f:
        f.write(" ".join(map(str, served)))
"#;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Runs `span-profile --json overhead` at RATE fixed arrivals a second for 1 s after 0.25 s of
/// warm-up, against `service` (written to `dir`), with `extra` flags before the command.
fn overhead_at_rate(
    python: &std::path::Path,
    dir: &std::path::Path,
    service: &str,
    extra: &[&str],
) -> std::process::Output {
    std::fs::create_dir_all(dir).unwrap();
    let app = dir.join("service.py");
    std::fs::write(&app, service).unwrap();
    let port = free_port();
    Command::new(env!("CARGO_BIN_EXE_span-profile"))
        .args(["--json", "overhead", "--rate-rps"])
        .arg(RATE.to_string())
        .arg("--url")
        .arg(format!("http://127.0.0.1:{port}/work"))
        .args(["--duration", "1", "--warmup", "0.25", "--arrivals", "fixed"])
        .args(extra)
        .arg("--")
        .arg(python)
        .arg(&app)
        .arg(port.to_string())
        .arg(dir)
        .arg(BURN_MS.to_string())
        .output()
        .unwrap()
}

#[test]
fn fixed_load_counts_every_request_and_reports_each_field() {
    let Some(python) = span_profile_test::python_with_agent() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("overhead-fixed-{}", std::process::id()));
    let out = overhead_at_rate(&python, &dir, SERVICE, &["--runs", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(v["mode"], "fixed-load");
    assert_eq!(v["rate_rps"].as_f64(), Some(RATE as f64));

    // What each service process served, read from the files it wrote at SIGTERM: the measured
    // requests are numbered from 1 000 000, the warm-up's from 0.
    let mut measured_served = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("served-") {
            let text = std::fs::read_to_string(e.path()).unwrap();
            let n = text
                .split_whitespace()
                .filter(|i| i.parse::<u64>().unwrap() >= 1_000_000)
                .count() as u64;
            measured_served.push(n);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        measured_served.len(),
        2,
        "one service process per arm and run"
    );

    let runs = v["runs"].as_array().unwrap();
    let order: Vec<&str> = runs.iter().map(|r| r["arm"].as_str().unwrap()).collect();
    assert_eq!(order, ["none", "span-profile"]);
    let mut completed_total = 0;
    for r in runs {
        let f = |k: &str| {
            r[k].as_f64()
                .unwrap_or_else(|| panic!("{k} missing in {r}"))
        };
        // Fixed arrivals 1/RATE apart for 1 s: exactly RATE arrivals.
        assert_eq!(r["sent"].as_u64(), Some(RATE), "{r}");
        assert_eq!(r["completed"], r["sent"], "{r}");
        assert_eq!(r["errors"].as_u64(), Some(0), "{r}");
        completed_total += r["completed"].as_u64().unwrap();
        // The service burnt BURN_MS of CPU on every request: the process's CPU per request is
        // at least that (less 20 % for the 10 ms granularity of /proc/<pid>/stat).
        assert!(f("cpu_ms_per_req") >= 0.8 * BURN_MS, "{r}");
        assert!((f("cpu_ms_per_req") - 1000.0 * f("cpu_s") / f("completed")).abs() < 1e-6);
        // Latency runs from the scheduled arrival, so it includes the burn.
        assert!(f("p50_ms") >= BURN_MS, "{r}");
        assert!(f("p50_ms") <= f("p99_ms") && f("p99_ms") <= f("p999_ms"));
        assert!(f("p999_ms") <= f("max_ms"));
        assert!(
            f("rss_steady_mb") > 1.0 && f("rss_peak_mb") >= f("rss_steady_mb"),
            "{r}"
        );
    }
    let served: u64 = measured_served.iter().sum();
    assert_eq!(
        served, completed_total,
        "requests counted == requests served"
    );
    assert!(runs[0]["sample_hz"].is_null(), "no agent, no sample rate");
    assert!(runs[1]["sample_hz"].as_f64().unwrap() > 0.0, "{}", runs[1]);

    let arms = v["arms"].as_array().unwrap();
    assert_eq!(arms.len(), 2);
    assert!(
        arms[0]["cpu_vs_none"].is_null(),
        "none is not compared with itself"
    );
    for a in arms {
        assert_eq!(a["sent"].as_u64(), Some(RATE));
        assert_eq!(a["completed"].as_u64(), Some(RATE));
        for k in [
            "cpu_ms_per_req",
            "p50_ms",
            "p99_ms",
            "p999_ms",
            "rss_steady_mb",
            "rss_peak_mb",
        ] {
            assert!(a[k]["median"].as_f64().is_some(), "{k} in {a}");
        }
    }
    assert_eq!(
        arms[1]["cpu_verdict"], "too-few-rounds",
        "one round decides nothing"
    );
    assert!(arms[1]["cpu_change"].is_null());
    let ratio = arms[1]["cpu_vs_none"]["median"].as_f64().unwrap();
    let want =
        runs[1]["cpu_ms_per_req"].as_f64().unwrap() / runs[0]["cpu_ms_per_req"].as_f64().unwrap();
    assert!(
        (ratio - want).abs() < 1e-9,
        "the paired ratio of the one round"
    );
}

/// The service of the spec above, but burning `AGENT_BURNS` times the CPU a request when the
/// agent is loaded: the arm's true change in CPU per request is known to the test.
const AGENT_BURNS: f64 = 2.0;

#[test]
fn fixed_load_decides_a_target_from_the_paired_rounds() {
    let Some(python) = span_profile_test::python_with_agent() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("overhead-decide-{}", std::process::id()));
    let service = SERVICE.replace(
        "burn_ms = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])",
        &format!(
            "burn_ms = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])\n\
             if 'span_profile' in sys.modules: burn_ms *= {AGENT_BURNS}"
        ),
    );
    assert_ne!(
        service, SERVICE,
        "the burn line is where the spec expects it"
    );
    let out = overhead_at_rate(
        &python,
        &dir,
        &service,
        &["--runs", "3", "--cpu-target", "2", "--p99-target", "1000"],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(
        out.status.code(),
        Some(1),
        "the agent's arm is decided above +2% CPU: the command fails\n{stderr}"
    );
    assert_eq!(v["targets"]["cpu_pct"].as_f64(), Some(2.0));
    let arms = v["arms"].as_array().unwrap();
    assert!(arms[0]["cpu_verdict"].is_null(), "none is not decided");
    let agent = &arms[1];
    assert_eq!(agent["arm"], "span-profile");
    assert_eq!(agent["cpu_verdict"], "above", "{agent}");
    assert_eq!(agent["p99_verdict"], "within", "+1000% holds: {agent}");
    let c = &agent["cpu_change"];
    assert_eq!(c["rounds"].as_u64(), Some(3));
    let (mean, low, high) = (
        c["geo_mean"].as_f64().unwrap(),
        c["low"].as_f64().unwrap(),
        c["high"].as_f64().unwrap(),
    );
    assert!(low <= mean && mean <= high, "{c}");
    // The service burnt twice the CPU a request under the agent: the change is about +100%
    // (the request's other work, about the same in both arms, pulls it under; the agent's own
    // CPU pushes it over).
    assert!(
        (0.6..1.4).contains(&mean),
        "CPU a request about doubled: {c}"
    );
    // Latency too: one arrival every 25 ms is served before the next, so each response takes
    // about its burn (5 ms, 10 ms under the agent) and the p99 about doubles. Loose bounds: a
    // stall of a loaded machine in one round of three moves the geometric mean, not its sense.
    let p99 = agent["p99_change"]["geo_mean"].as_f64().unwrap();
    assert!(
        (0.3..2.5).contains(&p99),
        "p99 about doubled: {}",
        agent["p99_change"]
    );
    // The geometric mean is that of the per-round ratios the runs give.
    let runs = v["runs"].as_array().unwrap();
    let cpu = |arm: &str, i: u64| {
        runs.iter()
            .find(|r| r["arm"] == arm && r["run"].as_u64() == Some(i))
            .and_then(|r| r["cpu_ms_per_req"].as_f64())
            .unwrap()
    };
    let logs: f64 = (0..3)
        .map(|i| (cpu("span-profile", i) / cpu("none", i)).ln())
        .sum();
    assert!(((logs / 3.0).exp_m1() - mean).abs() < 1e-9, "{c}");
}

/// Runs `span-profile overhead --rate-rps 10 --url URL EXTRA -- python3 app.py`, which must stop
/// with a usage error (exit 2) before starting anything; returns its message.
fn usage_error(url: &str, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_span-profile"))
        .args(["overhead", "--rate-rps", "10", "--url", url])
        .args(extra)
        .args(["--", "python3", "app.py"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
    stderr
}

#[test]
fn fixed_load_refuses_a_bad_url_with_a_usage_error() {
    let stderr = usage_error("https://example.invalid/", &[]);
    assert!(stderr.contains("http://"), "says what to give: {stderr}");
}

#[test]
fn a_target_without_the_fixed_load_mode_is_a_usage_error() {
    // The closed-loop mode decides no target: a target given to it would be silently ignored.
    let out = Command::new(env!("CARGO_BIN_EXE_span-profile"))
        .args(["overhead", "--cpu-target", "3", "--", "python3", "app.py"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--rate-rps"),
        "names what it needs: {stderr}"
    );
}

#[test]
fn fixed_load_refuses_a_target_that_is_not_a_percentage() {
    for bad in ["nan", "-1", "inf"] {
        let stderr = usage_error("http://127.0.0.1:9/", &[&format!("--cpu-target={bad}")]);
        assert!(
            stderr.contains("--cpu-target is a percentage"),
            "says what to give for {bad}: {stderr}"
        );
    }
}
