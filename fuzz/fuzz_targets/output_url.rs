//! The `output` setting and the exporter configuration it leads to: `parse_output` on any
//! text, then `PyroscopeConfig::from_env` / `OtlpConfig::from_env` for exporter URLs with
//! arbitrary environment variables (what `exporter_for_output` does before it starts a
//! delivery thread), and `exporter_for_output` itself for directories.
//!
//! - nothing panics;
//! - a path without `://` is a directory, exactly as written (trimmed);
//! - credentials never leak: a password in the URL's user info, and the values of the auth
//!   token, basic-auth password and header variables, appear in no error message and in no
//!   `Debug` output of a configuration.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use span_profile_export::otlp::OtlpConfig;
use span_profile_export::pyroscope::PyroscopeConfig;
use span_profile_export::{exporter_for_output, parse_output, ExporterEnv, Output};

/// Distinctive, so it cannot show up in a message by accident.
const SECRET: &str = "Zq8sEcReT9w";

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    raw: &'a str,
    scheme: u8,
    user: &'a str,
    with_password: bool,
    host: &'a str,
    rest: &'a str,
    env: Vec<(u8, &'a str)>,
    secret_env: u8,
}

const SCHEMES: [&str; 8] = [
    "pyroscope+http",
    "pyroscope+https",
    "otlp+http",
    "otlp+https",
    "file",
    "PYROSCOPE+HTTP",
    "gopher",
    "",
];

const VARS: [&str; 16] = [
    "PYROSCOPE_TENANT_ID",
    "PYROSCOPE_TAGS",
    "PYROSCOPE_SPAN_SCOPE",
    "PYROSCOPE_PROTOCOL",
    "PYROSCOPE_BASIC_AUTH_USERNAME",
    "PYROSCOPE_HTTP_HEADERS",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_PROFILES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "SPAN_PROFILE_OTLP_SPAN_SCOPE",
    "SPAN_PROFILE_SPOOL_MAX_BYTES",
    "SPAN_PROFILE_SPOOL_MAX_ENTRIES",
    "PYROSCOPE_UPLOAD_TIMEOUT",
];

/// Variables whose values are secrets, and a well-formed use of the secret in each.
const SECRET_VARS: [(&str, &str); 5] = [
    ("PYROSCOPE_AUTH_TOKEN", SECRET),
    ("PYROSCOPE_BASIC_AUTH_PASSWORD", SECRET),
    (
        "PYROSCOPE_HTTP_HEADERS",
        "X-Scope-OrgID=a,Authorization=Zq8sEcReT9w",
    ),
    (
        "OTEL_EXPORTER_OTLP_HEADERS",
        "authorization=Bearer%20Zq8sEcReT9w",
    ),
    (
        "OTEL_EXPORTER_OTLP_PROFILES_HEADERS",
        "broken,api-key=Zq8sEcReT9w",
    ),
];

fn check_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} leaks the secret: {text}");
}

fuzz_target!(|input: Input<'_>| {
    // Any text at all.
    match parse_output(input.raw) {
        Ok(Output::Dir(d)) if !input.raw.contains("://") => {
            assert_eq!(d.as_os_str(), input.raw.trim());
        }
        Ok(_) => assert!(input.raw.contains("://")),
        Err(e) => {
            let _ = e.to_string();
        }
    }

    // A URL with credentials, and an environment that may carry secrets.
    let scheme = SCHEMES[usize::from(input.scheme) % SCHEMES.len()];
    // The user name as the URL carries it: it is not a secret, so it is shown.
    let user = input.user.replace(['@', '/'], "");
    let userinfo = if input.with_password {
        format!("{user}:{SECRET}@")
    } else {
        String::new()
    };
    let url = format!("{scheme}://{userinfo}{}{}", input.host, input.rest);
    let mut env = ExporterEnv::from_pairs(
        input
            .env
            .iter()
            .take(8)
            .map(|&(k, v)| (VARS[usize::from(k) % VARS.len()], v)),
    );
    if input.secret_env > 0 {
        let (k, v) = SECRET_VARS[usize::from(input.secret_env) % SECRET_VARS.len()];
        env = env.with(k, v);
    }
    // The secret is never part of the host: only the user info carries it.
    let visible = format!("{}{}", input.host, input.rest);
    // Checked on the user name as written in the URL: removing `@` or `/` can join two
    // halves of the secret (a crash the fuzz smoke found: "YZq8sEcR@eT9wY").
    if visible.contains(SECRET) || user.contains(SECRET) {
        return;
    }
    if input.env.iter().any(|(_, v)| v.contains(SECRET)) {
        return;
    }
    match parse_output(&url) {
        Ok(Output::Pyroscope(inner)) => match PyroscopeConfig::from_env(&inner, &env) {
            Ok(c) => check_no_secret("PyroscopeConfig Debug", &format!("{c:?}")),
            Err(e) => check_no_secret("Pyroscope config error", &e.to_string()),
        },
        Ok(Output::Otlp(inner)) => match OtlpConfig::from_env(&inner, &env) {
            Ok(c) => check_no_secret("OtlpConfig Debug", &format!("{c:?}")),
            Err(e) => check_no_secret("OTLP config error", &e.to_string()),
        },
        Ok(Output::Dir(_)) => {
            // A directory exporter does no I/O until it writes.
            assert!(exporter_for_output(&url, &env).is_ok());
        }
        Ok(_) => {}
        Err(e) => check_no_secret("output error", &e.to_string()),
    }
});
