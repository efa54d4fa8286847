//! Configuration shared by the network exporters: environment snapshots, endpoint URLs,
//! header lists, and secrets that never print.
// Some helpers serve only one backend; builds without it would warn.
#![cfg_attr(not(feature = "pyroscope"), allow(dead_code))]

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

#[cfg(any(feature = "pyroscope", feature = "otlp"))]
use crate::delivery::{DeliveryConfig, DeliveryError};

/// A snapshot of the environment variables the exporters read, so that configuration is a
/// pure function of it (tests pass their own; programs use [`ExporterEnv::from_process`]).
///
/// ```
/// use span_profile_export::ExporterEnv;
/// let env = ExporterEnv::from_pairs([("PYROSCOPE_TENANT_ID", "team-a"), ("EMPTY", "")]);
/// assert_eq!(env.get("PYROSCOPE_TENANT_ID"), Some("team-a"));
/// assert_eq!(env.get("EMPTY"), None); // empty counts as unset
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ExporterEnv {
    vars: BTreeMap<String, String>,
}

impl fmt::Debug for ExporterEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values may be credentials: only the names are shown.
        f.debug_struct("ExporterEnv")
            .field("names", &self.vars.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Prefixes of the variables an [`ExporterEnv`] keeps from the process.
const PREFIXES: [&str; 3] = ["PYROSCOPE_", "OTEL_", "SPAN_PROFILE_"];

impl ExporterEnv {
    /// The process's `PYROSCOPE_*`, `OTEL_*` and `SPAN_PROFILE_*` variables.
    pub fn from_process() -> Self {
        Self::from_pairs(
            std::env::vars().filter(|(k, _)| PREFIXES.iter().any(|p| k.starts_with(p))),
        )
    }

    /// An environment made of `pairs` only.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// A variable's value, trimmed; `None` when unset or blank.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// Sets a variable (builder style).
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.vars.insert(name.into(), value.into());
        self
    }

    pub(crate) fn duration_ms(&self, name: &'static str) -> Result<Option<Duration>, ConfigError> {
        self.get(name)
            .map(|v| {
                v.parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| ConfigError::InvalidVar {
                        name,
                        reason: format!("{v:?} is not a whole number of milliseconds"),
                    })
            })
            .transpose()
    }

    pub(crate) fn number(&self, name: &'static str) -> Result<Option<u64>, ConfigError> {
        self.get(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| ConfigError::InvalidVar {
                    name,
                    reason: format!("{v:?} is not a whole number"),
                })
            })
            .transpose()
    }

    pub(crate) fn flag(&self, name: &'static str) -> Result<Option<bool>, ConfigError> {
        self.get(name)
            .map(|v| match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(ConfigError::InvalidVar {
                    name,
                    reason: format!("{v:?} is not true or false"),
                }),
            })
            .transpose()
    }

    #[cfg(any(feature = "pyroscope", feature = "otlp"))]
    /// The delivery settings shared by every exporter: `SPAN_PROFILE_SPOOL_DIR` (a
    /// subdirectory named `kind` is used), `SPAN_PROFILE_SPOOL_MAX_BYTES`,
    /// `SPAN_PROFILE_SPOOL_MAX_ENTRIES`, `SPAN_PROFILE_CA_FILE`.
    pub(crate) fn delivery(&self, kind: &str) -> Result<DeliveryConfig, ConfigError> {
        let mut d = DeliveryConfig::default();
        if let Some(dir) = self.get("SPAN_PROFILE_SPOOL_DIR") {
            d = d.with_spool_dir(std::path::Path::new(dir).join(kind));
        }
        if let Some(b) = self.number("SPAN_PROFILE_SPOOL_MAX_BYTES")? {
            d = d.with_spool_max_bytes(b);
        }
        if let Some(n) = self.number("SPAN_PROFILE_SPOOL_MAX_ENTRIES")? {
            d = d.with_spool_max_entries(n as usize);
        }
        if let Some(f) = self.get("SPAN_PROFILE_CA_FILE") {
            d = d.with_ca_file(f);
        }
        Ok(d)
    }
}

/// The setters of the settings every network exporter's config holds, written once for
/// `OtlpConfig` and `PyroscopeConfig`: `with_header` and `with_delivery`, over the
/// `headers: Vec<(String, Secret)>` and `delivery: DeliveryConfig` fields of the struct whose
/// `impl` block invokes it. A macro rather than a trait with provided methods, so that
/// `OtlpConfig::new(..)?.with_header(..)` keeps working without a trait in scope, and the
/// public fields keep their paths (`config.delivery.timeout`).
#[cfg(any(feature = "pyroscope", feature = "otlp"))]
macro_rules! network_setters {
    () => {
        /// Adds a header sent with every request. Its value is a [`Secret`](crate::Secret):
        /// never logged, spooled or shown in errors.
        pub fn with_header(
            mut self,
            name: impl Into<String>,
            value: impl Into<$crate::Secret>,
        ) -> Self {
            self.headers.push((name.into(), value.into()));
            self
        }
        /// Sets the delivery settings: retries, spool, timeouts, TLS roots.
        pub fn with_delivery(mut self, delivery: $crate::delivery::DeliveryConfig) -> Self {
            self.delivery = delivery;
            self
        }
    };
}
#[cfg(any(feature = "pyroscope", feature = "otlp"))]
pub(crate) use network_setters;

