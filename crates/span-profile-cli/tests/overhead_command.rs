//! `span-profile overhead` end to end on a tiny workload: runs it without and with the agent
//! and reports throughput, CPU, RSS and the agent's CPU against the budget.
//!
//! Needs a Python with the `span_profile` wheel installed: a venv under `target/venvs/*`
//! (`scripts/test-python.sh` builds them) or `$SPAN_PROFILE_PYTHON`. Without one the test is
//! skipped with a note, unless `CI` is set, in which case it fails.

use std::process::Command;

#[test]
fn overhead_reports_both_arms_and_the_budget() {
    let Some(python) = span_profile_test::python_with_agent() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("overhead-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let app = dir.join("app.py");
    std::fs::write(
        &app,
        "import json, sys, threading, time\n\
         n = int(sys.argv[1])\n\
         def work():\n    s = 0\n    for i in range(n): s += i * i\n\
         t0 = time.perf_counter()\n\
         ts = [threading.Thread(target=work) for _ in range(2)]\n\
         [t.start() for t in ts]; [t.join() for t in ts]\n\
         print(json.dumps({'rps': round(2 * n / (time.perf_counter() - t0), 1)}))\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_span-profile"))
        .args([
            "--json", "overhead", "--runs", "2", "--budget", "0.05", "--",
        ])
        .arg(&python)
        .arg(&app)
        .arg("300000")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let arms = v["arms"].as_array().unwrap();
    let names: Vec<&str> = arms.iter().map(|a| a["arm"].as_str().unwrap()).collect();
    assert_eq!(names, ["none", "span-profile"]);
    assert_eq!(v["runs"].as_array().unwrap().len(), 4);
    // Alternating: none, span-profile, none, span-profile.
    let order: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["arm"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["none", "span-profile", "none", "span-profile"]);
    assert_eq!(v["throughput_unit"], "as printed by the workload");
    for a in arms {
        assert!(a["throughput"]["median"].as_f64().unwrap() > 0.0);
        assert!(a["cpu_s"]["median"].as_f64().unwrap() > 0.0);
        assert!(a["peak_rss_mb"]["median"].as_f64().unwrap() > 1.0);
    }
    let agent = &arms[1];
    assert!(agent["agent_cpu_pct"]["median"].as_f64().unwrap() > 0.0);
    assert!(agent["throughput_ratio"].as_f64().is_some());
    assert_eq!(
        v["budget_held"].as_bool(),
        Some(out.status.code() == Some(0)),
        "exit code follows the verdict"
    );
}

#[test]
fn overhead_needs_a_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_span-profile"))
        .args(["overhead", "--runs", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
