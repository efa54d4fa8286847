//! `compact`: windows past --full become hourly roll-ups, past --hourly daily ones, past
//! --daily they are deleted; aggregate answers are the same before and after, and a second
//! run changes nothing. Window summaries go with their windows: every roll-up has one, and no
//! summary outlives the windows it replaced.

mod common;

use std::time::Duration;

use common::*;

/// The aggregate answers that must survive compaction.
fn answers(d: &str) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for args in [
        &["top", d, "--route", "/checkout", "--json"][..],
        &["top", d, "--route", "/orders", "--json"][..],
        &["top", d, "--service", "checkout", "--json"][..],
        &["routes", d, "--frame", "parse_date", "--json"][..],
    ] {
        let mut v = json(&run_ok(args, 0));
        // The number of windows is how the samples are stored, not an answer.
        if let Some(o) = v.as_object_mut() {
            o.remove("windows");
        }
        out.push(v);
    }
    out
}

#[test]
fn roll_ups_answer_as_the_windows_did() {
    let dir = TempDir::new("compact");
    record_checkout_in_windows(dir.path(), "1.0", Duration::from_millis(100));
    let d = s(dir.path());
    let raw = count_files(dir.path());
    // About 12 windows of 100 ms; fewer on a loaded machine, where a late tick closes one
    // longer window (7 seen in CI). Four are plenty to roll up.
    assert!(raw >= 4, "{raw} windows");
    assert_one_summary_per_window(dir.path());
    let before = answers(d);

    // Nothing is old yet.
    let policy = ["--full", "14d", "--hourly", "90d", "--daily", "400d"];
    let compact = |now: &str| {
        let mut args = vec!["compact", d, "--now", now];
        args.extend(policy);
        run_ok(&args, 0)
    };
    compact("now");
    assert_eq!(count_files(dir.path()), raw);

    // Fifteen days later: hourly roll-ups (one, or two if the recording crossed an hour).
    let out = compact("+15d");
    assert!(
        out.contains(&format!("{raw} window(s) rolled into")),
        "{out}"
    );
    let hourly = count_files(dir.path());
    assert!((1..=2).contains(&hourly), "{hourly} files: {out}");
    // Requests included: the windows counted them, and a roll-up sums the counts though it
    // keeps no span table (ADR 0032).
    assert_eq!(answers(d), before);
    let svc = json(&run_ok(&["top", d, "--service", "checkout", "--json"], 0));
    let checkout = svc["by_route"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "/checkout")
        .unwrap();
    assert!(checkout["requests"].as_u64().unwrap() > 0, "{svc}");
    assert_eq!(checkout["requests_sampled_only"], false, "{svc}");
    assert_one_summary_per_window(dir.path());
    assert!(
        !dir.path().join(".compact").exists(),
        "no staging left behind"
    );

    // Running again changes nothing.
    let again = compact("+15d");
    assert!(again.contains("0 window(s) rolled into"), "{again}");
    assert_eq!(count_files(dir.path()), hourly);

    // A hundred days later: a daily roll-up, same answers.
    compact("+100d");
    assert_eq!(count_files(dir.path()), 1);
    assert_eq!(answers(d), before);
    assert_one_summary_per_window(dir.path());

    // Past the last horizon: deleted, and the store is empty.
    let gone = compact("+500d");
    assert!(
        gone.contains("1 file(s) past the last horizon deleted"),
        "{gone}"
    );
    assert_eq!(count_files(dir.path()), 0);
    assert!(summary_files(dir.path()).is_empty());
    let o = run(&["top", d, "--route", "/checkout"]);
    assert_eq!(o.status.code(), Some(3));

    // Horizons that do not grow are refused with the expected form.
    let o = run(&[
        "compact", d, "--full", "90d", "--hourly", "14d", "--daily", "400d",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--full < --hourly < --daily"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_dry_run_plans_and_changes_nothing() {
    let dir = TempDir::new("compact-dry");
    record_checkout_in_windows(dir.path(), "1.0", Duration::from_millis(100));
    let d = s(dir.path());
    let raw = count_files(dir.path());
    let policy = ["--full", "14d", "--hourly", "90d", "--daily", "400d"];
    let dry = |now: &str, json_out: bool| {
        let mut args = vec!["compact", d, "--now", now, "--dry-run"];
        args.extend(policy);
        if json_out {
            args.push("--json");
        }
        run_ok(&args, 0)
    };

    let v = json(&dry("+15d", true));
    assert_eq!(v["dry_run"], true, "{v}");
    let planned = v["roll_ups"].as_array().unwrap();
    assert!(!planned.is_empty(), "{v}");
    assert!(
        planned
            .iter()
            .all(|r| r["tier"] == "hourly" && r["service"] == "checkout"),
        "{v}"
    );
    let files: u64 = planned.iter().map(|r| r["files"].as_u64().unwrap()).sum();
    assert_eq!(
        files, raw as u64,
        "every window is planned into a roll-up: {v}"
    );
    assert_eq!(v["would_delete"], 0, "{v}");
    assert_eq!(count_files(dir.path()), raw, "a dry run changes nothing");

    let text = dry("+15d", false);
    assert!(text.contains("-> hourly roll-up at "), "{text}");
    assert!(!text.contains("Hourly("), "no Rust debug output: {text}");

    let past = json(&dry("+500d", true));
    assert_eq!(past["would_delete"].as_u64(), Some(raw as u64), "{past}");
    assert_eq!(count_files(dir.path()), raw);
}
