//! `diff` on deploys recorded by the real pipeline, where `parse_date` grew in the second: one
//! REGRESSION line for it (self time: its caller `calculate` is not flagged with it), the
//! frame that shrank as an IMPROVEMENT, CPU per request by route, and exit 1. Two deploys of
//! the same code, or the same deploy on both sides: exit 0. A version that is not in the store:
//! exit 3 and the versions that are.

mod common;

use common::*;

/// `version` with each of the 20 requests `render_ms` in render and `parse_ms` in parse_date.
fn deploy(dir: &std::path::Path, version: &str, render_ms: u64, parse_ms: u64) {
    record_deploy(dir, version, &[(HANDLE, render_ms), (PARSE_DATE, parse_ms)]);
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
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
fn a_frame_that_grew_is_a_regression() {
    let dir = TempDir::new("diff");
    deploy(dir.path(), "1.0", 50, 10);
    deploy(dir.path(), "1.0-again", 50, 10);
    deploy(dir.path(), "2.0", 15, 45);
    let d = s(dir.path());

    let out = run_ok(
        &["diff", d, "--old", "version=1.0", "--new", "version=2.0"],
        1,
    );
    let regressions: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("REGRESSION "))
        .collect();
    let improvements: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("IMPROVEMENT "))
        .collect();
    assert_eq!(regressions.len(), 1, "{out}");
    assert!(
        regressions[0].starts_with("REGRESSION parse_date (app.py): "),
        "{out}"
    );
    assert_eq!(improvements.len(), 1, "{out}");
    assert!(
        improvements[0].starts_with("IMPROVEMENT render (app.py): "),
        "{out}"
    );

    let v = json(&run_ok(
        &[
            "diff",
            d,
            "--old",
            "version=1.0",
            "--new",
            "version=2.0",
            "--json",
        ],
        1,
    ));
    assert_eq!(names(&v["regressions"]), ["parse_date (app.py)"], "{v}");
    assert_eq!(names(&v["improvements"]), ["render (app.py)"], "{v}");
    // Thread 1 spends 10 of 60 ms, then 45 of 60 ms, in parse_date; thread 2 always idles, so
    // the self shares are about 1/12 and 3/8.
    let r = &v["regressions"][0];
    let (old, new) = (
        r["old_share"].as_f64().unwrap(),
        r["new_share"].as_f64().unwrap(),
    );
    assert!((old - 10.0 / 120.0).abs() < 0.05, "{v}");
    assert!((new - 45.0 / 120.0).abs() < 0.07, "{v}");
    assert!(r["p_value"].as_f64().unwrap() < 0.01, "{v}");
    // CPU per request: the scripted walker charges 10 ms of CPU to each sample, so a side's
    // /checkout CPU is its CPU samples of the route times 10 ms, over its requests: the 20 each
    // deploy served, counted as they ended (ADR 0032), even where a request got no sample and
    // so left no span record (ADR 0010; on a loaded machine one of the 20 may be missed).
    let routes = v["routes"].as_array().unwrap();
    let checkout = routes.iter().find(|r| r["route"] == "/checkout").unwrap();
    for (side, version) in [("old", "1.0"), ("new", "2.0")] {
        let listed = json(&run_ok(
            &[
                "spans",
                d,
                "--version",
                version,
                "--name",
                "POST /checkout",
                "--limit",
                "100",
                "--json",
            ],
            0,
        ));
        let recorded = listed.as_array().unwrap().len() as u64;
        assert!((16..=20).contains(&recorded), "{listed}");
        let requests = 20;
        assert_eq!(checkout[format!("{side}_requests")], requests, "{v}");
        let top = json(&run_ok(
            &[
                "top",
                d,
                "--route",
                "/checkout",
                "--version",
                version,
                "--json",
            ],
            0,
        ));
        let cpu_samples = top["cpu_samples"].as_u64().unwrap();
        assert!(cpu_samples > 0, "{top}");
        let want = cpu_samples as f64 * 10.0 / requests as f64;
        let got = checkout[format!("{side}_cpu_ms_per_request")]
            .as_f64()
            .unwrap();
        assert!(
            (got - want).abs() < 1e-9,
            "{side}: {got} ms per request, want {want}: {v}"
        );
    }
    assert!(out.contains("/checkout: "), "{out}");

    // With a window: the same answer for these short deploys.
    let w = json(&run_ok(
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
    assert_eq!(names(&w["regressions"]), ["parse_date (app.py)"], "{w}");

    // Two deploys of the same code, both ways, and the same deploy on both sides: no
    // regression. A threshold above the growth: none either.
    for (a, b) in [("1.0", "1.0-again"), ("1.0-again", "1.0"), ("2.0", "2.0")] {
        let same = run_ok(
            &[
                "diff",
                d,
                "--old",
                &format!("version={a}"),
                "--new",
                &format!("version={b}"),
            ],
            0,
        );
        assert!(
            same.contains("no frame's self share of CPU grew significantly"),
            "{same}"
        );
    }
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

    // A version with no windows: exit 3, with the versions there are.
    let o = run(&["diff", d, "--old", "version=1.0", "--new", "version=9.9"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no windows of version=9.9")
            && stderr(&o).contains("versions in the store: ")
            && ["1.0", "1.0-again", "2.0"]
                .iter()
                .all(|v| stderr(&o).contains(v)),
        "{}",
        stderr(&o)
    );
}
