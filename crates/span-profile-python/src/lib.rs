//! span_profile (being written).
