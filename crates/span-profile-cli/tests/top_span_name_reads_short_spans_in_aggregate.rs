//! `top --span-name NAME`: every span of that name in the selection, in aggregate, read
//! window by window. 150 `cache.get` spans of 2 ms at 100 Hz mostly get no sample each, but
//! together get about 150 × 2 ms / 10 ms; 10 `db.query` spans of 80 ms are each sampled, so
//! their count and durations are complete.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;

/// `top --span-name NAME --json` with `extra`.
fn top(d: &str, name: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["top", d, "--span-name", name, "--json"];
    args.extend(extra);
    json(&run_ok(&args, 0))
}

/// (own samples, samples with descendants) of each stored span named `name`, from `spans`.
fn listed(d: &str, name: &str) -> Vec<(u64, u64)> {
    let v = json(&run_ok(
        &["spans", d, "--name", name, "--limit", "100000", "--json"],
        0,
    ));
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["own_samples"].as_u64().unwrap(),
                s["samples"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Leaf frame -> samples, from a report's `frames`.
fn leaves(v: &serde_json::Value) -> HashMap<String, u64> {
    v["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_string(),
                f["self_samples"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn short_spans_are_counted_and_partitioned_in_aggregate() {
    let dir = TempDir::new("span-name");
    let truth = record_short_spans(dir.path(), Duration::from_millis(500));
    let d = s(dir.path());
    assert!(
        count_files(dir.path()) >= 4,
        "the spans are spread over windows"
    );

    let cache = top(d, "cache.get", &[]);
    let samples = cache["samples"].as_u64().unwrap();
    // Every sample taken in a cache.get span: each span's own samples, as `spans` counts them.
    let stored = listed(d, "cache.get");
    assert_eq!(samples, stored.iter().map(|s| s.0).sum::<u64>(), "{cache}");
    // The stack is set before each span and reset after it: every sample has the leaf
    // cache_get, and the partition sums to the samples.
    assert_eq!(
        leaves(&cache),
        HashMap::from([("cache_get".into(), samples)])
    );
    assert_eq!(cache["other_samples"], 0, "{cache}");
    // In aggregate: about the spans' time over the period (the test's own clock). The
    // sampler loses ticks on a loaded machine, so the lower bound is loose.
    let expected: f64 = truth.cache_ns.iter().sum::<u64>() as f64 / 10e6;
    assert!(
        (0.3 * expected..=1.3 * expected).contains(&(samples as f64)),
        "{samples} samples against {expected:.1} expected: {cache}"
    );
    // Most spans got no sample, so most have no record; each one left out is counted once
    // among the windows' unsampled spans (of any name: here also any db span missed).
    let spans = cache["spans"].as_u64().unwrap();
    assert_eq!(spans, stored.len() as u64, "{cache}");
    assert!(spans < truth.cache_spans / 2, "{cache}");
    let db_stored = listed(d, "db.query").len() + listed(d, "db.decode").len();
    assert_eq!(
        cache["unsampled_spans"].as_u64().unwrap(),
        (truth.cache_spans - spans) + (2 * truth.db_spans - db_stored as u64),
        "{cache}"
    );
    // The spans with a record are at least 2 ms each, and shorter than the slack around them.
    let p50 = cache["duration_p50_ns"].as_u64().unwrap();
    let max = cache["duration_max_ns"].as_u64().unwrap();
    assert!(p50 >= 2_000_000, "{cache}");
    assert!(max <= *truth.cache_ns.iter().max().unwrap(), "{cache}");

    // The text report says what it counted, and that spans with no sample are not stored.
    let text = run_ok(&["top", d, "--span-name", "cache.get"], 0);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!("spans cache.get: {spans} ended span(s) -> {samples} samples"),
        "{text}"
    );
    assert!(lines[1].starts_with("duration: p50 "), "{text}");
    assert!(lines[2].starts_with("samples per span: "), "{text}");
    assert!(
        lines[3]
            .starts_with("note: spans that got no sample are not stored; these windows left out "),
        "{text}"
    );
    // The partition, as `top` prints it: samples, share, module:function.
    assert_eq!(
        lines[4].split_whitespace().collect::<Vec<_>>(),
        [samples.to_string().as_str(), "100.0%", "app:cache_get"],
        "{text}"
    );

    // db.query: every span sampled, so the count is complete; its durations and the samples
    // they predict match the test's clock; with descendants, db.decode's samples are in.
    let db = top(d, "db.query", &[]);
    assert_eq!(db["spans"].as_u64().unwrap(), truth.db_spans, "{db}");
    let mut ns = truth.db_ns.clone();
    ns.sort_unstable();
    let p50 = db["duration_p50_ns"].as_u64().unwrap();
    assert!((80_000_000..=ns[4]).contains(&p50), "{db}, truth {ns:?}");
    let max = db["duration_max_ns"].as_u64().unwrap();
    assert!(
        (db["duration_p95_ns"].as_u64().unwrap()..=ns[9]).contains(&max),
        "{db}"
    );
    let want: f64 = ns.iter().sum::<u64>() as f64 / 10e6;
    let got = db["expected_samples"].as_f64().unwrap();
    assert!(
        got <= want && got > 0.99 * want,
        "{got} expected against {want}: {db}"
    );
    assert!(
        (db["expected_per_span"].as_f64().unwrap() - got / 10.0).abs() < 1e-9,
        "{db}"
    );
    let query = listed(d, "db.query");
    let decode = listed(d, "db.decode");
    let with = db["samples"].as_u64().unwrap();
    assert_eq!(with, query.iter().map(|s| s.1).sum::<u64>(), "{db}");
    assert_eq!(
        with,
        query.iter().map(|s| s.0).sum::<u64>() + decode.iter().map(|s| s.0).sum::<u64>(),
        "{db}"
    );
    assert!(
        (db["samples_per_span"].as_f64().unwrap() - with as f64 / 10.0).abs() < 1e-9,
        "{db}"
    );
    let l = leaves(&db);
    assert!(
        l.keys().all(|k| k == "db_query" || k == "decode_row"),
        "{db}"
    );
    assert_eq!(l.values().sum::<u64>(), with, "{db}");

    // --exclusive: the spans' own samples only.
    let own = top(d, "db.query", &["--exclusive"]);
    assert_eq!(
        own["samples"].as_u64().unwrap(),
        query.iter().map(|s| s.0).sum::<u64>(),
        "{own}"
    );
    assert_eq!(own["with_descendants"], false);

    // Window filters apply: nothing after the run.
    let later = run(&["top", d, "--span-name", "db.query", "--since", "+1h"]);
    assert_eq!(later.status.code(), Some(3), "{}", stderr(&later));
    // --service selects windows, it does not turn into cost attribution.
    assert_eq!(top(d, "db.query", &["--service", "cache"])["spans"], 10);
    let none = run(&["top", d, "--span-name", "no.such.span"]);
    assert_eq!(none.status.code(), Some(3));
    assert!(
        stderr(&none).contains("no span named \"no.such.span\""),
        "{}",
        stderr(&none)
    );

    // `flame --span-name` draws the same samples.
    let svg = dir.path().join("cache.svg");
    let f = json(&run_ok(
        &[
            "flame",
            d,
            "--span-name",
            "cache.get",
            "-o",
            s(&svg),
            "--json",
        ],
        0,
    ));
    assert_eq!(f["samples"].as_u64().unwrap(), samples, "{f}");

    // Summaries cannot answer by span name: the windows are decoded, and the answer is the
    // same without summaries.
    let plain = run_with_env(
        &["top", d, "--span-name", "cache.get", "--json"],
        &[("SPAN_PROFILE_NO_SUMMARY", "1")],
    );
    assert_eq!(json(&stdout(&plain)), cache);
}
