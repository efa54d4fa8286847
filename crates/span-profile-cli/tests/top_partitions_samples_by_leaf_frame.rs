//! `top` counts each selected sample once, at its leaf frame: its rows and `<other>` add up to
//! the selection's samples, grouped by frame (`module:function`), module, package or line;
//! `--inclusive` gives the inclusive view. Every count is the one the tape played.

mod common;

use common::*;

/// `(samples, name)` of each row after the header, up to a `coverage:` line.
fn rows(out: &str) -> Vec<(u64, String)> {
    out.lines()
        .skip(1)
        .take_while(|l| !l.starts_with("coverage:"))
        .map(|l| {
            let t = l.trim_start();
            let (n, rest) = t.split_once(' ').unwrap();
            let name = rest.trim_start().split_once("  ").map_or(rest, |x| x.1);
            (n.parse().unwrap(), name.trim().to_string())
        })
        .collect()
}

fn sum(rows: &[(u64, String)]) -> u64 {
    rows.iter().map(|r| r.0).sum()
}

#[test]
fn the_partition_counts_each_sample_once_at_its_leaf() {
    let dir = TempDir::new("partition");
    record_shop(dir.path());
    let d = s(dir.path());

    // Route /checkout: 30 + 10 parsing, 12 discount, 8 render = 60 samples.
    let out = run_ok(&["top", d, "--route", "/checkout"], 0);
    assert!(out.starts_with("route /checkout -> 60 samples"), "{out}");
    let r = rows(&out);
    assert_eq!(
        r,
        vec![
            (40, "dateutil.parser._parser:_parse".to_string()),
            (12, "pricing.rules:apply_discount".to_string()),
            (8, "app.views:render".to_string()),
        ],
        "{out}"
    );
    assert_eq!(sum(&r), 60);

    // A limit folds the rest into <other>, and the rows still add up.
    let out = run_ok(&["top", d, "--route", "/checkout", "--limit", "1"], 0);
    let r = rows(&out);
    assert_eq!(r[1], (20, "<other>".to_string()), "{out}");
    assert_eq!(sum(&r), 60, "{out}");

    // By package and by module.
    let out = run_ok(&["top", d, "--route", "/checkout", "--by", "package"], 0);
    assert_eq!(
        rows(&out),
        vec![
            (40, "dateutil".to_string()),
            (12, "pricing".to_string()),
            (8, "app".to_string())
        ],
        "{out}"
    );
    let out = run_ok(
        &[
            "top",
            d,
            "--by",
            "module",
            "--service",
            "shop",
            "--route",
            "/orders",
        ],
        0,
    );
    assert_eq!(rows(&out), vec![(20, "json.encoder".to_string())], "{out}");

    // By line: the two lines of _parse apart.
    let out = run_ok(&["top", d, "--route", "/checkout", "--lines"], 0);
    let r = rows(&out);
    assert_eq!(
        r[0],
        (
            30,
            format!(
                "dateutil.parser._parser:_parse ({}:640)",
                tape_frames::PARSER
            )
        ),
        "{out}"
    );
    assert_eq!(r[1].0, 12, "{out}");
    assert_eq!(
        r[2],
        (
            10,
            format!(
                "dateutil.parser._parser:_parse ({}:700)",
                tape_frames::PARSER
            )
        ),
        "{out}"
    );
    assert_eq!(sum(&r), 60, "{out}");

    // Inclusive: the frames below the common entry path, by the samples they are on.
    let out = run_ok(&["top", d, "--route", "/checkout", "--inclusive"], 0);
    let r = rows(&out);
    assert_eq!(r[0], (52, "pricing.rules:calculate".to_string()), "{out}");
    assert!(
        r.contains(&(40, "pricing.dates:parse_date".to_string())),
        "{out}"
    );
    assert!(
        !r.iter().any(|x| x.1.contains("_run_module_as_main")),
        "{out}"
    );
}

#[test]
fn a_spans_report_keeps_its_header_and_coverage_line() {
    let dir = TempDir::new("partition-span");
    record_shop(dir.path());
    let d = s(dir.path());
    let out = run_ok(&["top", d, "--span-id", "0000000000000002"], 0);
    let first = out.lines().next().unwrap();
    assert!(first.starts_with("span pricing.calculate "), "{out}");
    assert!(first.ends_with(" -> 48 samples"), "{out}");
    assert!(
        out.lines()
            .last()
            .unwrap()
            .starts_with("coverage: 48 samples"),
        "{out}"
    );
    let r = rows(&out);
    assert_eq!(
        r[0],
        (40, "dateutil.parser._parser:_parse".to_string()),
        "{out}"
    );
    assert_eq!(
        r[1],
        (8, "pricing.rules:apply_discount".to_string()),
        "{out}"
    );
    assert_eq!(sum(&r), 48, "{out}");
}

#[test]
fn the_json_partition_has_identity_and_counts() {
    let dir = TempDir::new("partition-json");
    record_shop(dir.path());
    let d = s(dir.path());
    let j = json(&run_ok(
        &[
            "top",
            d,
            "--route",
            "/checkout",
            "--lines",
            "--limit",
            "2",
            "--json",
        ],
        0,
    ));
    assert_eq!(j["samples"], 60, "{j}");
    let p = &j["partition"];
    assert_eq!(p["by"], "line", "{j}");
    let rows = p["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["function"], "_parse");
    assert_eq!(rows[0]["file"], tape_frames::PARSER);
    assert_eq!(rows[0]["module"], "dateutil.parser._parser");
    assert_eq!(rows[0]["line"], 640);
    assert_eq!(rows[0]["self_samples"], 30);
    assert_eq!(rows[0]["total_samples"], 30);
    assert_eq!(rows[1]["self_samples"], 12);
    assert_eq!(p["other_samples"], 60 - 30 - 12, "{j}");
    // The frames by inclusive count carry self and total.
    let calc = j["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "calculate")
        .unwrap();
    assert_eq!(
        (
            calc["self_samples"].as_u64(),
            calc["total_samples"].as_u64()
        ),
        (Some(0), Some(52))
    );
    assert_eq!(calc["module"], "pricing.rules");

    // --inclusive by module has no meaning: a usage error that says what to do.
    let o = run(&[
        "top",
        d,
        "--route",
        "/checkout",
        "--by",
        "module",
        "--inclusive",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--by function"), "{}", stderr(&o));
}
