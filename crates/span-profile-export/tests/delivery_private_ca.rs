//! A server behind a private CA (a self-hosted Pyroscope, an in-house collector): with the
//! CA's PEM file (`DeliveryConfig::with_ca_file`, `SPAN_PROFILE_CA_FILE`) windows arrive over
//! TLS; without it the bundled Mozilla roots reject the server, and the window waits in the
//! spool as a retried attempt. A CA file that cannot be used is refused at start, with a
//! message that says what to pass.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::recent_checkout;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};
use span_profile_export::ExporterEnv;

/// A CA (its PEM) and an HTTPS server for `localhost` signed by it, answering 200 to every
/// request; `requests` counts the requests it read whole.
struct PrivateCaServer {
    ca_pem: String,
    port: u16,
    requests: Arc<AtomicUsize>,
}

fn private_ca_server() -> PrivateCaServer {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server_cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![server_cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
            )
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let (config, seen) = (config.clone(), seen.clone());
            std::thread::spawn(move || {
                tcp.set_read_timeout(Some(Duration::from_secs(5))).ok();
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = BufReader::new(rustls::StreamOwned::new(conn, tcp));
                // One request per connection: headers, then Content-Length bytes of body.
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if tls.read_line(&mut line).unwrap_or(0) == 0 {
                        return; // the handshake failed or the client went away
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; len];
                if tls.read_exact(&mut body).is_ok() {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let s = tls.get_mut();
                    s.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    )
                    .ok();
                    s.flush().ok();
                }
            });
        }
    });
    PrivateCaServer {
        ca_pem: ca_cert.pem(),
        port,
        requests,
    }
}

fn delivery() -> DeliveryConfig {
    DeliveryConfig::default()
        .with_timeout(Duration::from_secs(5))
        .with_backoff(Duration::from_secs(30), Duration::from_secs(30))
}

fn wait_for(what: impl Fn() -> bool) {
    let start = Instant::now();
    while !what() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn with_the_ca_file_windows_arrive_and_without_it_they_wait() {
    let server = private_ca_server();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &server.ca_pem).unwrap();
    let url = format!("https://localhost:{}", server.port);

    // The bundled roots do not know this CA: a failed handshake, retried later.
    let untrusting = PyroscopeExporter::new(
        PyroscopeConfig::new(&url)
            .unwrap()
            .with_delivery(delivery()),
    )
    .unwrap();
    untrusting.export(Arc::new(recent_checkout())).unwrap();
    wait_for(|| untrusting.stats().delivery.retries > 0);
    let s = untrusting.stats().delivery;
    assert_eq!((s.retries, s.sent, s.spooled), (1, 0, 1), "{s:?}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 0);
    untrusting
        .shutdown_with_timeout(Duration::from_millis(100))
        .ok();

    // With the CA file, from the environment as a service would set it.
    let env = ExporterEnv::from_pairs([("SPAN_PROFILE_CA_FILE", ca_file.to_str().unwrap())]);
    let config = PyroscopeConfig::from_env(&url, &env).unwrap();
    assert_eq!(config.delivery.ca_file.as_deref(), Some(ca_file.as_path()));
    let fast = config
        .delivery
        .clone()
        .with_timeout(Duration::from_secs(5))
        .with_backoff(Duration::from_secs(30), Duration::from_secs(30));
    let trusting = PyroscopeExporter::new(config.with_delivery(fast)).unwrap();
    trusting.export(Arc::new(recent_checkout())).unwrap();
    wait_for(|| trusting.stats().delivery.sent > 0);
    let s = trusting.stats().delivery;
    assert_eq!((s.sent, s.retries), (1, 0), "{s:?}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    trusting.shutdown_with_timeout(Duration::from_secs(1)).ok();
}

#[test]
fn a_ca_file_that_cannot_be_used_is_refused_with_what_to_pass() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "just text\n").unwrap();
    for file in [missing, not_pem] {
        let err = PyroscopeExporter::new(
            PyroscopeConfig::new("https://localhost:4040")
                .unwrap()
                .with_delivery(delivery().with_ca_file(&file)),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(file.to_str().unwrap()), "{err}");
        assert!(err.contains("PEM file of CA certificates"), "{err}");
    }
}

/// OTLP takes the CA from OpenTelemetry's own variable, and speaks TLS to the receiver.
#[test]
fn otlp_over_tls_trusts_the_otel_certificate_variable() {
    use span_profile_export::otlp::{OtlpConfig, OtlpExporter};
    let server = private_ca_server();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &server.ca_pem).unwrap();
    let env = ExporterEnv::from_pairs([
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("https://localhost:{}", server.port).as_str(),
        ),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca_file.to_str().unwrap()),
    ]);
    let exporter = OtlpExporter::new(OtlpConfig::from_env("", &env).unwrap()).unwrap();
    exporter.export(Arc::new(recent_checkout())).unwrap();
    wait_for(|| exporter.stats().delivery.sent > 0);
    let s = exporter.stats().delivery;
    assert_eq!((s.sent, s.retries), (1, 0), "{s:?}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    exporter.shutdown_with_timeout(Duration::from_secs(1)).ok();
}
