//! A stored window is plain pprof (ADR 0024): `go tool pprof` shows no span table and no
//! comment above its report, a header under 2 KB, and reads every sample; the span table is
//! still in the file, and the CLI reads it back.

mod common;

use common::*;
use span_profile_test::{go_available, go_pprof};

/// The text `go tool pprof -top` prints above its table.
fn header(top: &str) -> &str {
    let at = top
        .find("      flat")
        .unwrap_or_else(|| panic!("no table in:\n{top}"));
    &top[..at]
}

#[test]
fn go_tool_pprof_shows_a_short_header_and_every_sample_of_a_stored_window() {
    let dir = TempDir::new("plain-pprof");
    record_checkout(dir.path(), "1.0");
    let windows = window_files(dir.path());
    assert!(!windows.is_empty());

    // The span table is still stored: every span the recording started is listed.
    let spans = json(&run_ok(&["spans", s(dir.path()), "--json"], 0));
    let mut names: Vec<&str> = spans
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["span"]["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "GET /orders",
            "POST /checkout",
            "POST /checkout",
            "pricing.calculate",
            "pricing.calculate"
        ]
    );

    if !go_available() {
        return;
    }
    let home = TempDir::new("plain-pprof-go");
    let mut go_total = 0;
    for w in &windows {
        let top = go_pprof(home.path(), &["-top", "-sample_index=samples", s(w)]);
        let head = header(&top);
        assert!(head.len() < 2048, "{} bytes of header:\n{head}", head.len());
        for leaked in ["span-profile", "pricing.calculate", "POST /checkout", "{"] {
            assert!(!head.contains(leaked), "{leaked:?} in the header:\n{head}");
        }
        assert!(head.contains("Type: samples"), "{head}");
        let rows = pprof_top_rows(&top);
        // The leaves the scripted walker ran, and no other (callers show with flat 0).
        for (_, f) in rows.iter().filter(|r| r.0 > 0) {
            assert!(
                [
                    "parse_date",
                    "apply_discount",
                    "calculate",
                    "render",
                    "wait"
                ]
                .contains(&f.as_str()),
                "{f} is not a leaf the test ran:\n{top}"
            );
        }
        go_total += rows.iter().map(|r| r.0).sum::<u64>();
    }
    // The same samples as span-profile reads from those files.
    let ours = json(&run_ok(&["top", s(dir.path()), "--json"], 0));
    assert_eq!(Some(go_total), ours["samples"].as_u64(), "{ours}");
}
