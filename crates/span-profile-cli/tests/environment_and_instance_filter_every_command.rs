//! `--environment` and `--instance` select windows by their resource's
//! `deployment.environment` and instance label in every command that reads the store: `top`,
//! `spans`, `routes`, `diff`, `flame` and `ls`; from window summaries, from decoded windows,
//! and from summaries written before they recorded either (those windows are decoded).

mod common;

use common::*;
use span_profile_core::Profile;

/// Wall samples of `route` in `windows`.
fn route_samples(windows: &[Profile], route: &str) -> u64 {
    windows
        .iter()
        .flat_map(|p| &p.samples)
        .filter(|s| &*s.route == route)
        .map(|s| s.wall_samples)
        .sum()
}

#[test]
fn environment_and_instance_filter_every_command() {
    let dir = TempDir::new("env-filter");
    let d = dir.path();
    let prod = |version| Deploy {
        service: "checkout",
        version,
        environment: Some("prod"),
        instance: "web-1",
    };
    let staging = |version| Deploy {
        environment: Some("staging"),
        instance: "web-2",
        ..prod(version)
    };
    // The same code in prod across two versions; staging gets a different path in version 2.
    // Each deploy runs RUNS requests, one window each: the diff needs several windows a side
    // to call a change significant. Span ids: prod 1.., staging 101.. (version 1), 201.. (2).
    const RUNS: u64 = 4;
    let record = |deploy: Deploy<'_>, first_id: u64, stack: &'static [&'static str]| {
        (0..RUNS)
            .flat_map(|k| {
                let id = first_id + k;
                record_request(
                    d,
                    deploy,
                    (0xa000 + u128::from(id), id),
                    "POST /checkout",
                    "/checkout",
                    stack,
                    300,
                )
            })
            .collect::<Vec<Profile>>()
    };
    let mut prod_windows = record(prod("1"), 1, PARSE_DATE);
    let staging_windows = record(staging("1"), 101, APPLY_DISCOUNT);
    prod_windows.extend(record(prod("2"), 11, PARSE_DATE));
    let staging_v2 = record(staging("2"), 201, LIST_ORDERS);
    let staging_samples = route_samples(&staging_windows, "/checkout");
    assert!(route_samples(&prod_windows, "/checkout") > 0 && staging_samples > 0);

    let check = |env: &[(&str, &str)]| {
        let run_env = |args: &[&str], code: i32| {
            let o = run_with_env(args, env);
            assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
            stdout(&o)
        };
        // top: the route's samples in the selected environment only.
        let top = |extra: &[&str]| {
            let mut a = vec![
                "--json",
                "top",
                s(d),
                "--route",
                "/checkout",
                "--version",
                "1",
            ];
            a.extend_from_slice(extra);
            json(&run_env(&a, 0))
        };
        let prod_v1: Vec<Profile> = prod_windows
            .iter()
            .filter(|p| p.resource.version.as_deref() == Some("1"))
            .cloned()
            .collect();
        let prod_v1 = route_samples(&prod_v1, "/checkout");
        for sel in [&["--environment", "prod"][..], &["--instance", "web-1"]] {
            let r = top(sel);
            assert_eq!(r["samples"].as_u64(), Some(prod_v1), "{sel:?}");
            let frames = r["frames"].to_string();
            assert!(
                frames.contains("parse_date") && !frames.contains("apply_discount"),
                "{frames}"
            );
        }
        for sel in [&["--environment", "staging"][..], &["--instance", "web-2"]] {
            let r = top(sel);
            assert_eq!(r["samples"].as_u64(), Some(staging_samples), "{sel:?}");
            let frames = r["frames"].to_string();
            assert!(
                frames.contains("apply_discount") && !frames.contains("parse_date"),
                "{frames}"
            );
        }
        // Environment and instance of different deploys select nothing.
        run_env(
            &["top", s(d), "--environment", "prod", "--instance", "web-2"],
            3,
        );

        // spans: only the spans recorded in that environment.
        let spans = json(&run_env(
            &["--json", "spans", s(d), "--environment", "staging"],
            0,
        ));
        let ids: Vec<String> = spans
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["span"]["span_id"].as_str().unwrap_or_default().to_owned())
            .collect();
        let mut want: Vec<String> = (101..101 + RUNS)
            .chain(201..201 + RUNS)
            .map(|id| format!("{id:016x}"))
            .collect();
        let mut got = ids.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{spans}");

        // routes: in version 1, parse_date ran only in prod.
        let routes = run_env(
            &[
                "--json",
                "routes",
                s(d),
                "--frame",
                "parse_date",
                "--environment",
                "prod",
            ],
            0,
        );
        assert!(
            json(&routes)["routes"].to_string().contains("/checkout"),
            "{routes}"
        );
        run_env(
            &[
                "routes",
                s(d),
                "--frame",
                "parse_date",
                "--instance",
                "web-2",
                "--version",
                "1",
            ],
            3,
        );

        // diff (self time): staging's version 2 spends its time in parse_date (under
        // list_orders), new against staging's version 1; prod ran parse_date in both versions,
        // so within prod nothing grew.
        let staging_diff = run_env(
            &[
                "diff",
                s(d),
                "--old",
                "version=1",
                "--new",
                "version=2",
                "--environment",
                "staging",
            ],
            1,
        );
        assert!(
            staging_diff.contains("REGRESSION parse_date"),
            "{staging_diff}"
        );
        let prod_diff = run_env(
            &[
                "diff",
                s(d),
                "--old",
                "version=1",
                "--new",
                "version=2",
                "--environment",
                "prod",
            ],
            0,
        );
        assert!(!prod_diff.contains("REGRESSION"), "{prod_diff}");

        // flame: the selected environment's frames only.
        let svg = d.join("flame.svg");
        run_env(
            &[
                "flame",
                s(d),
                "--instance",
                "web-2",
                "--version",
                "1",
                "-o",
                s(&svg),
            ],
            0,
        );
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("apply_discount") && !text.contains("parse_date"));

        // ls: the selected instance's windows.
        let ls = json(&run_env(&["--json", "ls", s(d), "--instance", "web-2"], 0));
        let windows = (staging_windows.len() + staging_v2.len()) as u64;
        assert_eq!(ls["services"][0]["windows"].as_u64(), Some(windows), "{ls}");
        assert_eq!(ls["services"][0]["environments"][0]["name"], "staging");
    };
    check(&[]);
    check(&[("SPAN_PROFILE_NO_SUMMARY", "1")]);
    strip_deployment_from_summaries(d);
    check(&[]);
}
