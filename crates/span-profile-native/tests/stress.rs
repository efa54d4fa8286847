//! 1,000 threads come and go while the walker samples them at a high rate: every
//! registration succeeds, every slot is released, nothing crashes or leaks.

mod common;

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
    // Every slot was released: 1,000 more registrations fit again, sequentially.
    for _ in 0..1000 {
        drop(span_profile_native::register_current_thread().unwrap());
    }
    assert_eq!(span_profile_native::stats().registered_threads, 0);
}
