//! TLS and the HTTP client: the roots that verify an `https://` server (a CA file or the
//! bundled Mozilla roots) and [`UreqTransport`], the ureq agent that is the worker's one
//! production [`Transport`]. It holds the headers common to every request (credentials) and
//! adds them at send time; they are never logged, spooled or shown in errors.

use std::time::Duration;

use super::config::{DeliveryConfig, DeliveryError};
use super::spool::Request;
use super::worker::{Response, Transport, TransportError};

/// Most bytes of a response body read (the worker keeps at most 512 of them as a message).
const MAX_RESPONSE_BODY: u64 = 64 << 10;

/// The TLS settings of `config`: its CA file's certificates as the only roots, or the bundled
/// Mozilla roots.
fn tls_config(config: &DeliveryConfig) -> Result<ureq::tls::TlsConfig, DeliveryError> {
    use ureq::tls::{parse_pem, PemItem, RootCerts, TlsConfig};
    let builder = TlsConfig::builder();
    let Some(path) = &config.ca_file else {
        return Ok(builder.build());
    };
    let fail = |reason: String| DeliveryError::CaFile {
        path: path.clone(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let mut certs = Vec::new();
    for item in parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(fail(format!("not valid PEM ({e})"))),
        }
    }
    if certs.is_empty() {
        return Err(fail("it holds no certificate".into()));
    }
    Ok(builder
        .root_certs(RootCerts::new_with_certs(&certs))
        .build())
}

/// Blocking HTTP through ureq with rustls: one global timeout per attempt plus a connect
/// timeout, statuses as answers (not errors).
pub(super) struct UreqTransport {
    agent: ureq::Agent,
    /// `scheme://host[:port]`, without a trailing `/`.
    base_url: String,
    headers: Vec<(String, String)>,
}

impl UreqTransport {
    /// A client for `base_url` with the timeouts and TLS roots of `config`; fails only on an
    /// unusable CA file.
    pub(super) fn new(
        base_url: &str,
        headers: Vec<(String, String)>,
        config: &DeliveryConfig,
    ) -> Result<Self, DeliveryError> {
        let tls = tls_config(config)?;
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(config.timeout))
                .timeout_connect(Some(config.connect_timeout.min(config.timeout)))
                .user_agent(concat!("span-profile/", env!("CARGO_PKG_VERSION")))
                .tls_config(tls)
                .build(),
        );
        Ok(Self {
            agent,
            base_url: base_url.trim_end_matches('/').to_string(),
            headers,
        })
    }
}

impl Transport for UreqTransport {
    fn send(&mut self, r: &Request, timeout: Duration) -> Result<Response, TransportError> {
        let url = format!("{}{}", self.base_url, r.path);
        let mut req = self
            .agent
            .post(&url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", &r.content_type);
        if let Some(enc) = &r.content_encoding {
            req = req.header("Content-Encoding", enc);
        }
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let mut resp = req.send(&r.body[..]).map_err(transport_error)?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BODY)
            .read_to_vec()
            .unwrap_or_default();
        Ok(Response {
            status,
            retry_after,
            body,
        })
    }
}

/// What a ureq error means for a retry.
fn transport_error(e: ureq::Error) -> TransportError {
    use ureq::Error as E;
    match e {
        E::BadUri(_) | E::RequireHttpsOnly(_) | E::InvalidProxyUrl => {
            TransportError::BadEndpoint(e.to_string())
        }
        E::Timeout(_) => TransportError::Timeout(e.to_string()),
        _ => TransportError::Unreachable(e.to_string()),
    }
}
