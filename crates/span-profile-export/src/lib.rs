//! Exporters (being written).
#![forbid(unsafe_code)]
