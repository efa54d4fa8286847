//! Standard output that cannot be written (a reader that left, as in `span-profile spans | head`,
//! or a full disk) ends the command with exit 4, as the help promises, and never a panic.

mod common;

use std::process::{Command, Stdio};

use common::*;

/// Each command that answers from a store, text and `--json`.
fn commands<'a>(d: &'a str, svg: &'a str) -> Vec<Vec<&'a str>> {
    let mut all = Vec::new();
    for cmd in [
        vec!["spans", d],
        vec!["top", d, "--slowest", "pricing.calculate"],
        vec!["routes", d, "--frame", "parse_date"],
        vec![
            "flame",
            d,
            "--slowest",
            "pricing.calculate",
            "--output",
            svg,
        ],
        vec!["compact", d, "--dry-run"],
    ] {
        let mut json = cmd.clone();
        json.push("--json");
        all.push(cmd);
        all.push(json);
    }
    all
}

fn run_into(args: &[&str], stdout: Stdio) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_span-profile"))
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("run span-profile")
}

#[test]
fn a_closed_pipe_exits_4_quietly() {
    let dir = TempDir::new("closed-pipe");
    record_checkout(dir.path(), "1.0");
    let svg = dir.path().join("out.svg");
    for args in commands(s(dir.path()), s(&svg)) {
        // The read end is closed before the command starts: its first write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = run_into(&args, Stdio::from(writer));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            !err.contains("could not write"),
            "{args:?} reports a closed pipe: {err}"
        );
    }
}

#[test]
fn a_full_disk_exits_4_and_says_so() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("no /dev/full here: skipped");
        return;
    };
    let dir = TempDir::new("full-disk");
    record_checkout(dir.path(), "1.0");
    let args = ["spans", s(dir.path())];
    let out = run_into(&args, Stdio::from(full));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("could not write the output") && err.contains("No space left"),
        "{err}"
    );
}
