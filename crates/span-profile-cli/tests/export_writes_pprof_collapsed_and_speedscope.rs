//! `export DIR SELECTOR --format pprof|collapsed|speedscope -o FILE`: the selection's samples
//! in each format, the same counts in all three; `go tool pprof` reads the pprof, and the
//! speedscope file has what speedscope's file format requires.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use serde_json::Value;
use span_profile_test::{go_available, go_pprof};

/// `export` with `args` into `file`, and its `--json` report.
fn export(dir: &Path, format: &str, file: &Path, selector: &[&str]) -> Value {
    let mut args = vec![
        "export",
        s(dir),
        "--format",
        format,
        "-o",
        s(file),
        "--json",
    ];
    args.extend_from_slice(selector);
    json(&run_ok(&args, 0))
}

/// Collapsed lines → samples by root-first stack.
/// The collapsed file's stacks by function names: it names each frame `module:function`, as
/// `flame` does (checked here: every frame has a module), and the other formats name the
/// function alone, with its file beside it.
fn parse_collapsed(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let (stack, n) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l:?}"));
        let functions: Vec<&str> = stack
            .split(';')
            .map(|f| {
                f.rsplit_once(':')
                    .unwrap_or_else(|| panic!("{f:?} in {l:?} is not module:function"))
                    .1
            })
            .collect();
        *out.entry(functions.join(";")).or_default() += n.parse::<u64>().unwrap();
    }
    out
}

