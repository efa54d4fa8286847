//! Encoding a busy window holds little beyond its output. In a traced service nearly every
//! sample names a span of its own, so a window of tens of thousands of samples has tens of
//! thousands of distinct trace and span ids. The export runs while the window and the next
//! one's buffers are both live, so what the encoder holds at once adds to the process's peak.
//! The encoder keeps each id once, as an id (printed only as it is written), and borrows every
//! other string from the profile: no per-sample rows and no formatted copies.

use std::sync::Arc;

use span_profile_core::{
    Frame, Profile, ProfileSample, Resource, SpanContext, SpanId, SpanRecord, Stack, TraceId,
};
use span_profile_export::store::summary::{SummaryScope, WindowSummary};
use span_profile_export::store::{self, StoreFilter};
use span_profile_export::{decode_pprof, encode_pprof, write_pprof, FileStore};
use span_profile_test::counting_allocator;

counting_allocator!(ALLOC);

const SAMPLES: u64 = 20_000;

/// A window whose every sample is in a span, and a trace, of its own, each span a local root
/// with its record in the window.
fn busy_window() -> Profile {
    let mut p = Profile::empty(
        Resource::default(),
        1_700_000_000_000_000_000,
        60_000_000_000,
        10_000_000,
    );
    p.frames = (0..30)
        .map(|i| Frame::new(format!("f{i}"), "app.py", i))
        .collect();
    p.stacks = vec![Stack {
        frames: (0..30).collect(),
        truncated: false,
    }];
    let route: Arc<str> = "/orders/{id}".into();
    let thread: Arc<str> = "worker-1".into();
    let name: Arc<str> = "GET /orders/{id}".into();
    for i in 1..=SAMPLES {
        let trace_id = TraceId::from_u128(u128::from(i) << 64 | 0xabc).unwrap();
        let span_id = SpanId::from_u64(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).unwrap();
        let span = SpanContext {
            trace_id,
            span_id,
            local_root_span_id: span_id,
        };
        p.samples.push(
            ProfileSample::new(0, route.clone(), thread.clone())
                .with_span(Some(span))
                .with_cpu(1, 10_000_000)
                .with_wall(1, 10_000_000),
        );
        p.spans.push(
            SpanRecord::new(trace_id, span_id, span_id, name.clone(), i)
                .with_route(Some(route.clone()))
                .with_end_unix_ns(Some(i + 1)),
        );
    }
    p
}

#[test]
fn encoding_a_busy_window_holds_each_id_once_and_no_copy_of_its_samples() {
    let p = busy_window();
    let (written, peak) = ALLOC.peak_bytes(|| write_pprof(&p, std::io::sink()).map(drop));
    written.unwrap();

    // Each sample brings a distinct trace id and span id, gathered in tables sized exactly
    // (16 bytes a trace id, 8 a span id and 8 its local root's, before duplicates go) and
    // then sorted. Besides those the encoder holds its output chunk, the meta comment's
    // writer and gzip's state: a few hundred kilobytes whatever the window. Rows of string
    // indices per sample, or the ids formatted as strings and hashed, would hold several
    // times the ids' size.
    let allowed = SAMPLES as usize * 48 + 512 * 1024;
    assert!(
        peak as usize <= allowed,
        "encoding {SAMPLES} samples held {peak} bytes at its peak; the bound is {allowed}"
    );
}

#[test]
fn the_streamed_file_is_the_encoded_one_and_lossless() {
    let p = busy_window();
    let file = write_pprof(&p, Vec::new()).unwrap();
    assert_eq!(file, encode_pprof(&p));
    assert_eq!(decode_pprof(&file).unwrap(), p);
}

#[test]
fn the_file_store_writes_a_busy_window_without_holding_its_file() {
    let p = busy_window();
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::new(dir.path());
    let (written, peak) = ALLOC.peak_bytes(|| store.write(&p));
    written.unwrap();

    // The encoder's bound above, plus the file's write buffer (64 KiB), the summary and the
    // paths. Encoded into memory first, the file alone would add about 1 MB here. The summary
    // (format 2) keeps every span of the window (id, start, end, two counts) and every
    // request (route, id): with its span-record index and its encoded columns, at most 128
    // bytes a span while it is built and written (each sample here has its own span).
    let allowed = SAMPLES as usize * (48 + 128) + 512 * 1024 + 128 * 1024;
    assert!(
        peak as usize <= allowed,
        "writing {SAMPLES} samples held {peak} bytes at its peak; the bound is {allowed}"
    );
    let listed = store::list(dir.path(), &StoreFilter::default())
        .unwrap()
        .files;
    assert_eq!(listed.len(), 1);
    assert_eq!(store::read_window(&listed[0]).unwrap(), p);
    // The summary records the length of the file as streamed.
    let summary = store::read_summary(&listed[0], &SummaryScope::Whole).unwrap();
    assert_eq!(summary, Some(WindowSummary::from_profile(&p)));
}
