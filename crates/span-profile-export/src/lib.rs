//! # span-profile-export
//!
//! Where span-profile's windows go, and how they are read back.
//!
//! - [`encode_pprof`] / [`encode_pprof_raw`]: a [`Profile`](span_profile_core::Profile) as
//!   pprof (gzip or bare), readable by `go tool pprof`, with per-sample labels `trace_id`,
//!   `span_id`, `local_root_span_id`, `route`, `thread_name` and `task_name`; [`write_pprof`]
//!   streams the gzip form to a writer instead of holding it.
//! - [`decode_pprof`] and [`DecodeError`]: the inverse; it accepts gzip or bare pprof, never
//!   panics, and also reads profiles written by other tools.
//! - [`pprof`]: the prost messages of pprof's `profile.proto`.
//! - [`FileStore`] (feature `file`): an [`Exporter`](span_profile_core::Exporter) writing one
//!   `.pb.gz` per window with atomic renames. Each window has a `.pb.gz.summary` sidecar that
//!   answers route, service, version and time questions without decoding the window.
//! - [`store`] (feature `file`): the read path. Listing and reading stored windows and their
//!   summaries ([`store::list`], [`store::read`], [`store::read_summary`]), the parallel fold
//!   ([`store::Store`]), and the questions asked of windows: [`store::query`] (reports,
//!   routes, spans), [`store::diff`] and [`store::summary`] (window summaries, whose binary
//!   form is [`store::encode_summary`] / [`store::decode_summary`]).
//!
//! ## Lossless files
//!
//! pprof has no field for the resource, the window's drop counters or the span table. The
//! encoder writes them as one JSON document in a field of the pprof message that pprof does
//! not define (ADR 0024), so that `decode_pprof(&encode_pprof(&p)) == p`, while other pprof
//! readers skip it and show plain pprof, with no comment. Files written before that carried
//! the document in a `span-profile.meta=` comment; [`decode_pprof`] still reads them.
//!
//! - [`pyroscope::PyroscopeExporter`] (feature `pyroscope`): windows pushed to Pyroscope.
//! - [`otlp::OtlpExporter`] (feature `otlp`): windows sent as OTLP profiles over HTTP.
//! - [`delivery`]: the worker, spool and retries both network exporters share.
//! - [`exporter_for_output`]: one place that turns an `output` setting (a directory,
//!   `pyroscope+http://…`, `otlp+http://…`) into an exporter, configured from [`ExporterEnv`].
//!
//! ## Feature flags
//!
//! - `file` (default): the [`FileStore`].
//! - `pyroscope` (default): the Pyroscope exporter (pulls in `ureq` with rustls).
//! - `otlp` (default): the OTLP profiles exporter (pulls in `ureq` and `opentelemetry-proto`).
//!
//! MSRV: the workspace's `rust-version` (1.95, the toolchain CI tests); raising it is a minor-version change.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "file")]
mod civil;
mod config;
mod decode;
#[cfg(any(feature = "pyroscope", feature = "otlp"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "pyroscope", feature = "otlp"))))]
pub mod delivery;
mod encode;
#[cfg(feature = "file")]
mod file;
#[cfg(feature = "file")]
mod layout;
mod meta;
#[cfg(feature = "otlp")]
#[cfg_attr(docsrs, doc(cfg(feature = "otlp")))]
pub mod otlp;
mod output;
pub mod pprof;
#[cfg(feature = "pyroscope")]
#[cfg_attr(docsrs, doc(cfg(feature = "pyroscope")))]
pub mod pyroscope;
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub mod store;

pub use config::{redact_url, ConfigError, ExporterEnv, Secret};
pub use output::{exporter_for_output, parse_output, Output, OutputError};

pub use decode::{decode_pprof, DecodeError, MAX_DECOMPRESSED_LEN};
pub use encode::{encode_pprof, encode_pprof_raw, write_pprof, TRUNCATED_FRAME};
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub use file::{FileStore, StaleFiles, STALE_AFTER};
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub use layout::{sanitize_component, summary_path, FILE_SUFFIX, SUMMARY_SUFFIX, TEMP_PREFIX};