/// Checks the fields speedscope's file format (file-format-spec.ts, and the schema at
/// https://www.speedscope.app/file-format-schema.json) requires of a file of sampled
/// profiles, and returns the first profile's samples by root-first stack of names.
fn check_speedscope(v: &Value) -> BTreeMap<String, u64> {
    assert_eq!(
        v["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    assert!(v["version"].is_string(), "{v}");
    let frames = v["shared"]["frames"].as_array().expect("shared.frames");
    for f in frames {
        assert!(f["name"].is_string(), "{f}");
        assert!(f.get("line").is_none_or(Value::is_u64), "{f}");
        assert!(f.get("file").is_none_or(Value::is_string), "{f}");
    }
    let profiles = v["profiles"].as_array().expect("profiles");
    assert!(!profiles.is_empty());
    let units = [
        "none",
        "nanoseconds",
        "microseconds",
        "milliseconds",
        "seconds",
        "bytes",
    ];
    for p in profiles {
        assert_eq!(p["type"], "sampled", "{p}");
        assert!(p["name"].is_string());
        assert!(units.contains(&p["unit"].as_str().unwrap()), "{p}");
        let (start, end) = (
            p["startValue"].as_f64().unwrap(),
            p["endValue"].as_f64().unwrap(),
        );
        let samples = p["samples"].as_array().unwrap();
        let weights = p["weights"].as_array().unwrap();
        assert_eq!(samples.len(), weights.len());
        let total: f64 = weights.iter().map(|w| w.as_f64().unwrap()).sum();
        assert!(end >= start && end - start == total, "{p}");
        for st in samples {
            for i in st.as_array().unwrap() {
                assert!((i.as_u64().unwrap() as usize) < frames.len(), "{st}");
            }
        }
    }
    let p = &profiles[0];
    let mut out = BTreeMap::new();
    for (st, w) in p["samples"]
        .as_array()
        .unwrap()
        .iter()
        .zip(p["weights"].as_array().unwrap())
    {
        let names: Vec<&str> = st
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                frames[i.as_u64().unwrap() as usize]["name"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        *out.entry(names.join(";")).or_default() += w.as_u64().unwrap();
    }
    out
}

/// Samples by leaf function.
fn by_leaf(stacks: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (st, n) in stacks {
        *out.entry(st.rsplit(';').next().unwrap().to_string())
            .or_default() += n;
    }
    out
}

#[test]
fn a_span_exports_to_pprof_collapsed_and_speedscope_with_the_same_samples() {
    let dir = TempDir::new("export");
    record_checkout(dir.path(), "1.0");
    let out = TempDir::new("export-out");
    // The slow pricing.calculate (span 2): it ran parse_date, then apply_discount, then
    // calculate itself, under handle and serve.
    let span = ["--span-id", "0000000000000002"];
    let truth = json(&run_ok(
        &["top", s(dir.path()), span[0], span[1], "--json"],
        0,
    ));
    let samples = truth["samples"].as_u64().unwrap();
    assert!(samples > 20, "{truth}");

    let folded = out.path().join("span.folded");
    let report = export(dir.path(), "collapsed", &folded, &span);
    assert_eq!(report["samples"].as_u64(), Some(samples), "{report}");
    assert_eq!(report["format"], "collapsed");
    let collapsed = parse_collapsed(&std::fs::read_to_string(&folded).unwrap());
    assert_eq!(collapsed.values().sum::<u64>(), samples);
    let known = [
        "serve;handle;calculate;parse_date",
        "serve;handle;calculate;apply_discount",
        "serve;handle;calculate",
        // A tick between the span's start and the script's next stack.
        "serve;handle;render",
    ];
    for st in collapsed.keys() {
        assert!(known.contains(&st.as_str()), "{st} did not run in span 2");
    }
    let parse = collapsed[known[0]];
    let discount = collapsed.get(known[1]).copied().unwrap_or(0);
    assert!(parse >= 20 && parse > 3 * discount, "{collapsed:?}");

    let ss = out.path().join("span.speedscope.json");
    export(dir.path(), "speedscope", &ss, &span);
    let v = json(&std::fs::read_to_string(&ss).unwrap());
    assert_eq!(
        check_speedscope(&v),
        collapsed,
        "the same stacks and counts"
    );
    assert_eq!(v["profiles"][0]["endValue"].as_u64(), Some(samples));

    let pb = out.path().join("span.pb.gz");
    export(dir.path(), "pprof", &pb, &span);
    let back = span_profile_export::decode_pprof(&std::fs::read(&pb).unwrap()).unwrap();
    assert!(back
        .samples
        .iter()
        .all(|s| s.span.is_some_and(|c| c.span_id.to_string() == span[1])));
    assert_eq!(
        back.samples.iter().map(|s| s.wall_samples).sum::<u64>(),
        samples
    );
    assert_eq!(
        back.spans.len(),
        2,
        "span 2 and its local root: {:?}",
        back.spans
    );

    if !go_available() {
        return;
    }
    let home = TempDir::new("export-go");
    let top = go_pprof(home.path(), &["-top", "-sample_index=samples", s(&pb)]);
    let go: BTreeMap<String, u64> = pprof_top_rows(&top)
        .into_iter()
        .map(|(n, f)| (f, n))
        .filter(|&(_, n)| n > 0)
        .collect();
    assert_eq!(go, by_leaf(&collapsed), "{top}");
    let tags = go_pprof(home.path(), &["-tags", s(&pb)]);
    assert!(tags.contains(span[1]), "{tags}");
}

#[test]
fn a_route_exports_only_its_samples_and_an_empty_selection_writes_nothing() {
    let dir = TempDir::new("export-route");
    record_checkout(dir.path(), "1.0");
    let out = TempDir::new("export-route-out");
    let folded = out.path().join("orders.folded");
    export(dir.path(), "collapsed", &folded, &["--route", "/orders"]);
    let collapsed = parse_collapsed(&std::fs::read_to_string(&folded).unwrap());
    let truth = json(&run_ok(
        &["top", s(dir.path()), "--route", "/orders", "--json"],
        0,
    ));
    assert_eq!(
        Some(collapsed.values().sum::<u64>()),
        truth["samples"].as_u64()
    );
    // GET /orders ran list_orders → parse_date (a tick may catch the stack before it).
    let main = collapsed["serve;handle;list_orders;parse_date"];
    assert!(
        main >= 10 && 2 * main > collapsed.values().sum::<u64>(),
        "{collapsed:?}"
    );
    assert!(
        !collapsed.keys().any(|k| k.contains("idle_loop")),
        "{collapsed:?}"
    );

    // Standard output.
    let stdout = run_ok(
        &[
            "export",
            s(dir.path()),
            "--route",
            "/orders",
            "--format",
            "collapsed",
            "-o",
            "-",
        ],
        0,
    );
    assert_eq!(parse_collapsed(&stdout), collapsed);

    let none = out.path().join("none.folded");
    let o = run(&[
        "export",
        s(dir.path()),
        "--route",
        "/nope",
        "--format",
        "collapsed",
        "-o",
        s(&none),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing was written"), "{}", stderr(&o));
    assert!(!none.exists());
}

/// Two windows of two instances of `shop`, written by the file store, with counts the test
/// chose: on route `/x`, `main → f` has 7 + 3 wall samples (5 + 1 CPU samples) and
/// `main → g` 2; route `/y` has 4 samples of `main → g`.
fn write_known_windows(dir: &Path) {
    use span_profile_core::{
        Frame, Profile, ProfileSample, Resource, SpanContext, SpanId, Stack, TraceId,
    };
    let store = span_profile_export::FileStore::new(dir);
    let span = |id: u64| {
        Some(SpanContext {
            trace_id: TraceId::from_u128(0xabc).unwrap(),
            span_id: SpanId::from_u64(id).unwrap(),
            local_root_span_id: SpanId::from_u64(id).unwrap(),
        })
    };
    let window = |instance: &str, start: u64, rows: Vec<ProfileSample>| {
        let resource = Resource {
            service: "shop".into(),
            instance: Some(instance.into()),
            ..Resource::default()
        };
        let mut p = Profile::empty(resource, start, 60_000_000_000, 10_000_000);
        p.frames = vec![
            Frame::new("f", "shop/a.py", 3),
            Frame::new("main", "shop/a.py", 1),
            Frame::new("g", "shop/b.py", 7),
        ];
        p.stacks = vec![
            Stack {
                frames: vec![0, 1],
                truncated: false,
            },
            Stack {
                frames: vec![2, 1],
                truncated: false,
            },
        ];
        p.samples = rows;
        store.write(&p).unwrap();
    };
    let t0 = 1_700_000_000_000_000_000;
    window(
        "a",
        t0,
        vec![
            ProfileSample::new(0, "/x".into(), "w".into())
                .with_span(span(1))
                .with_wall(7, 70_000_000)
                .with_cpu(5, 50_000_000),
            ProfileSample::new(1, "/y".into(), "w".into()).with_wall(4, 40_000_000),
        ],
    );
    window(
        "b",
        t0 + 60_000_000_000,
        vec![
            ProfileSample::new(0, "/x".into(), "w".into())
                .with_span(span(2))
                .with_wall(3, 30_000_000)
                .with_cpu(1, 10_000_000),
            ProfileSample::new(1, "/x".into(), "w".into()).with_wall(2, 20_000_000),
        ],
    );
}

#[test]
fn windows_of_two_instances_export_the_counts_they_hold() {
    let dir = TempDir::new("export-known");
    write_known_windows(dir.path());
    let out = TempDir::new("export-known-out");
    let want = BTreeMap::from([("main;f".to_string(), 10), ("main;g".to_string(), 2)]);
    let route = ["--route", "/x"];

    let folded = out.path().join("x.folded");
    let report = export(dir.path(), "collapsed", &folded, &route);
    assert_eq!(report["samples"], 12, "{report}");
    assert_eq!(report["windows"], 2, "{report}");
    assert_eq!(
        std::fs::read_to_string(&folded).unwrap(),
        "shop.a:main;shop.a:f 10\nshop.a:main;shop.b:g 2\n"
    );

    let ss = out.path().join("x.speedscope.json");
    export(dir.path(), "speedscope", &ss, &route);
    let v = json(&std::fs::read_to_string(&ss).unwrap());
    assert_eq!(check_speedscope(&v), want);
    // The second profile counts CPU samples: only main → f had any.
    let cpu = &v["profiles"][1];
    assert_eq!(cpu["weights"], serde_json::json!([6]), "{cpu}");
    assert_eq!(cpu["endValue"], 6);
    let frames = &v["shared"]["frames"];
    assert!(
        frames
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({"name": "g", "file": "shop/b.py", "line": 7})),
        "{frames}"
    );

    let pb = out.path().join("x.pb.gz");
    export(dir.path(), "pprof", &pb, &route);
    let p = span_profile_export::decode_pprof(&std::fs::read(&pb).unwrap()).unwrap();
    assert_eq!(p.resource.service, "shop");
    assert_eq!(p.resource.instance, None, "the two instances differ");
    assert_eq!(p.period_ns, 10_000_000);
    let sum =
        |f: fn(&span_profile_core::ProfileSample) -> u64| p.samples.iter().map(f).sum::<u64>();
    assert_eq!(sum(|s| s.wall_samples), 12);
    assert_eq!(sum(|s| s.cpu_samples), 6);
    assert_eq!(sum(|s| s.wall_ns), 120_000_000);
    assert!(p.samples.iter().all(|s| &*s.route == "/x"));

    if !go_available() {
        return;
    }
    let home = TempDir::new("export-known-go");
    let top = go_pprof(home.path(), &["-top", "-sample_index=samples", s(&pb)]);
    let go: BTreeMap<String, u64> = pprof_top_rows(&top)
        .into_iter()
        .filter(|r| r.0 > 0)
        .map(|(n, f)| (f, n))
        .collect();
    assert_eq!(
        go,
        BTreeMap::from([("f".to_string(), 10), ("g".to_string(), 2)]),
        "{top}"
    );
    let cpu = go_pprof(home.path(), &["-top", "-sample_index=cpu_samples", s(&pb)]);
    assert_eq!(
        pprof_top_rows(&cpu).first(),
        Some(&(6, "f".to_string())),
        "{cpu}"
    );
}
