//! `span-profile ls DIR` lists the services of a store and, under each, the versions,
//! environments, instances and routes of its windows, with window counts and time ranges that
//! match the windows the pipeline wrote: from the window summaries, from decoded windows
//! (summaries off), and from summaries written before they recorded the environment.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use serde_json::{json, Value};
use span_profile_core::Profile;

/// (windows, first start, last end) of each value, as the decoded windows say.
type Seen = BTreeMap<Option<String>, (u64, u64, u64)>;

fn add(m: &mut Seen, k: Option<&str>, p: &Profile) {
    let (start, end) = (p.start_unix_ns, p.start_unix_ns + p.duration_ns);
    let e = m.entry(k.map(str::to_owned)).or_insert((0, u64::MAX, 0));
    *e = (e.0 + 1, e.1.min(start), e.2.max(end));
}

fn entries(m: &Seen) -> Value {
    Value::Array(
        m.iter()
            .map(|(name, &(windows, first, last))| {
                json!({"name": name, "windows": windows,
                       "first_start_unix_ns": first, "last_end_unix_ns": last})
            })
            .collect(),
    )
}

/// What `ls --json` must print for the windows `written`.
fn expected(written: &[Profile]) -> Value {
    #[derive(Default)]
    struct S {
        all: Seen,
        versions: Seen,
        environments: Seen,
        instances: Seen,
        routes: Seen,
    }
    let mut services: BTreeMap<String, S> = BTreeMap::new();
    for p in written {
        let r = &p.resource;
        let s = services.entry(r.service.clone()).or_default();
        add(&mut s.all, None, p);
        add(&mut s.versions, r.version.as_deref(), p);
        add(&mut s.environments, r.environment.as_deref(), p);
        add(&mut s.instances, r.instance.as_deref(), p);
        let routes: BTreeSet<&str> = p.samples.iter().map(|s| &*s.route).collect();
        for route in routes {
            add(&mut s.routes, Some(route), p);
        }
    }
    let services: Vec<Value> = services
        .iter()
        .map(|(name, s)| {
            let (windows, first, last) = s.all[&None];
            json!({"service": name, "windows": windows, "first_start_unix_ns": first,
                   "last_end_unix_ns": last, "versions": entries(&s.versions),
                   "environments": entries(&s.environments), "instances": entries(&s.instances),
                   "routes": entries(&s.routes)})
        })
        .collect();
    // Every --json object lists the files the command skipped (ADR 0031): none here.
    json!({ "services": services, "skipped": [] })
}

fn names(v: &Value, service: usize, label: &str) -> Vec<Value> {
    v["services"][service][label]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].clone())
        .collect()
}

#[test]
fn ls_lists_services_versions_environments_instances_and_routes() {
    let dir = TempDir::new("ls");
    let d = dir.path();
    let prod = Deploy {
        service: "checkout",
        version: "1.4.2",
        environment: Some("prod"),
        instance: "web-1",
    };
    let staging = Deploy {
        version: "1.4.3",
        environment: Some("staging"),
        instance: "web-2",
        ..prod
    };
    let billing = Deploy {
        service: "billing",
        version: "2.0",
        environment: None,
        instance: "web-1",
    };
    let mut written = Vec::new();
    let runs = [
        (prod, "POST /checkout", "/checkout", PARSE_DATE),
        (staging, "GET /orders", "/orders", LIST_ORDERS),
        (billing, "POST /invoice", "/invoice", HANDLE),
    ];
    for (i, (deploy, name, route, stack)) in runs.into_iter().enumerate() {
        let run = record_request(
            d,
            deploy,
            (0xa0 + i as u128, 1 + i as u64),
            name,
            route,
            stack,
            250,
        );
        assert!(!run.is_empty(), "the run of {name} wrote no window");
        assert!(
            run.iter()
                .any(|p| p.samples.iter().any(|s| &*s.route == route)),
            "{route} has no samples"
        );
        written.extend(run);
    }
    assert_one_summary_per_window(d);
    let want = expected(&written);

    let got = json(&run_ok(&["--json", "ls", s(d)], 0));
    assert_eq!(got, want);
    // What the test ran, by name.
    assert_eq!(got["services"].as_array().unwrap().len(), 2);
    assert_eq!(got["services"][1]["service"], "checkout");
    assert_eq!(names(&got, 1, "versions"), [json!("1.4.2"), json!("1.4.3")]);
    assert_eq!(
        names(&got, 1, "environments"),
        [json!("prod"), json!("staging")]
    );
    assert_eq!(
        names(&got, 1, "instances"),
        [json!("web-1"), json!("web-2")]
    );
    assert_eq!(names(&got, 0, "environments"), [Value::Null]);
    let routes = names(&got, 1, "routes");
    assert!(routes.contains(&json!("/checkout")) && routes.contains(&json!("/orders")));
    assert!(!routes.contains(&json!("/invoice")), "{routes:?}");
    // Every window of checkout is in one version, one environment and one instance.
    for label in ["versions", "environments", "instances"] {
        let sum: u64 = got["services"][1][label]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["windows"].as_u64().unwrap())
            .sum();
        assert_eq!(
            sum,
            got["services"][1]["windows"].as_u64().unwrap(),
            "{label}"
        );
    }

    // The decoded windows say the same; so do summaries without the environment and instance.
    let o = run_with_env(&["--json", "ls", s(d)], &[("SPAN_PROFILE_NO_SUMMARY", "1")]);
    assert_eq!(json(&stdout(&o)), want);
    strip_deployment_from_summaries(d);
    assert_eq!(json(&run_ok(&["--json", "ls", s(d)], 0)), want);

    // Filters: only the staging deploy's windows.
    let staged: Vec<Profile> = written
        .iter()
        .filter(|p| p.resource.environment.as_deref() == Some("staging"))
        .cloned()
        .collect();
    let only = json(&run_ok(
        &["--json", "ls", s(d), "--environment", "staging"],
        0,
    ));
    assert_eq!(only, expected(&staged));
    let only = json(&run_ok(&["--json", "ls", s(d), "--instance", "web-2"], 0));
    assert_eq!(only, expected(&staged));

    // The text is a tree: service, then its labels, each value with its windows.
    let text = run_ok(&["ls", s(d)], 0);
    let lines: Vec<&str> = text.lines().collect();
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting with {prefix:?}:\n{text}"))
    };
    let (billing_at, checkout_at) = (at("billing "), at("checkout "));
    assert!(billing_at < checkout_at, "{text}");
    let checkout_windows = got["services"][1]["windows"].as_u64().unwrap();
    assert!(
        lines[checkout_at].contains(&format!(" {checkout_windows} window")),
        "{text}"
    );
    for value in [
        "1.4.2",
        "1.4.3",
        "prod",
        "staging",
        "web-1",
        "web-2",
        "/checkout",
        "/orders",
    ] {
        let line = lines[checkout_at..]
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("{value} ")))
            .unwrap_or_else(|| panic!("no {value} under checkout:\n{text}"));
        assert!(line.starts_with("    "), "{line}");
    }
    assert!(lines[billing_at..checkout_at]
        .iter()
        .any(|l| l.trim_start().starts_with("(unset) ")));
}

#[test]
fn ls_of_an_empty_store_exits_3() {
    let dir = TempDir::new("ls-empty");
    let o = run(&["ls", s(dir.path())]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("no windows"), "{}", stderr(&o));
}
