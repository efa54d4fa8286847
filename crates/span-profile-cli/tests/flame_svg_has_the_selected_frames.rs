//! `flame`: an inferno SVG of the selection, with the selection's frames and no others.

mod common;

use common::*;

#[test]
fn the_svg_of_a_span_and_of_a_route() {
    let dir = TempDir::new("flame");
    record_checkout(dir.path(), "1.0");
    let d = s(dir.path());
    let svg_path = dir.path().join("span.svg");

    let out = run_ok(
        &[
            "flame",
            d,
            "--slowest",
            "pricing.calculate",
            "-o",
            s(&svg_path),
        ],
        0,
    );
    assert!(out.starts_with("wrote "), "{out}");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(
        svg.starts_with("<?xml") && svg.contains("<svg"),
        "not an SVG"
    );
    for f in [
        "parse_date",
        "apply_discount",
        "calculate",
        "handle",
        "serve",
    ] {
        assert!(
            svg.contains(&format!(">{f}<")) || svg.contains(&format!("{f} (")),
            "{f} missing"
        );
    }
    assert!(!svg.contains("list_orders"), "another route's frame");

    let route = run_ok(&["flame", d, "--route", "/orders", "-o", "-"], 0);
    assert!(route.contains("list_orders"));
    assert!(!route.contains("apply_discount"));
}
