//! Issue 9: a writer killed mid-write leaves `.tmp-*` files (and, between its two renames, a
//! summary without its window). The first write of a new `FileStore` removes those older than
//! `STALE_AFTER`, counts them, and leaves recent ones (a live writer's) alone; listing never
//! shows any of them.

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use span_profile_core::{Profile, Resource};
use span_profile_export::store::{self, StoreFilter};
use span_profile_export::{FileStore, StaleFiles, STALE_AFTER};

fn aged(path: &Path, age: Duration) {
    fs::write(path, b"left by a killed writer").unwrap();
    let f = fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

#[test]
fn the_first_write_removes_old_temp_files_and_orphan_summaries() {
    let dir = tempfile::tempdir().unwrap();
    let day = dir.path().join("checkout/2023-11-14");
    fs::create_dir_all(&day).unwrap();
    let old = STALE_AFTER + Duration::from_secs(60);
    let recent = Duration::from_secs(5);
    aged(&day.join(".tmp-1700000000000-host-0-12"), old);
    aged(&day.join(".tmp-1700000000000-host-0-13.summary"), old);
    aged(&day.join("1700000000000-host-0-14.pb.gz.summary"), old);
    aged(&day.join(".tmp-1700000000000-host-0-15"), recent);
    aged(&day.join("1700000000000-host-0-16.pb.gz.summary"), recent);
    // Other files, whatever their age, are not the store's to remove.
    aged(&day.join("notes.txt"), old);

    let store = FileStore::new(dir.path());
    assert_eq!(store.stale_files_removed(), StaleFiles::default());
    let window = Profile::empty(
        Resource::default(),
        1_700_000_000_000_000_000,
        60_000_000_000,
        10_000_000,
    );
    store.write(&window).unwrap();
    let removed = store.stale_files_removed();
    assert_eq!((removed.temp_files, removed.orphan_summaries), (2, 1));
    let mut left: Vec<String> = fs::read_dir(&day)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            ".tmp-1700000000000-host-0-15",
            "1700000000000-host-0-16.pb.gz.summary",
            "notes.txt"
        ]
    );

    // Once per store: later writes do not sweep again; an explicit sweep can.
    aged(&day.join(".tmp-1700000000000-host-0-17"), old);
    store.write(&window).unwrap();
    assert_eq!(store.stale_files_removed().temp_files, 2);
    let now = store.remove_stale_files(Duration::ZERO);
    assert_eq!((now.temp_files, now.orphan_summaries), (2, 1));
    assert_eq!(store.stale_files_removed().temp_files, 4);

    let read = store::read(dir.path(), &StoreFilter::default()).unwrap();
    assert_eq!(read.profiles.len(), 2);
    assert!(read.skipped.is_empty());
}
