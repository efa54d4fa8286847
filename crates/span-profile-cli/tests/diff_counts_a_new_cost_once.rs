//! `diff` compares self time: a new cost under a chain of callers (`audit_log` → `dumps` →
//! `encode` → `iterencode`) is flagged once, at the frame where the CPU is spent, not at every
//! caller. Frames are function and file: two functions named `run` are two frames.

mod common;

use common::*;

fn flagged(v: &serde_json::Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} ({})",
                c["function"].as_str().unwrap(),
                c["file"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn a_new_leaf_under_a_chain_is_one_regression() {
    let dir = TempDir::new("diff-once");
    record_deploy(dir.path(), "1", &[(HANDLE, 60), (RUN_ASYNCIO, 30)]);
    record_deploy(
        dir.path(),
        "2",
        &[(HANDLE, 30), (AUDIT, 30), (RUN_UVICORN, 30)],
    );
    let d = s(dir.path());
    let v = json(&run_ok(
        &[
            "diff",
            d,
            "--old",
            "version=1",
            "--new",
            "version=2",
            "--json",
        ],
        1,
    ));
    // iterencode and run (uvicorn) each went from 0 to about 30/180 of the CPU; iterencode's
    // callers have no self time, so they are not flagged; run (asyncio) went away.
    let mut reg = flagged(&v, "regressions");
    reg.sort();
    assert_eq!(
        reg,
        ["iterencode (json/encoder.py)", "run (uvicorn/main.py)"],
        "{v}"
    );
    for r in v["regressions"].as_array().unwrap() {
        assert_eq!(r["old_samples"], 0, "{v}");
        let share = r["new_share"].as_f64().unwrap();
        assert!((share - 30.0 / 180.0).abs() < 0.06, "{v}");
    }
    let imp = flagged(&v, "improvements");
    assert!(imp.contains(&"run (asyncio/runners.py)".to_owned()), "{v}");
    let text = run_ok(&["diff", d, "--old", "version=1", "--new", "version=2"], 1);
    let first = text.lines().find(|l| l.starts_with("REGRESSION ")).unwrap();
    assert!(
        first.contains(" (json/encoder.py): ") || first.contains(" (uvicorn/main.py): "),
        "{text}"
    );
    for caller in ["dumps", "encode", "audit_log", "handle", "serve"] {
        let line = format!("REGRESSION {caller} (");
        assert!(
            !text.lines().any(|l| l.starts_with(&line)),
            "{caller} flagged:\n{text}"
        );
    }
}
