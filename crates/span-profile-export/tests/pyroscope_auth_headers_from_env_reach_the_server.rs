//! Authentication and networking settings from the environment reach the server on the wire,
//! through the same path the Python module takes (`exporter_for_output` with an
//! `ExporterEnv`): a bearer token, `X-Scope-OrgID`, custom headers (percent-decoded), and basic
//! auth from the variables or from the URL's user info.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::recent_checkout;
use common::server::{CaptureServer, Captured, Reply};
use span_profile_export::{exporter_for_output, ExporterEnv};

/// Exports one window through `output` configured by `env` and returns what the server got.
fn one_request(server: &CaptureServer, output: &str, env: &ExporterEnv) -> Captured {
    let before = server.requests().len();
    let e = exporter_for_output(output, env).unwrap();
    e.export(Arc::new(recent_checkout())).unwrap();
    e.force_flush().unwrap();
    e.shutdown_with_timeout(Duration::from_secs(2)).unwrap();
    let reqs = server.wait_for(before + 1, Duration::from_secs(5));
    assert_eq!(reqs.len(), before + 1);
    reqs[before].clone()
}

#[test]
fn bearer_tenant_and_custom_headers_from_env_are_sent() {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let url = format!("pyroscope+http://{}", server.addr);
    let env = ExporterEnv::from_pairs([
        ("PYROSCOPE_AUTH_TOKEN", "glc_token"),
        ("PYROSCOPE_TENANT_ID", "team-b"),
        ("PYROSCOPE_HTTP_HEADERS", "X-Team=payments,X-List=a%2Cb"),
    ]);
    let r = one_request(&server, &url, &env);
    assert_eq!(r.path, "/push.v1.PusherService/Push");
    assert_eq!(r.header("authorization"), Some("Bearer glc_token"));
    assert_eq!(r.header("x-scope-orgid"), Some("team-b"));
    assert_eq!(r.header("x-team"), Some("payments"));
    assert_eq!(r.header("x-list"), Some("a,b"));
}

#[test]
fn basic_auth_from_env_and_from_the_url() {
    let server = CaptureServer::start(|_, _| Reply::ok());
    let url = format!("pyroscope+http://{}", server.addr);
    let env = ExporterEnv::from_pairs([
        ("PYROSCOPE_BASIC_AUTH_USERNAME", "123456"),
        ("PYROSCOPE_BASIC_AUTH_PASSWORD", "pw"),
    ]);
    let r = one_request(&server, &url, &env);
    // base64("123456:pw")
    assert_eq!(r.header("authorization"), Some("Basic MTIzNDU2OnB3"));
    assert_eq!(r.header("x-scope-orgid"), None);

    let url = format!("pyroscope+http://bob:s%40cret@{}", server.addr);
    let r = one_request(&server, &url, &ExporterEnv::default());
    // base64("bob:s@cret"): the user info is percent-decoded.
    assert_eq!(r.header("authorization"), Some("Basic Ym9iOnNAY3JldA=="));
}
