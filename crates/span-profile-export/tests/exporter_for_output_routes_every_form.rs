//! `exporter_for_output` is the one place that parses `output`: directories and `file://`
//! go to the file store, `pyroscope+http(s)://` and `otlp+http(s)://` to the network
//! exporters, and bad input gets an error that says what is accepted.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::recent_checkout;
use common::server::{CaptureServer, Reply};
use span_profile_export::{exporter_for_output, parse_output, ExporterEnv, Output};

#[test]
fn every_form_reaches_its_exporter() {
    let dir = tempfile::tempdir().unwrap();
    let env = ExporterEnv::default();
    let file = exporter_for_output(dir.path().to_str().unwrap(), &env).unwrap();
    file.export(Arc::new(recent_checkout())).unwrap();
    assert!(walkdir(dir.path()) >= 1);

    let server = CaptureServer::start(|_, _| Reply::ok());
    for (scheme, path) in [
        ("pyroscope+http", "/push.v1.PusherService/Push"),
        ("otlp+http", "/v1development/profiles"),
    ] {
        let e = exporter_for_output(&format!("{scheme}://{}", server.addr), &env).unwrap();
        e.export(Arc::new(recent_checkout())).unwrap();
        e.force_flush().unwrap();
        e.shutdown_with_timeout(Duration::from_secs(2)).unwrap();
        assert_eq!(server.requests().last().unwrap().path, path);
    }
    assert_eq!(
        parse_output("file:///var/lib/p").unwrap(),
        Output::Dir("/var/lib/p".into())
    );
    for (bad, says) in [
        ("", "directory"),
        ("file://relative", "absolute path"),
        ("gopher://x", "pyroscope+http"),
        ("pyroscope+http://", "host"),
    ] {
        let msg = match exporter_for_output(bad, &env) {
            Ok(_) => panic!("{bad:?} accepted"),
            Err(e) => e.to_string(),
        };
        assert!(msg.contains(says), "{bad:?}: {msg}");
    }
    let env = ExporterEnv::default().with("PYROSCOPE_SPAN_SCOPE", "sometimes");
    let msg = exporter_for_output("pyroscope+http://h:1", &env)
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("PYROSCOPE_SPAN_SCOPE") && msg.contains("local_root"),
        "{msg}"
    );
}

fn walkdir(p: &std::path::Path) -> usize {
    std::fs::read_dir(p)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walkdir(&e.path())
            } else {
                1
            }
        })
        .sum()
}
