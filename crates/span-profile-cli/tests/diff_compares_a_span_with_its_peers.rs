//! `diff --slowest NAME` / `--span-id X`: one span, with its descendants, against every other
//! span of its name. One `pricing.calculate` in twenty also parses dates (in a child span);
//! the report names `parse_date` as what it did and its peers did not.

mod common;

use std::time::Duration;

use common::*;

const ODD: u64 = 7;

fn record(dir: &std::path::Path) {
    let script = Script::default();
    let p = profiler(dir, "checkout", "1.0", &script);
    for i in 0..20u64 {
        let trace = 0x100 + u128::from(i);
        let root = start_span(
            &p,
            trace,
            1000 + i,
            None,
            "POST /checkout",
            Some("/checkout"),
        );
        let calc = start_span(&p, trace, 1 + i, Some(1000 + i), "pricing.calculate", None);
        script.run(CALCULATE, 30);
        script.run(APPLY_DISCOUNT, 20);
        if i + 1 == ODD {
            let child = start_span(&p, trace, 5000, Some(ODD), "dates.parse", None);
            script.run(PARSE_DATE, 200);
            child.end();
        }
        calc.end();
        script.run(HANDLE, 10);
        root.end();
    }
    script.set(IDLE);
    p.shutdown_with_timeout(Duration::from_secs(10)).unwrap();
}

#[test]
fn the_odd_span_shows_what_it_did_differently() {
    let dir = TempDir::new("diff-peers");
    record(dir.path());
    let d = s(dir.path());

    let v = json(&run_ok(
        &["diff", d, "--slowest", "pricing.calculate", "--json"],
        0,
    ));
    assert_eq!(v["span"]["span_id"], format!("{ODD:016x}"), "{v}");
    assert_eq!(v["peers"], 19, "{v}");
    let top = &v["frames"][0];
    assert_eq!(
        (top["function"].as_str(), top["file"].as_str()),
        (Some("parse_date"), Some("app.py")),
        "{v}"
    );
    // 200 ms at 100 Hz in the child span: about 20 samples (as few as half that when the
    // sampler runs behind on a loaded machine); no peer has any.
    let n = top["samples"].as_u64().unwrap();
    assert!((8..=26).contains(&n), "{v}");
    assert_eq!(top["peers_with"], 0, "{v}");
    assert_eq!(top["peer_mean"], 0.0, "{v}");
    // A peer spends about 50 ms (5 samples) in the span: fewer than the odd one's parse_date.
    let mean = v["peer_samples_mean"].as_f64().unwrap();
    assert!((2.0..=7.0).contains(&mean) && mean < n as f64, "{v}");
    // The frames every span runs are not what makes the odd one different.
    for f in v["frames"].as_array().unwrap().iter().skip(1) {
        assert!(
            f["samples"].as_f64().unwrap() - f["peer_mean"].as_f64().unwrap() < 4.0,
            "{v}"
        );
    }

    let text = run_ok(&["diff", d, "--span-id", &format!("{ODD:016x}")], 0);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("  ")).collect();
    assert!(
        rows[0].contains("parse_date (app.py)") && rows[0].contains("in 0 of 19 peers"),
        "{text}"
    );

    // A typical span did nothing its peers did not do by much; parse_date is not listed.
    let typical = run_ok(&["diff", d, "--span-id", &format!("{:016x}", 3)], 0);
    assert!(!typical.contains("parse_date"), "{typical}");

    // The window filters apply: the peers of version 1.0 are the same; of another, none.
    let v1 = json(&run_ok(
        &[
            "diff",
            d,
            "--slowest",
            "pricing.calculate",
            "--version",
            "1.0",
            "--json",
        ],
        0,
    ));
    assert_eq!(v1["peers"], 19, "{v1}");
    let o = run(&[
        "diff",
        d,
        "--slowest",
        "pricing.calculate",
        "--version",
        "9",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));

    // An unknown span: exit 3.
    let o = run(&["diff", d, "--span-id", "00000000000000ff"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}
