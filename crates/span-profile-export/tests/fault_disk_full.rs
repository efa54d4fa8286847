//! Fault: the disk fills while the file store writes.
//!
//! As root, the store lives on a 1 MiB tmpfs, so writes fail with a real ENOSPC; elsewhere the
//! writer runs in a child process with `RLIMIT_FSIZE` (`prlimit --fsize`, SIGXFSZ ignored), so a
//! window larger than the limit fails mid-file with EFBIG. Either way:
//!
//! - the failing write returns an error that names the file and says what to check;
//! - no `.tmp-*` file and no torn `.pb.gz` is left behind;
//! - every window written before the failure reads back, equal to what was written;
//! - once there is room again, writing works again;
//! - through the profiler, failed exports are counted (`ProfilerStats::export_errors`, and
//!   `WindowStats::export_errors` of the next window that gets out), sampling goes on, and
//!   no count is lost.

mod fault_common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fault_common::{files_named, window};
use span_profile_core::{Profile, Profiler};
use span_profile_export::store::{self, StoreFilter};
use span_profile_export::{FileStore, FILE_SUFFIX, TEMP_PREFIX};
use span_profile_test::FakeWalker;

/// A tmpfs mounted for the test, unmounted on drop.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size` (e.g. "1m") at `path`; `None` if that is not allowed here.
    fn mount(path: &Path, size: &str) -> Option<Self> {
        if std::env::var_os("SPAN_PROFILE_FAULT_NO_TMPFS").is_some() {
            return None;
        }
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

/// Writes growing windows until one fails; checks the error and what is left on disk. Returns
/// the windows that were written.
fn fill_until_a_write_fails(dir: &Path) -> Vec<Profile> {
    let store = FileStore::new(dir);
    let mut written = Vec::new();
    let error = (0..64u64)
        .find_map(|i| {
            let p = window("disk-full", i, 24 * (i as usize + 1));
            match store.write(&p) {
                Ok(_) => {
                    written.push(p);
                    None
                }
                Err(e) => Some(e.to_string()),
            }
        })
        .expect("a write fails before 64 windows");
    eprintln!("after {} windows the write failed: {error}", written.len());
    assert!(!written.is_empty(), "the first windows fit");
    assert!(
        error.contains(&dir.join("disk-full").display().to_string()),
        "the error names the file: {error}"
    );
    assert!(
        error.contains("disk is not full"),
        "the error says what to check: {error}"
    );
    assert_no_debris(dir, &written);
    written
}

/// No temp file, no torn window, and every written window reads back as written.
fn assert_no_debris(dir: &Path, written: &[Profile]) {
    let temps = files_named(dir, &|n| n.starts_with(TEMP_PREFIX));
    assert!(temps.is_empty(), "temp files left: {temps:?}");
    let read = store::read(dir, &StoreFilter::default()).unwrap();
    assert!(
        read.skipped.is_empty(),
        "torn or unreadable: {:?}",
        read.skipped
    );
    assert_eq!(read.profiles.len(), written.len());
    for (got, want) in read.profiles.iter().zip(written) {
        assert_eq!(got, want);
    }
}

#[test]
fn a_full_disk_fails_the_write_with_the_path_and_keeps_earlier_windows() {
    let mount = tempfile::tempdir().unwrap();
    match SmallDisk::mount(mount.path(), "1m") {
        Some(disk) => {
            let written = fill_until_a_write_fails(&disk.path);
            // Room again: writing resumes.
            let first = files_named(&disk.path, &|n| n.ends_with(FILE_SUFFIX));
            for f in &first {
                fs::remove_file(f).unwrap();
            }
            let store = FileStore::new(&disk.path);
            let again = window("disk-full", 100, 24);
            store
                .write(&again)
                .expect("writes resume once there is room");
            assert_no_debris(&disk.path, &[again]);
            drop(written);
        }
        None => {
            // Not root: the same checks in a child process whose file size is limited.
            let status = Command::new("sh")
                .arg("-c")
                .arg(r#"trap "" XFSZ; exec prlimit --fsize=131072 -- "$0" "$@""#)
                .arg(std::env::current_exe().unwrap())
                .args(["--exact", "fsize_limited_child", "--ignored", "--nocapture"])
                .env("SPAN_PROFILE_FAULT_DIR", mount.path())
                .status()
                .expect("sh and prlimit run");
            assert!(status.success(), "the child's checks failed: {status}");
        }
    }
}

/// Run by the test above, in a child with a file size limit, when tmpfs cannot be mounted.
#[test]
#[ignore = "helper: runs in a child process with RLIMIT_FSIZE"]
fn fsize_limited_child() {
    let Some(dir) = std::env::var_os("SPAN_PROFILE_FAULT_DIR") else {
        return;
    };
    fill_until_a_write_fails(Path::new(&dir));
}

#[test]
fn through_the_profiler_failed_exports_are_counted_and_sampling_goes_on() {
    let mount = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(mount.path(), "256k") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    // Fill the disk completely.
    let filler = disk.path.join("filler");
    let chunk = vec![0xa5u8; 4096];
    {
        use std::io::Write;
        let mut f = fs::File::create(&filler).unwrap();
        while f.write_all(&chunk).is_ok() {}
    }
    let store = FileStore::new(disk.path.join("store"));
    let walker = FakeWalker::threads(2, 3);
    let walks = walker.walk_count();
    let profiler = Profiler::builder()
        .with_service("disk-full")
        .with_sample_rate_hz(100)
        .with_window(Duration::from_millis(100))
        .with_walker(walker)
        .with_exporter(store)
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let full = profiler.stats();
    assert!(
        full.export_errors >= 2,
        "failed exports are counted: {full:?}"
    );
    assert_eq!(full.exported_windows, 0, "{full:?}");
    fs::remove_file(&filler).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let stats = profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    assert!(
        walks.load(std::sync::atomic::Ordering::Relaxed) > full.ticks,
        "sampling went on"
    );
    assert!(stats.exported_windows >= 2, "exports resumed: {stats:?}");
    assert_eq!(
        stats.export_errors,
        stats.windows - stats.exported_windows,
        "one error per lost window: {stats:?}"
    );
    let read = store::read(disk.path.join("store"), &StoreFilter::default()).unwrap();
    assert!(read.skipped.is_empty(), "{:?}", read.skipped);
    assert_eq!(read.profiles.len() as u64, stats.exported_windows);
    let reported: u64 = read.profiles.iter().map(|p| p.stats.export_errors).sum();
    assert_eq!(
        reported, stats.export_errors,
        "every failed export is reported in a stored window"
    );
    assert!(files_named(&disk.path, &|n| n.starts_with(TEMP_PREFIX)).is_empty());
    eprintln!(
        "{} windows, {} exported, {} export errors, all reported in the stored windows",
        stats.windows, stats.exported_windows, stats.export_errors
    );
}
