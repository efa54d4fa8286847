//! Criterion benches: see benches/.
