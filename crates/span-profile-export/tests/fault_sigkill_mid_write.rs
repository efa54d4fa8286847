//! Fault: the process is killed with SIGKILL while the file store writes.
//!
//! A child process (this test binary, re-run on an ignored helper test) writes large windows
//! in a loop; the parent kills it with SIGKILL at staggered moments, several times over into
//! the same store. Afterwards the store reads cleanly: every `.pb.gz` decodes to exactly the
//! window that was written (no torn file), `.tmp-*` files of the killed writers are ignored by
//! listing and reading, and a new writer goes on writing beside them.

mod fault_common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fault_common::{files_named, window};
use span_profile_export::store::{self, StoreFilter};
use span_profile_export::{FileStore, FILE_SUFFIX, TEMP_PREFIX};

const KIB: usize = 512;

fn finished(dir: &Path) -> usize {
    files_named(dir, &|n| n.ends_with(FILE_SUFFIX)).len()
}

#[test]
fn a_writer_killed_mid_write_leaves_no_torn_window() {
    let dir = tempfile::tempdir().unwrap();
    let rounds = 8;
    for round in 0..rounds {
        let before = finished(dir.path());
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sigkill_child_writer",
                "--ignored",
                "--nocapture",
            ])
            .env("SPAN_PROFILE_FAULT_DIR", dir.path())
            .env("SPAN_PROFILE_FAULT_ROUND", round.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill at the moment a temp file shows up (the writer is between create and rename),
        // or, on odd rounds, at a staggered moment after its first finished window.
        let temps_before = files_named(dir.path(), &|n| n.starts_with(TEMP_PREFIX)).len();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(
                Instant::now() < deadline,
                "the writer wrote nothing in 60 s"
            );
            if round % 2 == 0 {
                let temps = files_named(dir.path(), &|n| n.starts_with(TEMP_PREFIX)).len();
                if temps > temps_before {
                    break;
                }
            } else if finished(dir.path()) > before {
                std::thread::sleep(Duration::from_millis(7 + 23 * round));
                break;
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }

    let temps = files_named(dir.path(), &|n| n.starts_with(TEMP_PREFIX));
    let windows = finished(dir.path());
    let read = store::read(dir.path(), &StoreFilter::default()).unwrap();
    assert!(read.skipped.is_empty(), "torn: {:?}", read.skipped);
    assert_eq!(read.profiles.len(), windows, "every finished file reads");
    for p in &read.profiles {
        // The child numbers its windows round * 1000 + i and puts i + 1 in the sample count.
        let i = p.samples[0].wall_samples - 1;
        assert_eq!(*p, window("sigkill", i, KIB), "window {i} reads as written");
    }
    // A new writer beside the killed writers' debris.
    let store = FileStore::new(dir.path());
    store.write(&window("sigkill", 99_999, 4)).unwrap();
    let read = store::read(dir.path(), &StoreFilter::default()).unwrap();
    assert_eq!(read.profiles.len(), windows + 1);
    assert!(read.skipped.is_empty());
    eprintln!(
        "{rounds} kills: {windows} whole windows, {} temp files left by killed writers (ignored)",
        temps.len()
    );
}

/// Run by the test above in a child process: writes windows until it is killed.
#[test]
#[ignore = "helper: runs in a child process until SIGKILL"]
fn sigkill_child_writer() {
    let Some(dir) = std::env::var_os("SPAN_PROFILE_FAULT_DIR") else {
        return;
    };
    let round: u64 = std::env::var("SPAN_PROFILE_FAULT_ROUND")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let store = FileStore::new(Path::new(&dir));
    for i in 0..10_000 {
        store
            .write(&window("sigkill", round * 1000 + i, KIB))
            .unwrap();
    }
}
