//! 1,000 threads come and go while the walker samples them: first in waves of 50 at a high
//! rate, then 1,000 registered at the same time at 100 Hz. Every registration succeeds, every
//! slot is released, nothing crashes or leaks.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use span_profile_native::NativeWalker;

#[test]
fn a_thousand_threads_come_and_go() {
    let w = NativeWalker::builder().with_cpu_hz(1000).build().unwrap();
    let sampler = common::Background::start(w, Duration::from_millis(2));
    let before = span_profile_native::stats();
    for wave in 0..20 {
        let threads: Vec<_> = (0..50)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("stress-{}", i % 8))
                    .spawn(move || {
                        if (wave + i) % 2 == 0 {
                            let _g = span_profile_native::register_current_thread().unwrap();
                            common::spin_for(Duration::from_millis(2));
                            std::thread::sleep(Duration::from_millis(1));
                        } else {
                            // Released by the thread-local destructor at exit.
                            span_profile_native::register_current_thread_until_exit().unwrap();
                            common::spin_for(Duration::from_millis(2));
                        }
                    })
                    .unwrap()
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
    let (w, _, reported) = sampler.finish();
    let after = span_profile_native::stats();
    assert_eq!(after.registered_threads, 0, "{after:?}");
    assert_eq!(after.register_full, before.register_full);
    assert_eq!(after.timer_errors, before.timer_errors);
    assert!(after.samples > before.samples, "{after:?}");
    assert!(reported > 0);
    drop(w);

    // 1,000 threads registered at once (the table holds 1,024), sampled at 100 Hz (CPU and
    // wall), then all leaving while the walker runs.
    const AT_ONCE: usize = 1000;
    let w = NativeWalker::builder().build().unwrap();
    let sampler = common::Background::start(w, Duration::from_millis(10));
    let before = span_profile_native::stats();
    let all_in = Arc::new(Barrier::new(AT_ONCE + 1));
    let go = Arc::new(Barrier::new(AT_ONCE + 1));
    let threads: Vec<_> = (0..AT_ONCE)
        .map(|i| {
            let (all_in, go) = (all_in.clone(), go.clone());
            std::thread::Builder::new()
                .name(format!("crowd-{}", i % 8))
                .stack_size(128 * 1024)
                .spawn(move || {
                    let g = if i % 2 == 0 {
                        Some(span_profile_native::register_current_thread().unwrap())
                    } else {
                        span_profile_native::register_current_thread_until_exit().unwrap();
                        None
                    };
                    all_in.wait();
                    go.wait();
                    common::spin_for(Duration::from_millis(2));
                    drop(g);
                })
                .unwrap()
        })
        .collect();
    all_in.wait();
    let crowd = span_profile_native::stats();
    // Let the walker signal and drain the whole crowd for a few ticks.
    std::thread::sleep(Duration::from_millis(100));
    go.wait();
    for t in threads {
        t.join().unwrap();
    }
    let (w, walks, reported) = sampler.finish();
    let after = span_profile_native::stats();
    assert_eq!(crowd.registered_threads, AT_ONCE, "{crowd:?}");
    assert_eq!(after.registered_threads, 0, "{after:?}");
    assert_eq!(after.register_full, before.register_full, "{after:?}");
    assert_eq!(after.timer_errors, before.timer_errors, "{after:?}");
    assert!(
        walks > 5 && reported > 0,
        "{walks} walks, {reported} samples"
    );
    drop(w);
    // Every slot was released: 1,000 more registrations fit again, sequentially.
    for _ in 0..1000 {
        drop(span_profile_native::register_current_thread().unwrap());
    }
    assert_eq!(span_profile_native::stats().registered_threads, 0);
}