/// Why an exporter could not be configured. Messages never contain credentials.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The endpoint is not an `http://` or `https://` URL with a host.
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint, with any user and password removed.
        endpoint: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// An environment variable or setting has a value that cannot be used.
    #[error("invalid {name}: {reason}")]
    InvalidVar {
        /// The variable or setting.
        name: &'static str,
        /// What is wrong and what is expected (never the value of a secret).
        reason: String,
    },
    /// The delivery worker could not start.
    #[cfg(any(feature = "pyroscope", feature = "otlp"))]
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
}

use span_profile_core::SpanScope;

/// Reads a span scope setting (`local_root` or `all`) named `name`.
pub(crate) fn parse_span_scope(name: &'static str, s: &str) -> Result<SpanScope, ConfigError> {
    SpanScope::parse(s).ok_or_else(|| ConfigError::InvalidVar {
        name,
        reason: format!("{s:?} is not local_root or all"),
    })
}

/// A string that prints as `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    /// The value, for building a header; never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

/// An endpoint split into its base URL (no credentials) and the user info it carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// `scheme://host[:port][/path]`, without a trailing `/`.
    pub(crate) base: String,
    pub(crate) path: String,
    pub(crate) user: Option<(String, Secret)>,
}

/// Parses `http[s]://[user[:password]@]host[:port][/path]`.
pub(crate) fn parse_endpoint(url: &str) -> Result<Endpoint, ConfigError> {
    let url = url.trim();
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid(url, "expected http://host:port or https://host:port"))?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(invalid(
            url,
            &format!("scheme {scheme:?} is not http or https"),
        ));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (user, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let (u, p) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            (
                Some((percent_decode(u), Secret::new(percent_decode(p)))),
                host,
            )
        }
        None => (None, authority),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(invalid(url, "the host is missing"));
    }
    if path.contains('?') || path.contains('#') {
        return Err(invalid(url, "a query or fragment is not allowed"));
    }
    let path = path.trim_end_matches('/').to_string();
    Ok(Endpoint {
        base: format!("{scheme}://{host}{path}"),
        path,
        user,
    })
}

fn invalid(url: &str, reason: &str) -> ConfigError {
    ConfigError::InvalidEndpoint {
        endpoint: strip_userinfo(url),
        reason: reason.to_string(),
    }
}

/// `url` with any `user:password@` removed, for messages.
pub(crate) fn strip_userinfo(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            match rest[..end].rsplit_once('@') {
                Some((_, host)) => format!("{scheme}://{host}{}", &rest[end..]),
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    }
}

/// Parses `key=value,key2=value2` (OpenTelemetry's header list form, values
/// percent-decoded). Entries without `=` are errors; their content is not echoed, since
/// header values are often credentials.
pub(crate) fn parse_header_list(
    name: &'static str,
    s: &str,
) -> Result<Vec<(String, Secret)>, ConfigError> {
    let mut out = Vec::new();
    for (i, entry) in s.split(',').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let Some((k, v)) = entry.split_once('=') else {
            return Err(ConfigError::InvalidVar {
                name,
                reason: format!(
                    "entry {} has no '='; expected key=value[,key=value...]",
                    i + 1
                ),
            });
        };
        let k = percent_decode(k.trim());
        if k.is_empty() || !k.bytes().all(is_token_byte) {
            return Err(ConfigError::InvalidVar {
                name,
                reason: format!("entry {} has an invalid header name", i + 1),
            });
        }
        out.push((k, Secret::new(percent_decode(v.trim()))));
    }
    Ok(out)
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if let Some(v) = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Percent-encodes everything but unreserved characters (for query strings).
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Base64 (standard alphabet, padded), for basic auth.
pub(crate) fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let n = chunk.len();
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= n {
                out.push(T[((v >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_lose_their_credentials() {
        let e = parse_endpoint("https://alice:p%40ss@example.invalid:4040/base/").unwrap();
        assert_eq!(e.base, "https://example.invalid:4040/base");
        let (u, p) = e.user.unwrap();
        assert_eq!((u.as_str(), p.expose()), ("alice", "p@ss"));
        let err = parse_endpoint("ftp://bob:hunter2@h")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(parse_endpoint("http://").is_err());
        assert!(parse_endpoint("http://h/x?y").is_err());
    }

    #[test]
    fn header_lists_parse_and_never_echo_values() {
        let h = parse_header_list("H", "a=1, b = x%20y ,,").unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[1].1.expose(), "x y");
        let err = parse_header_list("H", "a=1,tokensecret")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("tokensecret"), "{err}");
        assert_eq!(format!("{:?}", h[0].1), "<redacted>");
    }

    #[test]
    fn base64_matches_known_values() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
    }
}
