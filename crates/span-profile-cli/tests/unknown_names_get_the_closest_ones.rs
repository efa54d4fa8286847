//! A name that matches nothing in the store (a service, version, environment, instance, route
//! or span name) is an empty selection (exit 3) that lists the names that do exist, the
//! closest first and marked, in every command.

mod common;

use common::*;

/// Runs `args`, expects exit 3, and returns stderr.
fn empty(args: &[&str]) -> String {
    let o = run(args);
    assert_eq!(o.status.code(), Some(3), "{args:?}: {}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
    stderr(&o)
}

#[test]
fn unknown_names_get_the_closest_ones() {
    let dir = TempDir::new("unknown-names");
    let d = dir.path();
    let checkout = Deploy {
        service: "checkout",
        version: "1.4.2",
        environment: Some("prod"),
        instance: "web-1",
    };
    let billing = Deploy {
        service: "billing",
        version: "2.0",
        environment: Some("staging"),
        instance: "web-7",
    };
    record_request(
        d,
        checkout,
        (0xa1, 1),
        "POST /checkout",
        "/checkout",
        PARSE_DATE,
        200,
    );
    record_request(
        d,
        billing,
        (0xa2, 2),
        "POST /invoice",
        "/invoice",
        HANDLE,
        200,
    );
    let d = s(d);

    let services = "no service \"chekout\"; services in the store: checkout (closest), billing";
    for args in [
        &["top", d, "--service", "chekout"][..],
        &["top", d, "--service", "chekout", "--route", "/checkout"],
        &["spans", d, "--service", "chekout"],
        &["routes", d, "--frame", "parse_date", "--service", "chekout"],
        &["flame", d, "--service", "chekout", "-o", "-"],
        &["ls", d, "--service", "chekout"],
        &[
            "diff",
            d,
            "--old",
            "version=1.4.2",
            "--new",
            "version=2.0",
            "--service",
            "chekout",
        ],
    ] {
        assert!(empty(args).contains(services), "{args:?}: {}", empty(args));
    }
    // A version is looked for in the service asked for.
    let e = empty(&["top", d, "--service", "checkout", "--version", "1.4.3"]);
    assert!(
        e.contains("no version \"1.4.3\" of service checkout; versions of service checkout in the store: 1.4.2 (closest)"),
        "{e}"
    );
    assert!(
        !e.contains("2.0"),
        "billing's version is not checkout's: {e}"
    );
    let e = empty(&[
        "diff",
        d,
        "--old",
        "version=1.4.1",
        "--new",
        "version=1.4.2",
    ]);
    assert!(
        e.contains("no windows of version=1.4.1")
            && e.contains("versions in the store: 1.4.2 (closest), 2.0"),
        "{e}"
    );
    let e = empty(&["top", d, "--environment", "prd"]);
    assert!(
        e.contains("no environment \"prd\"; environments in the store: prod (closest), staging"),
        "{e}"
    );
    let e = empty(&["top", d, "--instance", "web1"]);
    assert!(
        e.contains("no instance \"web1\"; instances in the store: web-1 (closest), web-7"),
        "{e}"
    );
    let e = empty(&["top", d, "--route", "/chekout"]);
    assert!(
        e.contains("no route \"/chekout\"; routes in the store: /checkout (closest)"),
        "{e}"
    );
    // Two unknown names: both are told.
    let e = empty(&["top", d, "--route", "/chekout", "--environment", "prd"]);
    assert!(
        e.contains("no route \"/chekout\"") && e.contains("no environment \"prd\""),
        "{e}"
    );
    // Span names, from the span tables.
    let e = empty(&["top", d, "--slowest", "POST /chekout"]);
    assert!(
        e.contains("span names in those windows: POST /checkout (closest), POST /invoice"),
        "{e}"
    );
    let e = empty(&["spans", d, "--name", "POST /invoise"]);
    assert!(
        e.contains("span names there: POST /invoice (closest), POST /checkout"),
        "{e}"
    );
    // Nothing close: the names are listed, none marked.
    let e = empty(&["top", d, "--service", "zzz"]);
    assert!(
        e.contains("no service \"zzz\"; services in the store: "),
        "{e}"
    );
    assert!(!e.contains("(closest)"), "{e}");
    // Two names equally near: neither is marked.
    let e = empty(&["top", d, "--instance", "web-4"]);
    assert!(
        e.contains("no instance \"web-4\"; instances in the store: web-1, web-7"),
        "{e}"
    );
    // Labels are looked for in the service asked for.
    let e = empty(&["top", d, "--service", "billing", "--route", "/checkout"]);
    assert!(
        e.contains("no route \"/checkout\" of service billing; routes of service billing in the store: /invoice, background"),
        "{e}"
    );
    // Names that exist but select nothing together: the command's own message stays.
    let e = empty(&["top", d, "--environment", "prod", "--instance", "web-7"]);
    assert!(
        e.contains("no samples for environment prod, instance web-7"),
        "{e}"
    );
    assert!(!e.contains("in the store"), "{e}");
}
