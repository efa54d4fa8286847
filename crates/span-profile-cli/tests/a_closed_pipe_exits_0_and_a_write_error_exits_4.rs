//! A reader that leaves (`span-profile spans | head`) ends the command quietly with exit 0, as
//! `head` expects; standard output that cannot be written (a full disk) ends it with exit 4
//! and a message, as the help promises. Never a panic (exit 101).

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
fn a_closed_pipe_exits_0_quietly() {
    let dir = TempDir::new("closed-pipe");
    record_checkout(dir.path(), "1.0");
    let svg = dir.path().join("out.svg");
    for args in commands(s(dir.path()), s(&svg)) {
        // The read end is closed before the command starts: its first write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = run_into(&args, Stdio::from(writer));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
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

#[test]
fn a_reader_that_leaves_mid_output_with_stderr_gone_too_ends_with_0() {
    use std::io::Read as _;
    let dir = TempDir::new("head");
    record_checkout(dir.path(), "1.0");
    // A bad file, so that the command has a warning to write to the closed stderr.
    let window = window_files(dir.path()).into_iter().next().unwrap();
    std::fs::write(window.with_file_name("1-bad-9.pb.gz"), b"").unwrap();
    let args = [
        "flame",
        s(dir.path()),
        "--slowest",
        "pricing.calculate",
        "--output",
        "-",
    ];
    let whole = run_into(&args, Stdio::piped());
    assert_eq!(whole.status.code(), Some(0));
    // More than the pipe holds (shrunk to one page): the command is still writing when the
    // reader leaves.
    const PIPE: usize = 4096;
    assert!(whole.stdout.len() > 2 * PIPE, "{}", whole.stdout.len());
    let (err_reader, err_writer) = std::io::pipe().unwrap();
    drop(err_reader);
    let (mut reader, writer) = std::io::pipe().unwrap();
    {
        use nix::fcntl::{fcntl, FcntlArg};
        use std::os::fd::AsRawFd as _;
        let size = fcntl(writer.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(PIPE as i32)).unwrap();
        assert!(size as usize <= PIPE, "{size}");
    }
    let mut child = {
        // The command (and its copy of the write ends) is dropped here: only the child holds
        // them, so the reader's leaving is seen.
        Command::new(env!("CARGO_BIN_EXE_span-profile"))
            .args(args)
            .stdout(writer)
            .stderr(err_writer)
            .spawn()
            .expect("run span-profile")
    };
    let mut first = [0u8; 5];
    reader.read_exact(&mut first).unwrap();
    drop(reader);
    let status = child.wait().unwrap();
    assert_eq!(&first, b"<?xml");
    assert_eq!(
        status.code(),
        Some(0),
        "after {} of {} bytes",
        first.len(),
        whole.stdout.len()
    );
}

#[test]
fn a_full_disk_exits_4_for_every_command() {
    let dir = TempDir::new("full-disk-all");
    record_checkout(dir.path(), "1.0");
    let svg = dir.path().join("out.svg");
    for args in commands(s(dir.path()), s(&svg)) {
        let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            eprintln!("no /dev/full here: skipped");
            return;
        };
        let out = run_into(&args, Stdio::from(full));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains("No space left"), "{args:?}: {err}");
    }
}
