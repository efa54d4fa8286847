//! The file store writes through a temp file and a rename: readers see whole files or none,
//! ignore `.tmp-*` leftovers, and skip (and list) corrupt files instead of failing.

mod common;

use std::fs;
use std::sync::Arc;

use span_profile_core::{ExportError, Exporter, Profile};
use span_profile_export::store::{self, StoreError, StoreFilter};
use span_profile_export::FileStore;

fn window(start_unix_ns: u64, service: &str) -> Profile {
    let mut p = common::checkout_profile();
    p.start_unix_ns = start_unix_ns;
    p.resource.service = service.to_string();
    p
}

fn all_files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(
                    path.strip_prefix(dir)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out.sort();
    out
}

#[test]
fn windows_land_in_service_and_day_directories_with_no_temp_files_left() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let a = window(1_700_000_000_123_456_789, "checkout");
    let b = window(1_700_000_010_000_000_000, "../../etc");
    store.export(Arc::new(a.clone())).unwrap();
    store.export(Arc::new(a.clone())).unwrap();
    store.export(Arc::new(b.clone())).unwrap();

    assert_eq!(
        all_files(dir.path()),
        [
            "_._.._etc/2023-11-14/1700000010000-host-1_pid_42-2.pb.gz",
            "_._.._etc/2023-11-14/1700000010000-host-1_pid_42-2.pb.gz.summary",
            "checkout/2023-11-14/1700000000123-host-1_pid_42-0.pb.gz",
            "checkout/2023-11-14/1700000000123-host-1_pid_42-0.pb.gz.summary",
            "checkout/2023-11-14/1700000000123-host-1_pid_42-1.pb.gz",
            "checkout/2023-11-14/1700000000123-host-1_pid_42-1.pb.gz.summary",
        ]
    );
    let read = store::read(dir.path(), &StoreFilter::default()).unwrap();
    assert!(read.skipped.is_empty(), "{:?}", read.skipped);
    assert_eq!(read.profiles, [a.clone(), a, b]);
}

#[test]
fn temp_files_and_torn_files_are_ignored_or_skipped_never_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let good = store
        .write(&window(1_700_000_000_000_000_000, "checkout"))
        .unwrap();
    let day = good.parent().unwrap();
    let bytes = fs::read(&good).unwrap();
    // What a crash mid-write leaves: a partial temp file. Readers must not see it.
    fs::write(
        day.join(".tmp-1700000000000-host-0-123"),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    // A torn or corrupt .pb.gz (e.g. copied in by hand, or disk corruption) is skipped.
    let torn = day.join("1700000001000-host-0-0.pb.gz");
    fs::write(&torn, &bytes[..bytes.len() / 2]).unwrap();
    let junk = day.join("1700000002000-host-0-0.pb.gz");
    fs::write(&junk, b"junk").unwrap();
    fs::write(day.join("README.txt"), b"not a window").unwrap();

    let read = store::read(dir.path(), &StoreFilter::default()).unwrap();
    assert_eq!(read.profiles.len(), 1);
    let skipped: Vec<_> = read.skipped.iter().map(|s| s.path.clone()).collect();
    assert_eq!(skipped, [torn, junk]);
    assert!(matches!(read.skipped[0].error, StoreError::Decode { .. }));
    assert!(read.skipped[0]
        .error
        .to_string()
        .contains("1700000001000-host-0-0.pb.gz"));
}

#[test]
fn filters_apply_to_names_before_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let day = 86_400 * 1_000_000_000u64;
    let t0 = 1_700_000_000_000_000_000;
    for (t, svc) in [
        (t0, "checkout"),
        (t0 + day, "checkout"),
        (t0 + 2 * day, "checkout"),
        (t0, "cart"),
    ] {
        store.write(&window(t, svc)).unwrap();
    }
    // A corrupt file outside the filter is never opened, so it is not reported.
    let cart_day = dir.path().join("cart/2023-11-14");
    fs::write(cart_day.join("1700000000500-x-0.pb.gz"), b"junk").unwrap();

    let filter = StoreFilter {
        service: Some("checkout".into()),
        since_unix_ns: Some(t0 + 1),
        until_unix_ns: Some(t0 + 2 * day),
    };
    let read = store::read(dir.path(), &filter).unwrap();
    assert!(read.skipped.is_empty());
    let starts: Vec<_> = read.profiles.iter().map(|p| p.start_unix_ns).collect();
    assert_eq!(starts, [t0 + day]);

    let listed = store::list(dir.path(), &StoreFilter::default())
        .unwrap()
        .files;
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[0].start_unix_ms, t0 / 1_000_000);
    assert!(listed
        .windows(2)
        .all(|w| w[0].start_unix_ms <= w[1].start_unix_ms));
}

#[test]
fn errors_name_the_path_and_what_to_check() {
    let dir = tempfile::tempdir().unwrap();
    // The store's root is a file, so no directory can be created under it.
    let root = dir.path().join("not-a-dir");
    fs::write(&root, b"").unwrap();
    let store = FileStore::new(&root);
    let err = store.export(Arc::new(window(0, "svc"))).unwrap_err();
    let ExportError::InternalFailure(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(
        msg.contains("not-a-dir") && msg.contains("disk is not full"),
        "{msg}"
    );

    let missing = store::read(dir.path().join("missing"), &StoreFilter::default());
    assert!(matches!(missing, Err(StoreError::Io { .. })));

    store.shutdown().unwrap();
    assert_eq!(
        store.export(Arc::new(window(0, "svc"))),
        Err(ExportError::AlreadyShutdown)
    );
}
