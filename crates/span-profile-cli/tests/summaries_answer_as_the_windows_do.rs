//! Window summaries (ADR 0006) change how fast `top`, `top --service`, `top --span-name`,
//! `routes` and `diff` answer, never what they answer: a store with summaries, the same store
//! with its summaries deleted, and the store read with `SPAN_PROFILE_NO_SUMMARY=1` print the
//! same; a corrupt or cut summary falls back to its window; and the summaries are what is
//! read when they are there.

mod common;

use std::fs;
use std::path::Path;

use common::*;

const NO_SUMMARY: &[(&str, &str)] = &[("SPAN_PROFILE_NO_SUMMARY", "1")];

/// The questions summaries answer, with the exit codes each may end with.
fn questions(d: &str) -> Vec<(Vec<&str>, &'static [i32])> {
    vec![
        (vec!["top", d, "--service", "checkout", "--json"], &[0]),
        (
            vec!["top", d, "--service", "checkout", "--limit", "3"],
            &[0],
        ),
        (
            args("diff", d, "--old version=1.0 --new version=2.0 --json"),
            &[0, 1],
        ),
        (
            args("diff", d, "--old version=2.0 --new version=1.0"),
            &[0, 1],
        ),
        // Span names by version: both deploys have the same span ids, and a span id ended
        // twice at different times is taken from whichever window is read first.
        (span_name(d, "pricing.calculate", "--version 1.0"), &[0]),
        (span_name(d, "POST /checkout", "--version 1.0 --json"), &[0]),
        (
            span_name(d, "POST /checkout", "--exclusive --by module --version 2.0"),
            &[0],
        ),
        (
            span_name(d, "pricing.calculate", "--version 2.0 --json"),
            &[0],
        ),
        (vec!["top", d, "--route", "/checkout"], &[0]),
        (
            vec!["top", d, "--route", "/checkout", "--by", "module"],
            &[0],
        ),
        (
            vec!["top", d, "--by", "package", "--version", "1.0", "--json"],
            &[0],
        ),
        (
            vec!["top", d, "--route", "/checkout", "--inclusive", "--json"],
            &[0],
        ),
        (vec!["top", d, "--route", "/orders", "--json"], &[0]),
        (
            vec![
                "top",
                d,
                "--route",
                "/checkout",
                "--version",
                "2.0",
                "--since=-1h",
            ],
            &[0],
        ),
        (vec!["top", d, "--version", "1.0"], &[0]),
        (vec!["routes", d, "--frame", "parse_date"], &[0]),
        (
            vec![
                "routes",
                d,
                "--frame",
                "parse_date",
                "--json",
                "--version",
                "1.0",
            ],
            &[0],
        ),
    ]
}

/// Questions that summaries decline, so their windows are decoded: reports by line
/// (summaries keep no lines), and spans by name within a route (a summary keeps a span
/// name's samples for all routes together).
fn decoded_questions(d: &str) -> Vec<(Vec<&str>, &'static [i32])> {
    vec![
        (vec!["top", d, "--route", "/checkout", "--lines"], &[0]),
        (
            span_name(d, "pricing.calculate", "--lines --version 1.0"),
            &[0],
        ),
        (
            span_name(d, "pricing.calculate", "--route /checkout --version 2.0"),
            &[0],
        ),
    ]
}

/// `command DIR` and the space-separated `rest`.
fn args<'a>(command: &'a str, d: &'a str, rest: &'a str) -> Vec<&'a str> {
    let mut v = vec![command, d];
    v.extend(rest.split(' '));
    v
}

/// `top DIR --span-name NAME` and the space-separated `rest`.
fn span_name<'a>(d: &'a str, name: &'a str, rest: &'a str) -> Vec<&'a str> {
    let mut v = args("top", d, rest);
    v.splice(2..2, ["--span-name", name]);
    v
}

/// Every question's standard output and exit code.
fn answers(d: &str, env: &[(&str, &str)]) -> Vec<(String, Option<i32>)> {
    let mut all = questions(d);
    all.extend(decoded_questions(d));
    answer(all, env)
}

