//! The real `go tool pprof` reads our `.pb.gz`: it lists the span labels, and `-tagfocus`
//! on a span id selects exactly that span's samples.

mod common;

use span_profile_export::encode_pprof;
use span_profile_test::{go_available, go_pprof};

/// Wall-sample counts and label lines of the samples `go tool pprof -raw` prints.
fn raw_samples(raw: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut lines = raw
        .lines()
        .skip_while(|l| !l.starts_with("Samples:"))
        .skip(2)
        .take_while(|l| !l.starts_with("Locations"))
        .peekable();
    while let Some(values) = lines.next() {
        let count = values.split_whitespace().next().unwrap().parse().unwrap();
        let labels = lines.next_if(|l| l.contains(":[")).unwrap_or_default();
        out.push((count, labels.trim().to_string()));
    }
    out
}

#[test]
fn go_tool_pprof_reads_span_labels_and_focuses_on_one_span() {
    if !go_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("window.pb.gz");
    std::fs::write(&file, encode_pprof(&common::checkout_profile())).unwrap();
    let file = file.to_str().unwrap();

    let tags = go_pprof(dir.path(), &["-tags", file]);
    for expected in [
        "trace_id:",
        common::TRACE,
        "span_id:",
        common::CHILD,
        common::ROOT,
        "local_root_span_id:",
        "route:",
        "/checkout/{id}",
        "background",
        "thread_name:",
        "task_name:",
    ] {
        assert!(tags.contains(expected), "-tags lacks {expected:?}:\n{tags}");
    }

    // checkout_profile: the child span has 60 + 12 wall samples, the root 10, background 100.
    for (span, want) in [(common::CHILD, 72), (common::ROOT, 10)] {
        let focus = format!("-tagfocus=span_id={span}");
        let raw = go_pprof(dir.path(), &[&focus, "-raw", file]);
        let samples = raw_samples(&raw);
        assert!(!samples.is_empty(), "no samples in:\n{raw}");
        for (_, labels) in &samples {
            assert!(labels.contains(&format!("span_id:[{span}]")), "{labels}");
        }
        assert_eq!(samples.iter().map(|s| s.0).sum::<u64>(), want, "{raw}");

        let traces = go_pprof(dir.path(), &[&focus, "-traces", file]);
        assert!(traces.contains(span), "{traces}");
        assert!(traces.contains("handle"), "{traces}");
    }
    let all = raw_samples(&go_pprof(dir.path(), &["-raw", file]));
    assert_eq!(all.iter().map(|s| s.0).sum::<u64>(), 60 + 10 + 100 + 12);
}
