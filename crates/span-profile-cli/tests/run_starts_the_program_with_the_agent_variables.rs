//! `span-profile run`: the flags become the agent's variables, span_profile's bootstrap
//! directory goes first on PYTHONPATH, and the program replaces the command, so its exit status
//! and a death by signal are the command's. (The agent starting in a real app is the Python
//! spec test_zero_code_run.py.)

use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Output};

fn run(bootstrap: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_span-profile"))
        .arg("run")
        .arg("--bootstrap")
        .arg(bootstrap)
        .args(args)
        .env("PYTHONPATH", "/earlier/dir")
        .env("SPAN_PROFILE_WINDOW_S", "5")
        .output()
        .expect("the span-profile binary runs")
}

#[test]
fn flags_become_variables_and_the_bootstrap_goes_first() {
    let dir = tempfile_dir("vars");
    let out = run(
        &dir,
        &[
            "--output",
            "/data/profiles",
            "--service",
            "shop",
            "--rate",
            "250",
            "--",
            "sh",
            "-c",
            "echo \"$SPAN_PROFILE_OUTPUT|$SPAN_PROFILE_SERVICE|$SPAN_PROFILE_SAMPLE_RATE_HZ|$SPAN_PROFILE_WINDOW_S|$PYTHONPATH\"",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let expected = format!("/data/profiles|shop|250|5|{}:/earlier/dir\n", dir.display());
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
}

#[test]
fn the_exit_status_passes_through() {
    let dir = tempfile_dir("exit");
    let out = run(&dir, &["--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
}

#[test]
fn a_death_by_signal_passes_through() {
    let dir = tempfile_dir("signal");
    let out = run(&dir, &["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.signal(), Some(15), "{out:?}");
}

#[test]
fn a_rate_out_of_range_is_a_usage_error() {
    let dir = tempfile_dir("rate");
    let out = run(&dir, &["--rate", "0", "--", "sh", "-c", "exit 0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate"));
}

#[test]
fn a_missing_program_says_what_to_check() {
    let dir = tempfile_dir("missing");
    let out = run(&dir, &["--", "no-such-program-span-profile"]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("could not start no-such-program-span-profile") && err.contains("PATH"),
        "{err}"
    );
}

/// A fresh directory under the target's tmp dir.
fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("run-{name}"));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir
}