/// The standard output and exit code of the questions summaries answer.
fn summarized_answers(d: &str, env: &[(&str, &str)]) -> Vec<(String, Option<i32>)> {
    answer(questions(d), env)
}

fn answer(
    questions: Vec<(Vec<&str>, &'static [i32])>,
    env: &[(&str, &str)],
) -> Vec<(String, Option<i32>)> {
    questions
        .into_iter()
        .map(|(args, codes)| {
            let o = run_with_env(&args, env);
            let code = o.status.code().unwrap_or(-1);
            assert!(codes.contains(&code), "{args:?}: {code}: {}", stderr(&o));
            (stdout(&o), o.status.code())
        })
        .collect()
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_tree(&src, &dst);
        } else {
            fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Two deploys in windows of 300 ms, so that `diff` has several windows a side and spans
/// cross windows.
fn two_deploys() -> TempDir {
    let dir = TempDir::new("summaries");
    for v in ["1.0", "2.0"] {
        record_checkout_in_windows(dir.path(), v, std::time::Duration::from_millis(300));
    }
    assert_one_summary_per_window(dir.path());
    assert!(window_files(dir.path()).len() >= 6);
    dir
}

#[test]
fn with_or_without_summaries_the_answers_are_the_same() {
    let dir = two_deploys();
    let bare = TempDir::new("summaries-deleted");
    copy_tree(dir.path(), bare.path());
    for f in summary_files(bare.path()) {
        fs::remove_file(f).unwrap();
    }
    assert!(summary_files(bare.path()).is_empty());
    let d = s(dir.path());
    let with = answers(d, &[]);
    for start in [
        "route /checkout -> ",
        "{\n  \"by_module\"",
        "spans pricing.calculate, version 1.0: 2 ended span(s) -> ",
    ] {
        assert!(with.iter().any(|(o, _)| o.starts_with(start)), "{with:?}");
    }
    // Both deploys run the same code: the diff finds no regression, in either direction.
    assert!(
        with.iter()
            .any(|(o, code)| *code == Some(0) && o.starts_with("old version=2.0: ")),
        "{with:?}"
    );
    assert_eq!(with, answers(s(bare.path()), &[]), "summaries deleted");
    assert_eq!(with, answers(d, NO_SUMMARY), "SPAN_PROFILE_NO_SUMMARY=1");
}

#[test]
fn a_corrupt_or_cut_summary_falls_back_to_its_window() {
    let dir = two_deploys();
    let d = s(dir.path());
    let want = answers(d, NO_SUMMARY);
    let summaries = summary_files(dir.path());
    assert!(summaries.len() >= 2, "{summaries:?}");
    fs::write(&summaries[0], b"\x08\x01 not a summary").unwrap();
    let bytes = fs::read(&summaries[1]).unwrap();
    fs::write(&summaries[1], &bytes[..bytes.len() / 2]).unwrap();

    assert_eq!(answers(d, &[]), want);
    let o = run(&["top", d, "--route", "/checkout"]);
    let err = stderr(&o);
    assert!(
        err.contains("2 window summary file(s)") && err.contains("decoded instead"),
        "{err}"
    );
    assert!(!err.contains("skipped"), "no window is left out: {err}");
}

#[test]
fn summaries_are_what_is_read_when_they_are_there() {
    let dir = two_deploys();
    let d = s(dir.path());
    let want = summarized_answers(d, &[]);
    // Every window file garbled, its length kept: only the summaries can still answer.
    for w in window_files(dir.path()) {
        let len = fs::metadata(&w).unwrap().len() as usize;
        fs::write(&w, vec![0xff; len]).unwrap();
    }
    assert_eq!(summarized_answers(d, &[]), want);
    let o = run_with_env(&["top", d, "--route", "/checkout"], NO_SUMMARY);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("unreadable file(s)"), "{}", stderr(&o));
}
