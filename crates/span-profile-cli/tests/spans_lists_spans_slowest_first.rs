//! `spans`: ended spans, slowest first, with duration and sample count; filters by minimum
//! duration, name and trace.

mod common;

use common::*;

#[test]
fn spans_are_listed_slowest_first() {
    let dir = TempDir::new("spans");
    record_checkout(dir.path(), "1.0");
    let d = s(dir.path());

    let out = run_ok(&["spans", d], 0);
    let names: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.rsplit("  ").next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "POST /checkout",
            "pricing.calculate",
            "GET /orders",
            "POST /checkout",
            "pricing.calculate"
        ],
        "{out}"
    );
    assert!(
        out.lines().nth(1).unwrap().trim_start().contains(" ms "),
        "{out}"
    );

    // --min-ms at the second span's length (720 ms at 100 Hz; longer on a loaded machine, where
    // the stages wait for the sampler, `Script::run`) keeps the two slowest.
    let all = json(&run_ok(&["spans", d, "--json"], 0));
    let ns = |s: &serde_json::Value| {
        s["span"]["end_unix_ns"].as_u64().unwrap() - s["span"]["start_unix_ns"].as_u64().unwrap()
    };
    let second_ms = (ns(&all[1]) / 1_000_000).to_string();
    let slow = run_ok(&["spans", d, "--min-ms", &second_ms, "--json"], 0);
    let v = json(&slow);
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 2, "{slow}");
    assert!(list.iter().all(|s| s["samples"].as_u64().unwrap() > 0));

    let calc = json(&run_ok(
        &["spans", d, "--name", "pricing.calculate", "--json"],
        0,
    ));
    let ids: Vec<&str> = calc
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["span"]["span_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["0000000000000002", "0000000000000003"]);

    let trace = json(&run_ok(
        &[
            "spans",
            d,
            "--trace-id",
            "0000000000000000000000000000cafe",
            "--json",
        ],
        0,
    ));
    assert_eq!(trace.as_array().unwrap().len(), 1);

    let o = run(&["spans", d, "--min-ms", "100000"]);
    assert_eq!(o.status.code(), Some(3));
}
