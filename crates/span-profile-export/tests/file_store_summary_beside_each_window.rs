//! Each window the file store writes has a summary beside it: listing never shows summaries
//! as windows, a summary reads back as the window's summary, and one that is missing, corrupt,
//! cut short or written for another version of its window is reported as such (`None` or an
//! error), never as an answer.

mod common;

use std::fs;

use span_profile_export::store::summary::{SummaryScope, WindowSummary};
use span_profile_export::store::{self, StoreError, StoreFilter};
use span_profile_export::{summary_path, FileStore, SUMMARY_SUFFIX};

#[test]
fn a_window_reads_back_with_its_summary() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let p = common::checkout_profile();
    let path = store.write(&p).unwrap();
    let sidecar = summary_path(&path);
    assert!(sidecar.to_string_lossy().ends_with(".pb.gz.summary"));
    let sidecar_len = fs::metadata(&sidecar).unwrap().len();
    assert!(sidecar_len < fs::metadata(&path).unwrap().len());

    let listed = store::list(dir.path(), &StoreFilter::default())
        .unwrap()
        .files;
    assert_eq!(listed.len(), 1, "the summary is not a window: {listed:?}");
    assert_eq!(listed[0].path, path);
    let summary = store::read_summary(&listed[0], &SummaryScope::Whole)
        .unwrap()
        .unwrap();
    assert_eq!(summary, WindowSummary::from_profile(&p));
    assert!(store::read(dir.path(), &StoreFilter::default())
        .unwrap()
        .skipped
        .is_empty());
}

#[test]
fn missing_corrupt_cut_or_stale_summaries_are_not_answers() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let path = store.write(&common::checkout_profile()).unwrap();
    let sidecar = summary_path(&path);
    let good = fs::read(&sidecar).unwrap();
    let file = || {
        store::list(dir.path(), &StoreFilter::default())
            .unwrap()
            .files
            .remove(0)
    };

    fs::write(&sidecar, &good[..good.len() - 3]).unwrap();
    let e = store::read_summary(&file(), &SummaryScope::Whole).unwrap_err();
    assert!(matches!(e, StoreError::Summary { .. }), "{e}");
    assert!(
        e.to_string().contains("decode its window file instead"),
        "{e}"
    );

    fs::write(&sidecar, b"\x1f\x8b garbage").unwrap();
    assert!(matches!(
        store::read_summary(&file(), &SummaryScope::Whole),
        Err(StoreError::Summary { .. })
    ));

    // The window file replaced by another one of a different length.
    fs::write(&sidecar, &good).unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(b"tail");
    fs::write(&path, &bytes).unwrap();
    let e = store::read_summary(&file(), &SummaryScope::Whole).unwrap_err();
    assert!(matches!(e, StoreError::StaleSummary { .. }), "{e}");

    fs::remove_file(&sidecar).unwrap();
    assert!(store::read_summary(&file(), &SummaryScope::Whole)
        .unwrap()
        .is_none());

    // A summary whose window is gone is not listed.
    fs::write(&sidecar, &good).unwrap();
    fs::remove_file(&path).unwrap();
    let listing = store::list(dir.path(), &StoreFilter::default()).unwrap();
    assert!(listing.files.is_empty() && listing.skipped.is_empty());
    assert!(sidecar.to_string_lossy().ends_with(SUMMARY_SUFFIX));
}
