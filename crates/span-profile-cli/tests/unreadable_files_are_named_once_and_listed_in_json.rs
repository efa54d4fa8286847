//! Zero-byte, cut-short and garbage window files are skipped: every command that meets one
//! names it once on stderr (however many passes read it), lists it under `skipped` in its
//! `--json` object, answers from the other windows, and leaves it in place (compact never
//! rolls it up).

mod common;

use std::fs;
use std::path::PathBuf;

use common::*;

/// The bad files, named as the real window is (same start time) with other sequence numbers.
fn plant_bad_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let window = window_files(dir).into_iter().next().unwrap();
    let bytes = fs::read(&window).unwrap();
    let day = window.parent().unwrap();
    let name = window.file_name().unwrap().to_str().unwrap();
    let (start, _) = name.split_once('-').unwrap();
    let mut random = Vec::with_capacity(4096);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..4096 {
        // xorshift: bytes no tool wrote.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        random.push(x as u8);
    }
    [
        (901, Vec::new()),
        (902, bytes[..bytes.len() / 2].to_vec()),
        (903, random),
        // A gzip stream of nothing.
        (904, {
            use std::io::Write as _;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(b"").unwrap();
            gz.finish().unwrap()
        }),
    ]
    .into_iter()
    .map(|(seq, b)| {
        let p = day.join(format!("{start}-bad-{seq}.pb.gz"));
        fs::write(&p, b).unwrap();
        p
    })
    .collect()
}

fn assert_named_once(args: &[&str], err: &str, bad: &[PathBuf]) {
    assert!(
        err.contains("skipped 4 unreadable file(s)"),
        "{args:?}: {err}"
    );
    for b in bad {
        assert_eq!(err.matches(s(b)).count(), 1, "{args:?}: {b:?} once: {err}");
    }
}

fn skipped_paths(v: &serde_json::Value) -> Vec<String> {
    v["skipped"]
        .as_array()
        .unwrap_or_else(|| panic!("no skipped list: {v}"))
        .iter()
        .map(|e| {
            assert!(!e["error"].as_str().unwrap().is_empty(), "{e}");
            e["path"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn every_command_names_each_bad_file_once_and_lists_it_in_json() {
    let dir = TempDir::new("unreadable");
    record_checkout(dir.path(), "1.0");
    let d = s(dir.path());
    let commands: Vec<Vec<&str>> = vec![
        vec!["top", d, "--route", "/checkout"],
        // A span selection reads span tables, then windows: two passes over each file.
        vec!["top", d, "--span-id", "0000000000000002"],
        vec!["top", d, "--slowest", "pricing.calculate"],
        vec!["routes", d, "--frame", "parse_date"],
        vec!["ls", d],
    ];
    let good: Vec<(String, serde_json::Value)> = commands
        .iter()
        .map(|c| {
            let o = run(c);
            let j = run(&[&c[..], &["--json"]].concat());
            (stdout(&o), json(&stdout(&j)))
        })
        .collect();
    let spans_good = run_ok(&["spans", d], 0);

    let real = count_files(dir.path());
    let bad = plant_bad_files(dir.path());
    let want: Vec<String> = bad.iter().map(|b| s(b).to_owned()).collect();
    for (c, (text, good_json)) in commands.iter().zip(good) {
        let o = run(c);
        assert_eq!(stdout(&o), text, "{c:?}: the answer leaves them out");
        assert_named_once(c, &stderr(&o), &bad);
        let args = [&c[..], &["--json"]].concat();
        let o = run(&args);
        assert_named_once(&args, &stderr(&o), &bad);
        let mut v = json(&stdout(&o));
        assert_eq!(skipped_paths(&v), want, "{args:?}");
        v.as_object_mut().unwrap().remove("skipped");
        let mut good_json = good_json;
        assert_eq!(skipped_paths(&good_json), Vec::<String>::new());
        good_json.as_object_mut().unwrap().remove("skipped");
        assert_eq!(v, good_json, "{args:?}");
    }
    // `spans --json` is a list: the warning on stderr names the files.
    let o = run(&["spans", d]);
    assert_eq!(stdout(&o), spans_good);
    assert_named_once(&["spans"], &stderr(&o), &bad);

    // compact: every bad file is left in place, named once, listed in --json; no roll-up of
    // an unknown service appears.
    let o = run(&[
        "compact", d, "--now", "+100d", "--full", "14d", "--hourly", "90d", "--daily", "400d",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_named_once(&["compact"], &stderr(&o), &bad);
    let v = json(&stdout(&o));
    assert_eq!(skipped_paths(&v), want);
    assert_eq!(v["unreadable_left"], 4, "{v}");
    assert_eq!(v["rolled_up"], real, "{v}");
    for b in &bad {
        assert!(b.exists(), "{b:?} is left in place");
    }
    let services: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(services, ["checkout"]);
}
