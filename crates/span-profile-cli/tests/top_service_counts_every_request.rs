//! `top --service`: a route's requests are every request that ended, sampled or not (ADR
//! 0032). 150 `cache.get` requests of 2 ms and 10 `db.query` requests of 80 ms on `/items`, at
//! 100 Hz: most of the short ones get no sample and leave no span record, yet all 160 count.
//! A store written before requests were counted still answers, from the span records, and says
//! that its count holds the sampled requests only.

mod common;

use std::fs;
use std::time::Duration;

use common::*;

fn items_row(d: &str) -> serde_json::Value {
    let v = json(&run_ok(&["top", d, "--service", "cache", "--json"], 0));
    v["by_route"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "/items")
        .unwrap_or_else(|| panic!("no /items row: {v}"))
        .clone()
}

#[test]
fn every_request_counts_and_an_older_store_says_it_counts_the_sampled_ones() {
    let dir = TempDir::new("per-request");
    let truth = record_short_spans(dir.path(), Duration::from_millis(500));
    let d = s(dir.path());
    let requests = truth.cache_spans + truth.db_spans;

    let row = items_row(d);
    assert_eq!(row["requests"].as_u64(), Some(requests), "{row}");
    assert_eq!(row["requests_sampled_only"], false, "{row}");
    let cpu_ns = row["cpu_ns"].as_u64().unwrap();
    assert_eq!(row["cpu_ns_per_request"].as_u64(), Some(cpu_ns / requests));
    let text = run_ok(&["top", d, "--service", "cache"], 0);
    assert!(
        text.contains("requests: every request that ended in the windows)"),
        "{text}"
    );

    // The same windows as a store of an earlier version writes them: no request counts, and
    // no summaries (they would be of the new format).
    for f in window_files(dir.path()) {
        let mut p = span_profile_export::decode_pprof(&fs::read(&f).unwrap()).unwrap();
        p.requests = None;
        fs::write(&f, span_profile_export::encode_pprof(&p)).unwrap();
    }
    for f in summary_files(dir.path()) {
        fs::remove_file(f).unwrap();
    }
    let old = items_row(d);
    let sampled = old["requests"].as_u64().unwrap();
    assert!(
        sampled >= truth.db_spans && sampled < requests,
        "only sampled requests have records: {old}"
    );
    assert_eq!(old["requests_sampled_only"], true, "{old}");
    let text = run_ok(&["top", d, "--service", "cache"], 0);
    assert!(text.contains(&format!("{sampled}*")), "{text}");
    assert!(text.contains("* only the sampled ones"), "{text}");
}
