//! Wall time is not lost while a thread cannot take its wall signal (it waits for a CPU, or
//! masks the signal): the walker keeps at most one wall signal pending per thread, and the
//! sample that signal finally takes stands for every tick it waited through.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::Collect;
use span_profile_core::StackWalker;
use span_profile_native::NativeWalker;

const TICKS: u32 = 30;

fn mask(sig: i32, how: i32) {
    // SAFETY: `set` is initialised by sigemptyset before use; pthread_sigmask changes only
    // the calling thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        assert_eq!(libc::pthread_sigmask(how, &set, std::ptr::null_mut()), 0);
    }
}

#[test]
fn a_late_wall_sample_stands_for_the_ticks_it_waited() {
    let (to_main, from_worker) = mpsc::channel::<()>();
    let (to_worker, from_main) = mpsc::channel::<()>();
    let worker = std::thread::Builder::new()
        .name("masked".into())
        .spawn(move || {
            let _g = span_profile_native::register_current_thread().unwrap();
            let sig = span_profile_native::signal().unwrap();
            mask(sig, libc::SIG_BLOCK);
            to_main.send(()).unwrap();
            from_main.recv().unwrap();
            // The pending wall signal is delivered as this returns.
            mask(sig, libc::SIG_UNBLOCK);
            to_main.send(()).unwrap();
            from_main.recv().unwrap();
        })
        .unwrap();
    // Wall only: no CPU timer, so every wall signal becomes a sample.
    let mut w = NativeWalker::builder().with_cpu_hz(0).build().unwrap();
    from_worker.recv().unwrap();
    let mut sink = Collect::default();
    // The first walk sends a wall signal, which stays pending; the others owe their tick.
    for _ in 0..TICKS {
        w.walk(&mut sink);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        sink.samples.iter().all(|g| g.thread != "masked"),
        "a sample while the signal was masked"
    );
    to_worker.send(()).unwrap();
    from_worker.recv().unwrap();
    w.walk(&mut sink);
    to_worker.send(()).unwrap();
    worker.join().unwrap();
    let late: Vec<_> = sink
        .samples
        .iter()
        .filter(|g| g.thread == "masked")
        .collect();
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(late[0].weight, TICKS, "one sample for the {TICKS} ticks");
    assert!(
        late[0].cpu_ns < 5_000_000,
        "the thread was waiting, not running"
    );
}
