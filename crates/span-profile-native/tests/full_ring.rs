//! A full buffer is counted: a thread sampled at 1 kHz while the walker does not drain fills
//! its ring; the handler counts every sample it could not store (`stats().ring_full`), the
//! next walk reports each as `WalkError::Skipped`, and the ring's contents are intact.

mod common;

use std::time::{Duration, Instant};

use common::Collect;
use span_profile_core::{StackWalker, WalkError};
use span_profile_native::NativeWalker;

/// Samples a thread's ring holds (`table::RING`).
const RING: usize = 16;

#[test]
fn a_full_ring_is_counted_and_reported() {
    let guard = span_profile_native::register_current_thread().unwrap();
    let before = span_profile_native::stats();
    let mut w = NativeWalker::builder()
        .with_cpu_hz(1000)
        .with_wall(false)
        .build()
        .unwrap();
    // Burn CPU without walking until the handler has had to drop some samples (bounded: a
    // loaded machine only makes it slower).
    let end = Instant::now() + Duration::from_secs(20);
    while span_profile_native::stats().ring_full < before.ring_full + 20 && Instant::now() < end {
        common::spin_for(Duration::from_millis(10));
    }
    // Stop producing before reading the counters: no timer, so no more samples.
    let mut sink = Collect::default();
    drop(guard);
    let after = span_profile_native::stats();
    w.walk(&mut sink);
    let lost = after.ring_full - before.ring_full;
    assert!(lost >= 20, "only {lost} samples lost: {after:?}");
    assert_eq!(
        after.samples - before.samples,
        RING as u64,
        "the ring took exactly its capacity: {after:?}"
    );
    assert_eq!(sink.samples.len(), RING, "the ring's samples were drained");
    let skipped = sink
        .errors
        .iter()
        .filter(|e| **e == WalkError::Skipped)
        .count() as u64;
    assert_eq!(skipped, lost, "every lost sample reported once");
    // Reported once: the next walk has nothing new.
    let mut again = Collect::default();
    w.walk(&mut again);
    assert!(again.errors.is_empty(), "{:?}", again.errors);
}
