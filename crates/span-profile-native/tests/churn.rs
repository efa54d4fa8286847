//! Fault: 10,000 threads created and destroyed per second for two seconds, each registered
//! with the walker (a CPU timer each) while the walker samples at 1 kHz. Many threads exit
//! while being sampled. Nothing crashes, every registration is released (so memory stays
//! bounded), timers never fail, and the achieved rate is printed (run with `--nocapture`).
//! The pace is a target, not an assertion: shared machines vary. `CHURN_BASELINE=1` runs the
//! same churn without registering the threads, the baseline to compare the rate with:
//! `cargo test --release -p span-profile-native --test churn -- --nocapture`.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use span_profile_native::NativeWalker;

const TARGET_PER_S: u64 = 10_000;
const SECONDS: u64 = 2;

#[test]
fn ten_thousand_registered_threads_a_second_come_and_go() {
    let w = NativeWalker::builder().with_cpu_hz(1000).build().unwrap();
    let sampler = common::Background::start(w, Duration::from_millis(1));
    let before = span_profile_native::stats();
    let ran = Arc::new(AtomicU64::new(0));
    let register = std::env::var_os("CHURN_BASELINE").is_none();
    let start = Instant::now();
    let total = TARGET_PER_S * SECONDS;
    let mut spawned = 0u64;
    // Two batches in flight: the previous one is joined after the next one is started.
    let mut in_flight: Vec<std::thread::JoinHandle<()>> = Vec::new();
    // Paced in batches of 100: batch k may start no earlier than k * 10 ms.
    while spawned < total {
        let due = start + Duration::from_micros(spawned * 1_000_000 / TARGET_PER_S);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let batch: Vec<std::thread::JoinHandle<()>> = (0..100)
            .map(|i| {
                let ran = ran.clone();
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let _g = register
                            .then(|| span_profile_native::register_current_thread().unwrap());
                        common::spin_for(Duration::from_micros(20 + (i % 7) * 10));
                        ran.fetch_add(1, Ordering::Relaxed);
                    })
                    .unwrap()
            })
            .collect();
        for t in std::mem::replace(&mut in_flight, batch) {
            t.join().unwrap();
        }
        spawned += 100;
    }
    for t in in_flight {
        t.join().unwrap();
    }
    let elapsed = start.elapsed();
    let (w, walks, _) = sampler.finish();
    let after = span_profile_native::stats();
    println!(
        "churn: {} threads in {:.2} s = {:.0}/s (target {TARGET_PER_S}/s); {walks} walks; \
         {} samples",
        ran.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        ran.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        after.samples - before.samples,
    );
    assert_eq!(ran.load(Ordering::Relaxed), total);
    assert_eq!(
        after.registered_threads, 0,
        "every slot released: {after:?}"
    );
    assert_eq!(after.register_full, before.register_full, "{after:?}");
    assert_eq!(after.timer_errors, before.timer_errors, "{after:?}");
    assert!(walks > 100, "the walker kept walking: {walks}");
    drop(w);
}
