//! Bad input: corrupt and truncated files are skipped, counted and reported on stderr; an
//! empty selection says so and exits 3; bad durations, times and ids are errors (exit 2) that
//! show the expected form.

mod common;

use std::fs;

use common::*;

#[test]
fn corrupt_and_truncated_files_are_skipped_with_a_warning() {
    let dir = TempDir::new("bad");
    record_checkout(dir.path(), "1.0");
    let good = run_ok(&["top", s(dir.path()), "--slowest", "pricing.calculate"], 0);

    // Next to the real window: a truncated copy and a file of garbage, named like windows.
    let window = window_files(dir.path()).into_iter().next().unwrap();
    let bytes = fs::read(&window).unwrap();
    let day = window.parent().unwrap();
    fs::write(day.join("1-test-900.pb.gz"), &bytes[..bytes.len() / 2]).unwrap();
    fs::write(day.join("2-test-901.pb.gz"), b"not a profile at all").unwrap();

    let o = run(&["top", s(dir.path()), "--slowest", "pricing.calculate"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), good, "the answer leaves the bad files out");
    let err = stderr(&o);
    assert!(
        err.contains("warning: skipped 2 unreadable file(s)"),
        "{err}"
    );
    assert!(
        err.contains("1-test-900.pb.gz") && err.contains("2-test-901.pb.gz"),
        "{err}"
    );
}

#[test]
fn an_empty_selection_exits_3() {
    let dir = TempDir::new("empty");
    record_checkout(dir.path(), "1.0");
    let o = run(&["top", s(dir.path()), "--slowest", "no.such.span"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("no ended span named \"no.such.span\""),
        "{}",
        stderr(&o)
    );
    let o = run(&["top", s(dir.path()), "--route", "/nowhere"]);
    assert_eq!(o.status.code(), Some(3));
    let o = run(&[
        "top",
        s(dir.path()),
        "--service",
        "checkout",
        "--until",
        "2000-01-01T00:00:00Z",
    ]);
    assert_eq!(o.status.code(), Some(3));
}

#[test]
fn bad_values_show_the_expected_form() {
    let dir = TempDir::new("args");
    let d = s(dir.path());
    for (args, expected) in [
        (vec!["top", d, "--span-id", "12"], "expected 16 hex digits"),
        (vec!["top", d, "--trace-id", "zz"], "expected 32 hex digits"),
        (vec!["top", d, "--since", "yesterday"], "expected RFC 3339"),
        (
            vec!["diff", d, "--old", "1.0", "--new", "version=2"],
            "expected version=VALUE",
        ),
        (
            vec![
                "diff",
                d,
                "--old",
                "version=1",
                "--new",
                "version=2",
                "--window",
                "5x",
            ],
            "expected a duration such as",
        ),
        (
            vec![
                "diff",
                d,
                "--old",
                "version=1",
                "--new",
                "version=2",
                "--threshold",
                "5",
            ],
            "expected a number from 0 to 1",
        ),
        (
            vec!["compact", d, "--full", "two weeks"],
            "expected a duration such as",
        ),
        (
            vec!["top", "/no/such/store", "--route", "/"],
            "is not a directory",
        ),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn a_zero_byte_window_is_unreadable_and_compact_leaves_it() {
    let dir = TempDir::new("zero-byte");
    record_checkout(dir.path(), "1.0");
    let d = s(dir.path());
    let window = window_files(dir.path()).into_iter().next().unwrap();
    // Named as the real window is, with another sequence number: the same start time.
    let name = window.file_name().unwrap().to_str().unwrap();
    let (start, _) = name.split_once('-').unwrap();
    let empty = window
        .parent()
        .unwrap()
        .join(format!("{start}-test-902.pb.gz"));
    fs::write(&empty, b"").unwrap();

    let o = run(&["spans", d]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("-test-902.pb.gz") && err.contains("no string table"),
        "{err}"
    );

    // Past every horizon but --daily's: the real window rolls up; the empty file is no window
    // and is left where it is, not rolled into an `unknown_service` roll-up.
    let o = run(&[
        "compact", d, "--now", "+100d", "--full", "14d", "--hourly", "90d", "--daily", "400d",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(empty.exists(), "the unreadable file is kept");
    let services: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert!(
        !services.iter().any(|n| n.contains("unknown_service")),
        "{services:?}"
    );
}

#[test]
fn non_utf8_folders_and_windows_are_named_in_the_warning() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = TempDir::new("non-utf8");
    record_checkout(dir.path(), "1.0");
    let d = s(dir.path());
    let good = run_ok(&["spans", d], 0);
    let window = window_files(dir.path()).into_iter().next().unwrap();
    let day = window.parent().unwrap();
    fs::create_dir(dir.path().join(std::ffi::OsStr::from_bytes(b"svc-\xff"))).unwrap();
    fs::copy(
        &window,
        day.join(std::ffi::OsStr::from_bytes(b"1-\xfe-1.pb.gz")),
    )
    .unwrap();
    // Not something the store would hold: no note.
    fs::write(
        day.join(std::ffi::OsStr::from_bytes(b"notes-\xfe.txt")),
        b"x",
    )
    .unwrap();

    let o = run(&["spans", d]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), good, "the answer leaves them out");
    let err = stderr(&o);
    assert!(err.contains("skipped 2 unreadable file(s)"), "{err}");
    assert!(err.matches("name is not UTF-8").count() == 2, "{err}");
    assert!(!err.contains("notes-"), "{err}");

    // --json names them too (JSON holds text: the bytes that are not UTF-8 show as U+FFFD).
    let v = json(&run_ok(&["top", d, "--route", "/checkout", "--json"], 0));
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{v}");
    for (e, want) in skipped.iter().zip(["1-\u{fffd}-1.pb.gz", "svc-\u{fffd}"]) {
        assert!(e["path"].as_str().unwrap().ends_with(want), "{e}");
        assert!(e["error"].as_str().unwrap().contains("not UTF-8"), "{e}");
    }
}
