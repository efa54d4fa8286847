//! `routes --frame F`: the frame's share of CPU, and which routes produce it.

mod common;

use common::*;

#[test]
fn parse_date_comes_mostly_from_checkout() {
    let dir = TempDir::new("routes");
    record_checkout(dir.path(), "1.0");
    let d = s(dir.path());

    let out = run_ok(&["routes", d, "--frame", "parse_date"], 0);
    let first = out.lines().next().unwrap();
    assert!(first.starts_with("app:parse_date costs "), "{out}");
    assert!(first.ends_with("% of that comes from /checkout"), "{out}");
    // The header's columns read apart ("of CPU CPU samples" ran together).
    let header: Vec<&str> = out
        .lines()
        .nth(1)
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        header,
        ["share of frame", "share of CPU", "CPU samples", "route"],
        "{out}"
    );
    let routes: Vec<&str> = out
        .lines()
        .skip(2)
        .map(|l| l.rsplit("  ").next().unwrap())
        .collect();
    assert_eq!(routes, ["/checkout", "/orders"], "{out}");

    let v = json(&run_ok(
        &["routes", d, "--frame", "parse_date", "--json"],
        0,
    ));
    let shares: f64 = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["share_of_frame"].as_f64().unwrap())
        .sum();
    assert!((shares - 1.0).abs() < 1e-9, "{v}");
    let cpu = v["share_of_cpu"].as_f64().unwrap();
    assert!(cpu > 0.1 && cpu < 0.6, "{v}");

    let o = run(&["routes", d, "--frame", "no_such_function"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("no_such_function is on none"),
        "{}",
        stderr(&o)
    );
}
