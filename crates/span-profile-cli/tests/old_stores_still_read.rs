//! Windows written before ADR 0024 carry the resource, stats and span table in a
//! `span-profile.meta=` comment; they still read, and every command answers from them as from
//! the same windows in today's form.

mod common;

use std::io::{Read, Write};
use std::path::Path;

use common::*;
use prost::Message;
use span_profile_export::pprof;
use span_profile_export::store::summary::WindowSummary;

/// Rewrites the window at `path` as the encoder wrote it before ADR 0024: the same pprof
/// message, with the meta document (resource, stats, span table) as a `span-profile.meta=`
/// comment instead of its own field, gzipped; and its summary, which records the file's
/// length, to match.
fn rewrite_the_old_way(path: &Path) {
    let gz = std::fs::read(path).unwrap();
    let profile = span_profile_export::decode_pprof(&gz).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut raw)
        .unwrap();
    // prost keeps only pprof's own fields: the meta field is dropped.
    let mut msg = pprof::Profile::decode(raw.as_slice()).unwrap();
    assert!(msg.comment.is_empty());
    let meta = serde_json::json!({
        "v": 1,
        "resource": profile.resource,
        "stats": profile.stats,
        "spans": profile.spans,
    });
    msg.comment = vec![msg.string_table.len() as i64];
    msg.string_table.push(format!("span-profile.meta={meta}"));
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&msg.encode_to_vec()).unwrap();
    let old = enc.finish().unwrap();
    std::fs::write(path, &old).unwrap();
    let summary = span_profile_export::store::encode_summary(
        &WindowSummary::from_profile(&profile),
        old.len() as u64,
    );
    std::fs::write(span_profile_export::summary_path(path), summary).unwrap();
}

#[test]
fn windows_with_the_meta_comment_answer_as_todays_windows_do() {
    let dir = TempDir::new("old-store");
    record_checkout(dir.path(), "1.0");
    let d = s(dir.path());
    let questions: &[&[&str]] = &[
        &["spans", d, "--json"],
        &["top", d, "--slowest", "pricing.calculate", "--json"],
        &[
            "top",
            d,
            "--trace-id",
            "0000000000000000000000000000feed",
            "--json",
        ],
        &["top", d, "--route", "/checkout", "--json"],
        &["routes", d, "--frame", "parse_date", "--json"],
    ];
    let today: Vec<String> = questions.iter().map(|q| run_ok(q, 0)).collect();

    for w in window_files(dir.path()) {
        rewrite_the_old_way(&w);
        let bytes = std::fs::read(&w).unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_end(&mut raw)
            .unwrap();
        let needle = b"span-profile.meta={";
        assert!(raw.windows(needle.len()).any(|x| x == needle));
    }
    for (q, want) in questions.iter().zip(&today) {
        let o = run(q);
        assert_eq!(o.status.code(), Some(0), "{q:?}: {}", stderr(&o));
        assert_eq!(&stdout(&o), want, "{q:?}");
        assert!(
            !stderr(&o).contains("could not be used"),
            "the rewritten summaries are used: {}",
            stderr(&o)
        );
    }
    // Not vacuous: the old windows hold the spans, with their samples.
    let spans = json(&today[0]);
    assert_eq!(spans.as_array().unwrap().len(), 5, "{spans}");
    let slow = json(&today[1]);
    assert!(slow["samples"].as_u64().unwrap() > 20, "{slow}");
}
