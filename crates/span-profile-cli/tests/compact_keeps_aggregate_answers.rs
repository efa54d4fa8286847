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
    assert_eq!(answers(d), before);
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
