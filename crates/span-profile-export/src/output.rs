//! One place that turns an `output` setting into an exporter, for the Python module and the
//! CLI alike.

use std::path::PathBuf;

use span_profile_core::Exporter;

use crate::config::{redact_url, ConfigError};
use crate::ExporterEnv;

/// Where an `output` setting sends windows. `Debug` and `Display` show URLs redacted
/// ([`redact_url`]).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Output {
    /// A local directory (the file store): a path, or `file:///absolute/path`.
    Dir(PathBuf),
    /// Pyroscope: `pyroscope+http://host:4040` or `pyroscope+https://…`; holds the inner URL.
    Pyroscope(String),
    /// An OTLP/HTTP receiver: `otlp+http://host:4318` or `otlp+https://…`; holds the inner URL.
    Otlp(String),
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Output::Dir(d) => write!(f, "{}", d.display()),
            Output::Pyroscope(u) => write!(f, "pyroscope+{}", redact_url(u)),
            Output::Otlp(u) => write!(f, "otlp+{}", redact_url(u)),
        }
    }
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Output::Dir(d) => f.debug_tuple("Dir").field(d).finish(),
            Output::Pyroscope(u) => f.debug_tuple("Pyroscope").field(&redact_url(u)).finish(),
            Output::Otlp(u) => f.debug_tuple("Otlp").field(&redact_url(u)).finish(),
        }
    }
}

/// Why an `output` setting cannot be used. Messages never contain credentials.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The setting is empty.
    #[error("output is empty; pass a directory such as \"./profiles\", pyroscope+http://host:4040 or otlp+http://host:4318")]
    Empty,
    /// A `file://` URL without an absolute path.
    #[error("output {0:?}: a file:// URL needs an absolute path, as in file:///var/lib/profiles")]
    RelativeFileUrl(String),
    /// A scheme that is not supported.
    #[error("output {output:?}: unknown scheme {scheme:?}; use a directory path, file:///path, pyroscope+http(s)://host:port or otlp+http(s)://host:port")]
    UnknownScheme {
        /// The setting, without credentials.
        output: String,
        /// The scheme.
        scheme: String,
    },
    /// The exporter for this scheme was not compiled in.
    #[error("output {output:?}: this build has no {feature} exporter; rebuild span-profile-export with the {feature:?} feature")]
    NotBuilt {
        /// The setting, without credentials.
        output: String,
        /// The cargo feature that provides it.
        feature: &'static str,
    },
    /// The exporter's configuration (URL, environment) is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Parses an `output` setting without starting anything.
///
/// ```
/// use span_profile_export::{parse_output, Output};
/// assert_eq!(parse_output("./profiles").unwrap(), Output::Dir("./profiles".into()));
/// assert_eq!(
///     parse_output("pyroscope+https://pyro.example:4040").unwrap(),
///     Output::Pyroscope("https://pyro.example:4040".into())
/// );
/// assert_eq!(parse_output("otlp+http://localhost:4318").unwrap(), Output::Otlp("http://localhost:4318".into()));
/// assert!(parse_output("gopher://x").is_err());
/// ```
pub fn parse_output(output: &str) -> Result<Output, OutputError> {
    let trimmed = output.trim();
    if trimmed.is_empty() {
        return Err(OutputError::Empty);
    }
    let Some((scheme, rest)) = trimmed.split_once("://") else {
        return Ok(Output::Dir(PathBuf::from(trimmed)));
    };
    let scheme_lc = scheme.to_ascii_lowercase();
    let inner = |s: &str| format!("{s}://{rest}");
    match scheme_lc.as_str() {
        "file" if rest.starts_with('/') => Ok(Output::Dir(PathBuf::from(rest))),
        "file" => Err(OutputError::RelativeFileUrl(redact_url(trimmed))),
        "pyroscope+http" => Ok(Output::Pyroscope(inner("http"))),
        "pyroscope+https" => Ok(Output::Pyroscope(inner("https"))),
        "otlp+http" => Ok(Output::Otlp(inner("http"))),
        "otlp+https" => Ok(Output::Otlp(inner("https"))),
        _ => Err(OutputError::UnknownScheme {
            output: redact_url(trimmed),
            scheme: scheme.to_string(),
        }),
    }
}

/// Builds the exporter for an `output` setting: a directory (the file store), a
/// `pyroscope+http(s)://` URL or an `otlp+http(s)://` URL, configured from `env` (see
/// [`crate::pyroscope`] and [`crate::otlp`] for the variables). The exporter states the span
/// its backend keeps samples under ([`Exporter::span_scope`]): the innermost for the file
/// store, the configured scope for Pyroscope (local root by default) and OTLP (all by
/// default).
///
/// ```
/// use span_profile_core::SpanScope;
/// use span_profile_export::{exporter_for_output, ExporterEnv};
/// let env = ExporterEnv::from_pairs([("PYROSCOPE_TENANT_ID", "team-a")]);
/// let exporter = exporter_for_output("pyroscope+http://127.0.0.1:4040", &env).unwrap();
/// assert_eq!(exporter.span_scope(), SpanScope::LocalRoot);
/// let err = exporter_for_output("otlp+http://", &env).unwrap_err();
/// assert!(err.to_string().contains("host"), "{err}");
/// ```
pub fn exporter_for_output(
    output: &str,
    env: &ExporterEnv,
) -> Result<Box<dyn Exporter>, OutputError> {
    let _ = env;
    match parse_output(output)? {
        #[cfg(feature = "file")]
        Output::Dir(dir) => Ok(Box::new(crate::FileStore::new(dir))),
        #[cfg(not(feature = "file"))]
        Output::Dir(_) => Err(OutputError::NotBuilt {
            output: output.trim().to_string(),
            feature: "file",
        }),
        #[cfg(feature = "pyroscope")]
        Output::Pyroscope(url) => {
            let config = crate::pyroscope::PyroscopeConfig::from_env(&url, env)?;
            Ok(Box::new(crate::pyroscope::PyroscopeExporter::new(config)?))
        }
        #[cfg(not(feature = "pyroscope"))]
        Output::Pyroscope(_) => Err(OutputError::NotBuilt {
            output: redact_url(output.trim()),
            feature: "pyroscope",
        }),
        #[cfg(feature = "otlp")]
        Output::Otlp(url) => {
            let config = crate::otlp::OtlpConfig::from_env(&url, env)?;
            Ok(Box::new(crate::otlp::OtlpExporter::new(config)?))
        }
        #[cfg(not(feature = "otlp"))]
        Output::Otlp(_) => Err(OutputError::NotBuilt {
            output: redact_url(output.trim()),
            feature: "otlp",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_file_url_does_not_echo_its_credentials() {
        // Found by the output_url fuzz target.
        let err = parse_output("file://user:hunter2@host/x")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("absolute path"), "{err}");
    }

    #[test]
    fn an_output_shows_its_url_redacted() {
        let o = parse_output("pyroscope+http://u:hunter2@h:4040").unwrap();
        assert_eq!(o.to_string(), "pyroscope+http://u:***@h:4040");
        assert!(!format!("{o:?}").contains("hunter2"), "{o:?}");
    }
}
