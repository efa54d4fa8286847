//! `top` by span (with its descendants, and alone), trace, route and service, on windows short enough
//! that the spans cross them; selectors combine, and an empty combination exits 3.

mod common;

use std::time::Duration;

use common::*;

const FEED: &str = "0000000000000000000000000000feed";

#[test]
fn each_selector_reports_its_own_samples() {
    let dir = TempDir::new("top");
    record_checkout_in_windows(dir.path(), "1.0", Duration::from_millis(200));
    let d = s(dir.path());
    assert!(count_files(dir.path()) > 3, "the spans cross windows");

    // The root span alone (--exclusive): only its own samples (render).
    let root = run_ok(
        &["top", d, "--span-id", "0000000000000001", "--exclusive"],
        0,
    );
    assert!(root.starts_with("span POST /checkout "), "{root}");
    assert!(root.contains("  app:render"), "{root}");
    assert!(!root.contains("parse_date"), "{root}");

    // By default the span's descendants are in: the child's parse_date samples join in, and
    // coverage is about the whole.
    let all = run_ok(&["top", d, "--span-id", "0000000000000001"], 0);
    assert!(all.lines().next().unwrap().contains(" ms -> "), "{all}");
    assert!(all.contains("parse_date"), "{all}");
    assert!(
        all.lines().last().unwrap().starts_with("coverage: "),
        "{all}"
    );

    // A trace: both spans of 0xfeed, nothing of the other traces.
    let trace = run_ok(&["top", d, "--trace-id", FEED], 0);
    assert!(trace.starts_with(&format!("trace {FEED} -> ")), "{trace}");
    assert!(!trace.contains("list_orders"), "{trace}");

    // A route: its share of the windows' samples, and its frames.
    let route = run_ok(&["top", d, "--route", "/orders"], 0);
    assert!(route.starts_with("route /orders -> "), "{route}");
    assert!(route.contains("% of the "), "{route}");
    assert!(route.contains("app:parse_date"), "{route}");
    assert!(!route.contains("render"), "{route}");

    // A service alone: CPU by route (both request routes and the idle thread's background),
    // and by package (exact counts: top_service_shows_cpu_by_route_and_package.rs).
    let svc = run_ok(&["top", d, "--service", "checkout"], 0);
    assert!(svc.starts_with("service checkout: "), "{svc}");
    for route in ["/checkout", "/orders", "background"] {
        assert!(
            svc.lines().any(|l| l.ends_with(&format!("  {route}"))),
            "{svc}"
        );
    }
    assert!(svc.contains("CPU by package"), "{svc}");

    // Combined selectors, as JSON.
    let both = json(&run_ok(
        &[
            "top",
            d,
            "--service",
            "checkout",
            "--route",
            "/checkout",
            "--json",
        ],
        0,
    ));
    assert!(both["samples"].as_u64().unwrap() > 0, "{both}");
    assert!(both["frames"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["function"] == "parse_date"));

    // A combination nothing matches says so and exits 3.
    let o = run(&["top", d, "--route", "/orders", "--trace-id", FEED]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("no samples"), "{}", stderr(&o));
}
