//! Gzip bombs in a store are skipped as too large, each named once, and the command answers
//! from the other windows; the decode memory cap (256 MiB) holds for the whole command, not
//! for each decoding thread.

mod common;

use std::fs;
use std::path::PathBuf;

use common::*;
use nix::sys::resource::{getrusage, UsageWho};

const MIB: u64 = 1 << 20;
/// `span_profile_export::MAX_DECOMPRESSED_LEN`.
const CAP: u64 = 256 * MIB;

/// The largest peak RSS of the children run so far, in bytes (Linux reports KiB).
fn children_peak_rss() -> u64 {
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap();
    u64::try_from(usage.max_rss()).unwrap() * 1024
}

#[test]
fn bombs_are_skipped_and_the_command_stays_under_one_cap() {
    let dir = TempDir::new("bombs");
    record_checkout(dir.path(), "1.0");
    let d = s(dir.path());
    let top = ["top", d, "--route", "/checkout"];
    let good = run_ok(&top, 0);
    let mut good_json = json(&run_ok(&[&top[..], &["--json"]].concat(), 0));
    let baseline = children_peak_rss();

    let window = window_files(dir.path()).into_iter().next().unwrap();
    let day = window.parent().unwrap().to_path_buf();
    // Named as the real window is, with other sequence numbers: the same start time, so that
    // compact's horizons treat them as it.
    let name = window.file_name().unwrap().to_str().unwrap();
    let (start, _) = name.split_once('-').unwrap();
    // Two bombs whose trailer lies (a reader must inflate them to find out) and one that
    // states its size; each inflates to more than the cap.
    let bombs: Vec<PathBuf> = [
        (901, gzip_bomb(300 * MIB, 1000)),
        (902, gzip_bomb(300 * MIB, 1000)),
        (903, gzip_bomb(300 * MIB, (300 * MIB) as u32)),
    ]
    .into_iter()
    .map(|(seq, bytes)| {
        assert!(bytes.len() < 2 * MIB as usize, "{}", bytes.len());
        let p = day.join(format!("{start}-bomb-{seq}.pb.gz"));
        fs::write(&p, bytes).unwrap();
        p
    })
    .collect();

    for threads in ["1", "3", "8"] {
        let o = run(&[&top[..], &["--threads", threads]].concat());
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert_eq!(
            stdout(&o),
            good,
            "--threads {threads}: the answer leaves the bombs out"
        );
        assert!(err.contains("skipped 3 unreadable file(s)"), "{err}");
        for b in &bombs {
            assert_eq!(err.matches(s(b)).count(), 1, "{b:?} named once: {err}");
        }
        assert_eq!(
            err.matches("decompresses to more than 268435456 bytes")
                .count(),
            3,
            "{err}"
        );
    }
    let peak = children_peak_rss();
    assert!(
        peak < baseline + CAP + 48 * MIB,
        "peak RSS {} MiB with bombs (without: {} MiB); the cap is {} MiB for the whole command",
        peak / MIB,
        baseline / MIB,
        CAP / MIB
    );

    // --json lists them, and otherwise answers as without them.
    let mut v = json(&run_ok(
        &[&top[..], &["--json", "--threads", "3"]].concat(),
        0,
    ));
    let skipped: Vec<String> = v["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert!(e["error"].as_str().unwrap().contains("decompresses"), "{e}");
            e["path"].as_str().unwrap().to_owned()
        })
        .collect();
    let want: Vec<String> = bombs.iter().map(|b| s(b).to_owned()).collect();
    assert_eq!(skipped, want);
    assert_eq!(good_json["skipped"], serde_json::json!([]));
    v.as_object_mut().unwrap().remove("skipped");
    good_json.as_object_mut().unwrap().remove("skipped");
    assert_eq!(v, good_json);

    // compact leaves them where they are and rolls up only the real window.
    let o = run(&[
        "compact", d, "--now", "+100d", "--full", "14d", "--hourly", "90d", "--daily", "400d",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for b in &bombs {
        assert!(b.exists(), "{b:?} is left in place");
    }
    assert!(
        stderr(&o).contains("skipped 3 unreadable file(s)"),
        "{}",
        stderr(&o)
    );
}
