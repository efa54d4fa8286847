//! `diff` on two deploys recorded by the real pipeline, where `parse_date` grew in the second:
//! a REGRESSION line and exit 1; the same deploy on both sides: exit 0.

mod common;

use std::time::Duration;

use common::*;

/// One request of `/checkout` on `version`: `render_ms` in render, `parse_ms` in parse_date.
fn deploy(dir: &std::path::Path, version: &str, render_ms: u64, parse_ms: u64) {
    let script = Script::default();
    let p = profiler(dir, "checkout", version, &script);
    let root = start_span(&p, 0xd1, 1, None, "POST /checkout", Some("/checkout"));
    script.set(HANDLE);
    ms(render_ms);
    script.set(PARSE_DATE);
    ms(parse_ms);
    root.end();
    script.set(IDLE);
    p.shutdown_with_timeout(Duration::from_secs(10)).unwrap();
}

#[test]
fn a_frame_that_grew_is_a_regression() {
    let dir = TempDir::new("diff");
    deploy(dir.path(), "1.0", 360, 40);
    deploy(dir.path(), "2.0", 100, 300);
    let d = s(dir.path());

    let out = run_ok(
        &["diff", d, "--old", "version=1.0", "--new", "version=2.0"],
        1,
    );
    let regressions: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("REGRESSION "))
        .collect();
    // parse_date's share of CPU went from about 5% to about 37% (half the samples are idle);
    // shares are inclusive, so its caller `calculate` grew with it, and nothing else did.
    let mut names = Vec::new();
    for r in &regressions {
        let (name, change) = r["REGRESSION ".len()..].split_once(": ").unwrap();
        let (a, b) = change.split_once(" -> ").unwrap();
        let pct = |s: &str| s.strip_suffix('%').unwrap().parse::<f64>().unwrap();
        assert!(pct(b) > pct(a) + 15.0, "{out}");
        names.push(name);
    }
    names.sort_unstable();
    assert_eq!(names, ["calculate", "parse_date"], "{out}");

    // With a window and as JSON: the same answer for these short deploys.
    let v = json(&run_ok(
        &[
            "diff",
            d,
            "--old",
            "version=1.0",
            "--new",
            "version=2.0",
            "--window",
            "30m",
            "--json",
        ],
        1,
    ));
    assert_eq!(v["regressions"].as_array().unwrap().len(), 2, "{v}");

    // A threshold above the growth, or the same deploy on both sides: no regression.
    let same = run_ok(
        &["diff", d, "--old", "version=2.0", "--new", "version=2.0"],
        0,
    );
    assert!(same.contains("no frame's share of CPU grew"), "{same}");
    run_ok(
        &[
            "diff",
            d,
            "--old",
            "version=1.0",
            "--new",
            "version=2.0",
            "--threshold",
            "0.9",
        ],
        0,
    );

    // A version with no windows is an empty selection.
    let o = run(&["diff", d, "--old", "version=1.0", "--new", "version=9.9"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}
