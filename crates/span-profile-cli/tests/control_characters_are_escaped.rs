//! A span name or route holding control characters (a newline, ESC, NUL) reaches the terminal
//! escaped: it cannot forge a report line or drive the terminal. `--json` keeps it exact.

mod common;

use std::time::Duration;

use common::*;

const NAME: &str = "evil\nREGRESSION fake\u{1b}[2J\0";
const ROUTE: &str = "/x\u{1b}[31m";

#[test]
fn names_and_routes_print_escaped_and_json_keeps_them() {
    let dir = TempDir::new("control-chars");
    let script = Script::default();
    let p = profiler(dir.path(), "checkout", "1.0", &script);
    let span = start_span(&p, 0xfeed, 1, None, NAME, Some(ROUTE));
    script.run(PARSE_DATE, 300);
    span.end();
    script.set(IDLE);
    p.shutdown_with_timeout(Duration::from_secs(10)).unwrap();
    let d = s(dir.path());

    for out in [
        run_ok(&["spans", d], 0),
        run_ok(&["routes", d, "--frame", "parse_date"], 0),
    ] {
        assert!(
            !out.chars().any(|c| c.is_control() && c != '\n'),
            "raw control characters: {out:?}"
        );
        assert!(!out.lines().any(|l| l.starts_with("REGRESSION")), "{out}");
    }
    let spans = run_ok(&["spans", d], 0);
    assert!(
        spans.contains(r"evil\nREGRESSION fake\u{1b}[2J\u{0}"),
        "{spans}"
    );
    let routes = run_ok(&["routes", d, "--frame", "parse_date"], 0);
    assert!(routes.contains(r"/x\u{1b}[31m"), "{routes}");

    let v = json(&run_ok(&["spans", d, "--json"], 0));
    assert_eq!(v[0]["span"]["name"], NAME, "{v}");
    assert_eq!(v[0]["span"]["route"], ROUTE, "{v}");
}

/// A frame's function name with control characters, in every text report that names frames,
/// and a window file whose name holds ESC, in the warning on stderr.
#[test]
fn frame_names_and_file_names_print_escaped() {
    let dir = TempDir::new("control-frames");
    let script = Script::default();
    let p = profiler(dir.path(), "checkout", "1.0", &script);
    let span = start_span(&p, 0xfeed, 1, None, "POST /checkout", Some("/checkout"));
    script.run(EVIL_FRAME, 300);
    span.end();
    script.set(IDLE);
    p.shutdown_with_timeout(Duration::from_secs(10)).unwrap();
    let d = s(dir.path());
    let window = window_files(dir.path()).into_iter().next().unwrap();
    let evil_file = window.with_file_name("1-\u{1b}[2Jx-1.pb.gz");
    std::fs::write(&evil_file, b"").unwrap();

    let raw_name = EVIL_FRAME[0];
    for args in [
        vec!["top", d, "--route", "/checkout"],
        vec!["top", d, "--service", "checkout"],
        vec!["top", d, "--route", "/checkout", "--inclusive"],
        vec!["routes", d, "--frame", "handle"],
        vec!["spans", d],
        vec!["ls", d],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        for (what, text) in [("stdout", stdout(&o)), ("stderr", stderr(&o))] {
            assert!(
                !text.chars().any(|c| c.is_control() && c != '\n'),
                "{args:?}: raw control characters on {what}: {text:?}"
            );
            assert!(
                !text.lines().any(|l| l.starts_with("REGRESSION")),
                "{args:?}: {what}: {text}"
            );
        }
        // The warning names the file, escaped.
        assert!(
            stderr(&o).contains(r"1-\u{1b}[2Jx-1.pb.gz"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let top = run_ok(&["top", d, "--route", "/checkout"], 0);
    assert!(
        top.contains(r"evil\nREGRESSION frame\u{1b}[2J\u{0}"),
        "the frame is shown, escaped: {top}"
    );
    let v = json(&run_ok(&["top", d, "--route", "/checkout", "--json"], 0));
    assert!(
        v.to_string()
            .contains(&serde_json::to_string(raw_name).unwrap()),
        "{v}"
    );
}
