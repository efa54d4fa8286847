//! Credentials (basic auth password, bearer token, custom header values, user info in the
//! URL) reach the server, and nowhere else: not in `Debug`, errors, `last_error` or the spool.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::recent_checkout;
use common::server::{CaptureServer, Reply};
use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};
use span_profile_export::{exporter_for_output, ExporterEnv};

const SECRETS: [&str; 4] = ["hunter2-pass", "glc_tok3n", "hdr-s3cret", "url-pa55"];

fn assert_clean(what: &str, text: &str) {
    for s in SECRETS {
        assert!(!text.contains(s), "{what} leaks {s}: {text}");
    }
}

#[test]
fn credentials_reach_the_server_and_nothing_else() {
    let server = CaptureServer::start(|_, _| Reply::status(401, "unauthorized: bad credentials"));
    let spool = tempfile::tempdir().unwrap();
    let env = ExporterEnv::from_pairs([
        ("PYROSCOPE_BASIC_AUTH_USERNAME", "alice"),
        ("PYROSCOPE_BASIC_AUTH_PASSWORD", SECRETS[0]),
        (
            "PYROSCOPE_HTTP_HEADERS",
            &format!("X-Api-Key={}", SECRETS[2]),
        ),
        ("PYROSCOPE_TENANT_ID", "tenant-1"),
    ]);
    let config = PyroscopeConfig::from_env(&server.url(), &env)
        .unwrap()
        .with_delivery(
            DeliveryConfig::default()
                .with_spool_dir(spool.path())
                .with_backoff(Duration::from_millis(10), Duration::from_millis(20)),
        );
    assert_clean("config Debug", &format!("{config:?}"));
    let e = PyroscopeExporter::new(config).unwrap();
    assert_clean("exporter Debug", &format!("{e:?}"));
    e.export(Arc::new(recent_checkout())).unwrap();
    // Look at the spool while the request may still be in it.
    // (each process spools in a folder of its own).
    for folder in std::fs::read_dir(spool.path()).unwrap() {
        for f in std::fs::read_dir(folder.unwrap().path()).unwrap() {
            let bytes = std::fs::read(f.unwrap().path()).unwrap_or_default();
            assert_clean("spool file", &String::from_utf8_lossy(&bytes));
        }
    }
    let reqs = server.wait_for(1, Duration::from_secs(5));
    assert_eq!(
        reqs[0].header("authorization"),
        Some("Basic YWxpY2U6aHVudGVyMi1wYXNz")
    );
    assert_eq!(reqs[0].header("x-api-key"), Some(SECRETS[2]));
    std::thread::sleep(Duration::from_millis(50));
    let err = e.export(Arc::new(recent_checkout())).unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");
    assert_clean("export error", &err.to_string());
    assert_clean("last_error", &e.last_error().unwrap());
    assert_clean("stats", &format!("{:?}", e.stats()));

    // Bearer token, and user info in the URL: same rules.
    let env = ExporterEnv::from_pairs([("PYROSCOPE_AUTH_TOKEN", SECRETS[1])]);
    assert_clean("env Debug", &format!("{env:?}"));
    let c = PyroscopeConfig::from_env(&server.url(), &env).unwrap();
    assert_clean("bearer config", &format!("{c:?}"));
    let url = format!("pyroscope+http://bob:{}@{}", SECRETS[3], server.addr);
    let boxed = exporter_for_output(&url, &ExporterEnv::default()).unwrap();
    assert_clean("exporter from URL", &format!("{boxed:?}"));
    let bad = exporter_for_output(
        &format!("pyroscope+ftp://bob:{}@x", SECRETS[3]),
        &ExporterEnv::default(),
    );
    assert_clean("URL error", &bad.unwrap_err().to_string());
    let bad = PyroscopeConfig::new(&format!("http://bob:{}@", SECRETS[3]));
    assert_clean("endpoint error", &bad.unwrap_err().to_string());
}
