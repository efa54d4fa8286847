//! A sample's CPU weight is the CPU time its thread really used (ADR 0019): the `cpu_ns` of a
//! thread's samples adds up to what the thread's own CPU clock measured, at any duty cycle,
//! with the CPU timer on or off.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{serial, Collect};
use span_profile_core::StackWalker;
use span_profile_native::NativeWalker;

/// The calling thread's CPU time, in nanoseconds, as the kernel accounts it.
fn own_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: (1) `ts` is a valid, exclusively borrowed timespec; the per-thread clock of the
    // calling thread always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Burns CPU for `busy` out of every 20 ms (a duty cycle), then sleeps, until `stop`.
/// Returns the CPU time the thread used while registered, measured by its own clock.
fn duty_cycle(name: &str, busy: Duration, stop: Arc<AtomicBool>, tx: mpsc::Sender<(String, u64)>) {
    let name = name.to_string();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let guard = span_profile_native::register_current_thread().unwrap();
            let start = own_cpu_ns();
            let period = Duration::from_millis(20);
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                common::spin_for(busy);
                if let Some(rest) = period.checked_sub(t0.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
            let used = own_cpu_ns() - start;
            drop(guard);
            tx.send((name, used)).unwrap();
        })
        .unwrap();
}

/// Runs a 100% and a 20% thread for `run` under `w`, walking every 10 ms, and returns, per
/// thread, (CPU the thread measured, CPU its samples carry).
fn measure(mut w: NativeWalker, run: Duration) -> Vec<(String, u64, u64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    duty_cycle(
        "duty-100",
        Duration::from_millis(20),
        stop.clone(),
        tx.clone(),
    );
    duty_cycle("duty-20", Duration::from_millis(4), stop.clone(), tx);
    let mut sink = Collect::default();
    let end = Instant::now() + run;
    while Instant::now() < end {
        w.walk(&mut sink);
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let measured: Vec<(String, u64)> = (0..2).map(|_| rx.recv().unwrap()).collect();
    // The threads have deregistered: what they left in their rings is drained by this walk.
    w.walk(&mut sink);
    measured
        .into_iter()
        .map(|(name, used)| {
            let profiled = sink
                .samples
                .iter()
                .filter(|g| g.thread == name)
                .map(|g| g.cpu_ns)
                .sum();
            (name, used, profiled)
        })
        .collect()
}

fn assert_within_10_percent(rows: &[(String, u64, u64)], mode: &str) {
    for (name, used, profiled) in rows {
        let ratio = *profiled as f64 / *used as f64;
        eprintln!(
            "{mode}: {name}: measured {:.3} s, profile {:.3} s, ratio {ratio:.3}",
            *used as f64 / 1e9,
            *profiled as f64 / 1e9
        );
        assert!(
            (0.9..=1.1).contains(&ratio),
            "{mode}: {name} used {used} ns of CPU but its samples carry {profiled} ns"
        );
    }
}

#[test]
fn cpu_timer_samples_carry_the_cpu_time_threads_used() {
    let _s = serial();
    let w = NativeWalker::builder().with_cpu_hz(100).build().unwrap();
    let rows = measure(w, Duration::from_secs(3));
    assert_within_10_percent(&rows, "cpu timer");
}

#[test]
fn wall_samples_alone_carry_the_cpu_time_threads_used() {
    let _s = serial();
    // No CPU timer: each wall sample carries what its thread used since its previous one.
    let w = NativeWalker::builder().with_cpu_hz(0).build().unwrap();
    let rows = measure(w, Duration::from_secs(3));
    assert_within_10_percent(&rows, "wall only");
}
