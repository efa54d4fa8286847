//! Runnable examples: `examples/python/checkout.py` (the seed scenario) and the Rust examples
//! in `examples/examples`. This crate also compiles the README's Rust example as a doctest.

#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
