//! `--since -2h`, the form the help shows, is a time and not an unknown flag.

mod common;

use common::*;

#[test]
fn since_and_until_take_a_relative_time_after_a_space() {
    let dir = TempDir::new("relative-times");
    record_checkout(dir.path(), "1.0");
    let d = s(dir.path());

    let spaced = run_ok(&["spans", d, "--since", "-1h", "--json"], 0);
    let joined = run_ok(&["spans", d, "--since=-1h", "--json"], 0);
    assert_eq!(spaced, joined);
    assert!(!json(&spaced).as_array().unwrap().is_empty(), "{spaced}");

    // The windows were written just now: none starts before an hour ago.
    run_ok(&["spans", d, "--until", "-1h"], 3);
}
