//! # span-profile-python
//!
//! The Python side of span-profile:
//!
//! - [`walker`]: the CPython stack walker (reads interpreter memory without the GIL).
//! - `module` (feature `python`): the `span_profile._native` extension module that the
//!   `span_profile` Python package (in `python/`, built with maturin) wraps: the native agent
//!   (core `Profiler` + CPython walker + file store), the span-table hooks the
//!   `SpanProcessor` calls, and the span-object table through which the sampler resolves the
//!   span it finds in OpenTelemetry's own context (ADR 0011).
//!
//! Feature flags:
//! - `python`: the PyO3 module. maturin adds `pyo3/extension-module`; without `python` the
//!   crate builds and tests with no libpython.
//!
//! MSRV: the workspace's `rust-version` (1.95, the toolchain CI tests).

pub mod walker;

#[cfg(feature = "python")]
mod module;
