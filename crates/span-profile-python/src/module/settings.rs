//! Settings that the Python API passes down: where profiles go, and the resource labels.

use std::path::PathBuf;

use span_profile_core::Resource;

/// Where windows are written. One variant per supported `output` form; URL schemes for
/// Pyroscope and OTLP are parsed here when those exporters exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Output {
    /// A local directory (the file store).
    Dir(PathBuf),
}

/// Schemes that are planned but not built yet, so the error can say so.
const PLANNED_SCHEMES: &[&str] = &[
    "pyroscope+http",
    "pyroscope+https",
    "otlp+http",
    "otlp+grpc",
];

/// Parses the `output` setting: a directory path, `file://` plus an absolute path, or (later)
/// an exporter URL. Every error message says what is accepted.
pub(crate) fn parse_output(output: &str) -> Result<Output, String> {
    let trimmed = output.trim();
    if trimmed.is_empty() {
        return Err("output is empty; pass a directory such as \"./profiles\"".into());
    }
    let Some((scheme, rest)) = trimmed.split_once("://") else {
        return Ok(Output::Dir(PathBuf::from(trimmed)));
    };
    let scheme_lc = scheme.to_ascii_lowercase();
    match scheme_lc.as_str() {
        "file" => {
            if rest.is_empty() || !rest.starts_with('/') {
                return Err(format!(
                    "output {output:?}: a file:// URL needs an absolute path, as in file:///var/lib/profiles"
                ));
            }
            Ok(Output::Dir(PathBuf::from(rest)))
        }
        s if PLANNED_SCHEMES.contains(&s) => Err(format!(
            "output {output:?}: the {scheme} exporter is not available in this version; \
             use a directory path such as \"./profiles\""
        )),
        _ => Err(format!(
            "output {output:?}: unknown scheme {scheme:?}; use a directory path (\"./profiles\") \
             or file:///absolute/path"
        )),
    }
}

/// The resource labels: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` first, then the
/// explicit settings on top. The instance defaults to `<host>-<pid>`; a process forked from a
/// profiled parent gets its pid appended to an explicit instance, so parent and child never
/// write the same file names.
pub(crate) fn resource(
    service: Option<&str>,
    version: Option<&str>,
    environment: Option<&str>,
    instance: Option<&str>,
    forked: bool,
) -> (Resource, Vec<String>) {
    let (mut r, problems) = Resource::from_env();
    if let Some(s) = service.filter(|s| !s.trim().is_empty()) {
        r.service = s.trim().to_string();
    }
    if let Some(v) = version {
        r.version = Some(v.to_string());
    }
    if let Some(e) = environment {
        r.environment = Some(e.to_string());
    }
    if let Some(i) = instance {
        r.instance = Some(i.to_string());
    }
    r.instance = Some(match r.instance.take() {
        Some(i) if forked => format!("{i}-{}", std::process::id()),
        Some(i) => i,
        None => default_instance(),
    });
    (r, problems.into_iter().map(|p| p.to_string()).collect())
}

/// `<host name>-<pid>`: distinct per process, so a forked child gets its own.
fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}-{}", std::process::id())
}
