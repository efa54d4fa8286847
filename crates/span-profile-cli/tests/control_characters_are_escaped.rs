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
    script.set(PARSE_DATE);
    ms(300);
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
