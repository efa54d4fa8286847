//! `top --service S` alone answers where the service's CPU goes: by route, with the requests
//! (local-root spans) of each route and the CPU per request, and by package and module of the
//! leaf frame, where thread and event-loop entry frames never show.

mod common;

use common::*;

#[test]
fn cpu_goes_by_route_with_cpu_per_request_and_by_package() {
    let dir = TempDir::new("service");
    record_shop(dir.path());
    let d = s(dir.path());
    let j = json(&run_ok(&["top", d, "--service", "shop", "--json"], 0));
    assert_eq!(j["cpu_samples"], 86, "{j}");
    assert_eq!(j["cpu_ns"], 86 * 10_000_000_u64, "{j}");
    let routes: Vec<(&str, u64, u64, u64)> = j["by_route"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap(),
                r["cpu_samples"].as_u64().unwrap(),
                r["requests"].as_u64().unwrap(),
                r["cpu_ns_per_request"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    // Two checkout requests for 60 samples of 10 ms; one orders request of 20; the logging
    // thread has no requests.
    assert_eq!(
        routes,
        vec![
            ("/checkout", 60, 2, 300_000_000),
            ("/orders", 20, 1, 200_000_000),
            ("background", 6, 0, 0),
        ],
        "{j}"
    );
    let names = |key: &str| -> Vec<(String, u64)> {
        j[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_string(),
                    r["self_cpu_samples"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        names("by_package"),
        vec![
            ("dateutil".to_string(), 40),
            ("json".to_string(), 20),
            ("pricing".to_string(), 12),
            ("app".to_string(), 8),
            ("logging".to_string(), 6),
        ],
        "{j}"
    );
    assert_eq!(
        names("by_module")[1],
        ("json.encoder".to_string(), 20),
        "{j}"
    );
    // Entry frames are never the leaf of a busy stack: none of them shows.
    let all = j.to_string();
    for entry in [
        "threading",
        "runpy",
        "asyncio",
        "uvicorn",
        "_bootstrap",
        "run_forever",
    ] {
        assert!(!all.contains(entry), "{entry} in {j}");
    }

    let out = run_ok(&["top", d, "--service", "shop"], 0);
    assert!(
        out.starts_with("service shop: 86 CPU samples (860 ms of CPU)"),
        "{out}"
    );
    let checkout = out.lines().find(|l| l.ends_with("/checkout")).unwrap();
    let cols: Vec<&str> = checkout.split_whitespace().collect();
    assert_eq!(
        cols,
        ["69.8%", "60", "2", "300", "ms", "/checkout"],
        "{out}"
    );
    assert!(out.contains("CPU by package"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("46.5%") && l.ends_with("dateutil")),
        "{out}"
    );
}
