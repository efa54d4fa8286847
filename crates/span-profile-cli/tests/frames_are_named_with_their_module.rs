//! A frame is its function and its file, shown as `module:function`: `routes --frame` takes
//! that form, and a bare name that two files define is listed (exit 2), never merged; the
//! summaries answer as the decoded windows do; flame graphs and `top` show the module.

mod common;

use common::*;

#[test]
fn a_bare_name_defined_twice_is_listed_not_merged() {
    let dir = TempDir::new("frames-ambiguous");
    record_shop(dir.path());
    let d = s(dir.path());
    // `run` is asyncio's (the checkout stacks) and uvicorn's (the orders stack).
    let o = run(&["routes", d, "--frame", "run"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("names 2 frames"), "{err}");
    assert!(err.contains("asyncio.runners:run"), "{err}");
    assert!(err.contains("uvicorn.main:run"), "{err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn module_function_names_one_frame_with_its_own_routes() {
    let dir = TempDir::new("frames-module");
    record_shop(dir.path());
    let d = s(dir.path());
    for env in [&[][..], &[("SPAN_PROFILE_NO_SUMMARY", "1")][..]] {
        let route_counts = |frame: &str| {
            let o = run_with_env(&["routes", d, "--frame", frame, "--json"], env);
            assert_eq!(o.status.code(), Some(0), "{frame}: {}", stderr(&o));
            let j = json(&stdout(&o));
            let routes: Vec<(String, u64)> = j["routes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["route"].as_str().unwrap().to_string(),
                        r["cpu_samples"].as_u64().unwrap(),
                    )
                })
                .collect();
            (
                j["frame"].as_str().unwrap().to_string(),
                j["cpu_samples"].as_u64().unwrap(),
                routes,
            )
        };
        // All CPU: 60 checkout, 20 orders, 6 background.
        assert_eq!(
            route_counts("asyncio.runners:run"),
            (
                "asyncio.runners:run".into(),
                86,
                vec![("/checkout".into(), 60)]
            ),
            "{env:?}"
        );
        assert_eq!(
            route_counts("uvicorn.main:run"),
            ("uvicorn.main:run".into(), 86, vec![("/orders".into(), 20)]),
            "{env:?}"
        );
        // A file path names the frame too; a bare name defined once needs no module.
        assert_eq!(
            route_counts("asyncio/runners.py:run").2,
            vec![("/checkout".into(), 60)]
        );
        assert_eq!(
            route_counts("_parse"),
            (
                "dateutil.parser._parser:_parse".into(),
                86,
                vec![("/checkout".into(), 40)]
            )
        );
    }
    // The text names the frame by module, and its header's columns read apart.
    let out = run_ok(&["routes", d, "--frame", "uvicorn.main:run"], 0);
    assert!(
        out.starts_with("uvicorn.main:run costs 23.3% of CPU; 100% of that comes from /orders"),
        "{out}"
    );
    assert!(
        out.lines()
            .nth(1)
            .unwrap()
            .contains("share of frame  share of CPU  CPU samples  route"),
        "{out}"
    );
}

#[test]
fn flame_graphs_and_top_show_the_module() {
    let dir = TempDir::new("frames-flame");
    record_shop(dir.path());
    let d = s(dir.path());
    let svg = dir.path().join("f.svg");
    run_ok(&["flame", d, "--route", "/orders", "-o", s(&svg)], 0);
    let text = std::fs::read_to_string(&svg).unwrap();
    for name in [
        "json.encoder:iterencode",
        "json:dumps",
        "uvicorn.main:run",
        "&lt;frozen runpy&gt;:_run_module_as_main",
    ] {
        assert!(text.contains(name), "{name} not in the flame graph");
    }
    let out = run_ok(&["top", d, "--route", "/orders", "--inclusive"], 0);
    assert!(out.contains("json:dumps"), "{out}");
}
