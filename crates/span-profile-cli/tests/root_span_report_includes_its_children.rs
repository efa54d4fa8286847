//! Selecting a span includes its descendants: a root span with no samples of its own reports
//! its whole request (`top`, `flame`, and the command `link --template cli` prints), `spans`
//! shows both counts, and `--exclusive` gives the span's own samples. The request crosses
//! windows, so the counts are checked across them.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;

const ROOT: &str = "0000000000000010";
const CALC: &str = "0000000000000011";
const DB: &str = "0000000000000012";
const RENDER: &str = "0000000000000013";

/// `top --json` for `args`, then (samples, self samples by leaf function).
fn report(args: &[&str]) -> (u64, HashMap<String, u64>) {
    let mut all = vec!["top"];
    all.extend(args);
    all.push("--json");
    let v = json(&run_ok(&all, 0));
    let frames = v["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["self_samples"].as_u64().unwrap() > 0)
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_string(),
                f["self_samples"].as_u64().unwrap(),
            )
        })
        .collect();
    (v["samples"].as_u64().unwrap(), frames)
}

#[test]
fn a_root_span_with_no_samples_of_its_own_reports_its_whole_request() {
    let dir = TempDir::new("root-span");
    record_request_with_empty_root(dir.path(), Duration::from_millis(150));
    let d = s(dir.path());
    assert!(count_files(dir.path()) >= 3, "the request crosses windows");

    // `spans`: own samples and samples with descendants, per span, across the windows.
    let list = json(&run_ok(&["spans", d, "--json"], 0));
    let by_id: HashMap<&str, (u64, u64)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["span"]["span_id"].as_str().unwrap(),
                (
                    s["own_samples"].as_u64().unwrap(),
                    s["samples"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    let own = |id: &str| by_id[id].0;
    let with = |id: &str| by_id[id].1;
    assert_eq!(own(ROOT), 0, "the root is never the innermost span: {list}");
    // About 300, 100 and 100 ms at 100 Hz; the machine's load makes the exact count vary.
    assert!((12..=60).contains(&own(CALC)), "{list}");
    assert!((2..=25).contains(&own(DB)), "{list}");
    assert!((2..=25).contains(&own(RENDER)), "{list}");
    assert_eq!(with(DB), own(DB), "a leaf span: {list}");
    assert_eq!(with(RENDER), own(RENDER), "a leaf span: {list}");
    assert_eq!(with(CALC), own(CALC) + own(DB), "{list}");
    assert_eq!(with(ROOT), own(CALC) + own(DB) + own(RENDER), "{list}");

    // The text listing shows both columns.
    let text = run_ok(&["spans", d], 0);
    let head: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(&head[..3], ["duration", "samples", "own"], "{text}");
    let root_line = text
        .lines()
        .find(|l| l.contains(ROOT))
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = root_line.split_whitespace().collect();
    assert_eq!(
        cols[2..4],
        [with(ROOT).to_string(), "0".to_string()],
        "{text}"
    );

    // `top --slowest` on the root: the whole request, partitioned by leaf frame, and each leaf
    // runs in one span only.
    let (n, leaves) = report(&[d, "--slowest", "POST /checkout"]);
    assert_eq!(n, with(ROOT));
    assert_eq!(leaves["parse_date"], own(CALC), "{leaves:?}");
    assert_eq!(leaves["apply_discount"], own(DB), "{leaves:?}");
    assert_eq!(leaves["render"], own(RENDER), "{leaves:?}");
    assert_eq!(leaves.values().sum::<u64>(), n, "{leaves:?}");
    let text = run_ok(&["top", d, "--slowest", "POST /checkout"], 0);
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("span POST /checkout "), "{text}");
    assert!(first.ends_with(&format!(" ms -> {n} samples")), "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with(&format!("coverage: {n} samples for ")),
        "{text}"
    );

    // A middle span includes its child; --exclusive leaves the child out.
    let (n, leaves) = report(&[d, "--span-id", CALC]);
    assert_eq!(n, own(CALC) + own(DB), "{leaves:?}");
    let (n, leaves) = report(&[d, "--span-id", CALC, "--exclusive"]);
    assert_eq!(n, own(CALC));
    assert_eq!(leaves.keys().collect::<Vec<_>>(), ["parse_date"]);
    let text = run_ok(&["top", d, "--span-id", CALC, "--exclusive"], 0);
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains(" ms (own samples only) -> "),
        "{text}"
    );
    assert!(
        text.lines().last().unwrap().starts_with(&format!(
            "coverage (the span with its descendants): {} samples for ",
            with(CALC)
        )),
        "{text}"
    );

    // --exclusive on the root: nothing of its own; the error says where the samples are.
    let o = run(&["top", d, "--span-id", ROOT, "--exclusive"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "its descendants have {}: drop --exclusive",
            with(ROOT)
        )),
        "{}",
        stderr(&o)
    );

    // The old flag still parses and changes nothing.
    assert_eq!(
        report(&[d, "--span-id", ROOT, "--with-children"]).0,
        with(ROOT)
    );

    // `flame --slowest` on the root draws the whole request.
    let svg = dir.path().join("root.svg");
    let f = json(&run_ok(
        &[
            "flame",
            d,
            "--slowest",
            "POST /checkout",
            "-o",
            s(&svg),
            "--json",
        ],
        0,
    ));
    assert_eq!(f["samples"].as_u64().unwrap(), with(ROOT), "{f}");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.contains("parse_date") && drawn.contains("render"),
        "the children's frames are drawn"
    );

    // `link --template cli` for the root prints a command that answers with the request.
    let root = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["span"]["span_id"] == ROOT)
        .unwrap();
    let start = root["span"]["start_unix_ns"].as_u64().unwrap().to_string();
    let end = root["span"]["end_unix_ns"].as_u64().unwrap().to_string();
    let printed = run_ok(
        &[
            "link",
            "--trace-id",
            "00000000000000000000000000000ab0",
            "--span-id",
            ROOT,
            "--start",
            &start,
            "--end",
            &end,
            "--template",
            "cli",
            "--store",
            d,
        ],
        0,
    );
    let words: Vec<String> = shell_words(printed.trim());
    assert_eq!(words[0], "span-profile", "{printed}");
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let (n, _) = report(&args[1..]);
    assert_eq!(n, with(ROOT), "{printed}");
}

/// Splits a command line the way a POSIX shell would for what `link` prints: words separated
/// by spaces, single-quoted words taken literally.
fn shell_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}
