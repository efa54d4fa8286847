//! `link`: Grafana Explore, this tool's own command, and custom templates; bad ids and
//! templates are errors that show the expected form.

mod common;

use common::*;

const IDS: [&str; 8] = [
    "--trace-id",
    "4bf92f3577b34da6a3ce929d0e0e4736",
    "--span-id",
    "00f067aa0ba902b7",
    "--start",
    "1714564800000000000",
    "--end",
    "1714564800720000000",
];

fn link(extra: &[&str], code: i32) -> String {
    let mut args = vec!["link"];
    args.extend(IDS);
    args.extend(extra);
    run_ok(&args, code)
}

#[test]
fn grafana_cli_and_custom_links() {
    let g = link(
        &[
            "--service",
            "checkout",
            "--grafana-url",
            "https://grafana.test/",
        ],
        0,
    );
    assert!(
        g.starts_with("https://grafana.test/explore?schemaVersion=1&orgId=1&panes="),
        "{g}"
    );
    let panes = g.trim().split("panes=").nth(1).unwrap();
    let decoded = percent_decode(panes);
    let v = json(&decoded);
    let q = &v["span"]["queries"][0];
    assert_eq!(q["spanSelector"][0], "00f067aa0ba902b7");
    assert_eq!(q["labelSelector"], "{service_name=\"checkout\"}");
    assert_eq!(q["datasource"]["type"], "grafana-pyroscope-datasource");
    // Pyroscope stamps a profile with its window's start: the range starts one window (60 s by
    // default) before the span, so the window holding the span's samples is inside it.
    assert_eq!(v["span"]["range"]["from"], "1714564740000");
    assert_eq!(v["span"]["range"]["to"], "1714564800720");
    let g = link(&["--window-s", "10", "--service", "a\"b"], 0);
    let v = json(&percent_decode(g.trim().split("panes=").nth(1).unwrap()));
    assert_eq!(v["span"]["range"]["from"], "1714564790000");
    assert_eq!(
        v["span"]["queries"][0]["labelSelector"],
        "{service_name=\"a\\\"b\"}"
    );

    let c = link(&["--template", "cli", "--store", "/var/lib/profiles"], 0);
    assert_eq!(
        c.trim(),
        "span-profile top /var/lib/profiles --span-id 00f067aa0ba902b7 --since 2024-05-01T12:00:00.000Z --until 2024-05-01T12:00:00.721Z"
    );

    let u = link(
        &[
            "--template",
            "https://p.test/{service}/{span_id}?from={start_ms}&to={end_ms}",
            "--service",
            "a b",
        ],
        0,
    );
    assert_eq!(
        u.trim(),
        "https://p.test/a%20b/00f067aa0ba902b7?from=1714564800000&to=1714564800720"
    );

    let o = run(&[
        "link",
        "--trace-id",
        "xyz",
        "--span-id",
        "00f067aa0ba902b7",
        "--start",
        "1",
        "--end",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expected 32 hex digits"),
        "{}",
        stderr(&o)
    );
    let mut args = vec!["link"];
    args.extend(IDS);
    args.extend(["--template", "https://p.test/{nope}"]);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown placeholder {nope}"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("{span_id}"),
        "the message lists the placeholders"
    );
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}
