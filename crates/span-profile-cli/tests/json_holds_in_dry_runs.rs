//! `--json` holds in every command: standard output is one JSON document (dry runs
//! included), warnings and notes go to standard error, and no Rust debug output (`Hourly(…)`,
//! `Some(…)`) reaches either.

mod common;

use common::*;

/// Rust debug output a user must never see.
fn assert_no_debug_output(args: &[&str], text: &str) {
    for needle in ["Hourly(", "Daily(", "Some(", "None", "Tier::", "{ "] {
        assert!(
            !text.contains(needle),
            "{args:?} printed {needle:?}:\n{text}"
        );
    }
}

#[test]
fn json_holds_in_dry_runs_and_every_command() {
    let dir = TempDir::new("json-dry-run");
    let d = dir.path();
    // Several windows, as the diff needs at least two a side.
    record_checkout_in_windows(d, "1.4.2", std::time::Duration::from_millis(200));
    let files = count_files(d);
    assert!(files > 0);
    let svg = d.join("flame.svg");
    let commands: Vec<Vec<&str>> = vec![
        vec!["ls", s(d)],
        vec!["spans", s(d)],
        vec!["top", s(d), "--route", "/checkout"],
        vec!["top", s(d), "--service", "checkout"],
        vec!["top", s(d), "--slowest", "pricing.calculate"],
        vec!["routes", s(d), "--frame", "parse_date"],
        vec![
            "diff",
            s(d),
            "--old",
            "version=1.4.2",
            "--new",
            "version=1.4.2",
        ],
        vec!["flame", s(d), "--route", "/checkout", "-o", s(&svg)],
        vec![
            "link",
            "--trace-id",
            "000000000000000000000000000000fe",
            "--span-id",
            "0000000000000001",
            "--start",
            "1",
            "--end",
            "2",
        ],
        // Thirty days from now every window is past --full: the dry run plans roll-ups.
        vec!["compact", s(d), "--dry-run", "--now", "+30d"],
    ];
    for c in &commands {
        let mut args = vec!["--json"];
        args.extend_from_slice(c);
        let o = run(&args);
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{args:?}: {}",
            stderr(&o)
        );
        let out = stdout(&o);
        let v = json(&out);
        assert!(v.is_object() || v.is_array(), "{args:?}: {out}");
        assert_no_debug_output(&args, &out);
        assert_no_debug_output(&args, &stderr(&o));
    }
    // The dry run's plan is the store's files, and it changed nothing.
    let plan = json(&run_ok(
        &["--json", "compact", s(d), "--dry-run", "--now", "+30d"],
        0,
    ));
    assert_eq!(plan["dry_run"], true);
    let planned: u64 = plan["roll_ups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["tier"], "hourly", "{plan}");
            assert_eq!(r["service"], "checkout", "{plan}");
            r["files"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(planned, files as u64, "{plan}");
    assert_eq!(plan["would_delete"], 0);
    assert_eq!(count_files(d), files, "a dry run changes nothing");
    // The text dry run names tiers in words.
    let text = run_ok(&["compact", s(d), "--dry-run", "--now", "+30d"], 0);
    assert!(text.contains("-> hourly roll-up at "), "{text}");
    assert_no_debug_output(&["compact"], &text);
    // An SVG on standard output and JSON cannot share it: a usage error, nothing printed.
    let o = run(&["--json", "flame", s(d), "-o", "-"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    // The real run's report is JSON too.
    let done = json(&run_ok(&["--json", "compact", s(d), "--now", "+30d"], 0));
    assert_eq!(done["files_before"].as_u64(), Some(files as u64), "{done}");
    assert_eq!(done["rolled_up"].as_u64(), Some(files as u64), "{done}");
}
