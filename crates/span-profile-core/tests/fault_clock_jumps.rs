//! Fault: the wall clock jumps backwards and forwards (NTP step, a VM resumed, an RTC reset to
//! 1970). The runtime closes the window at each jump and keeps sampling: no sample is lost, no
//! window is longer than the window length or ends before it starts, and windows after the
//! jump carry the new time.
//!
//! The clock is injected with the hidden `ProfilerBuilder::with_wall_clock` test hook.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use span_profile_core::Profiler;
use span_profile_test::{FakeWalker, InMemoryExporter};

const SECOND: i64 = 1_000_000_000;

fn real_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[test]
fn windows_close_at_each_jump_and_sampling_goes_on() {
    let offset = Arc::new(AtomicI64::new(0));
    // When non-zero, the clock is stuck at this value (beyond what an i64 offset can reach).
    let fixed = Arc::new(AtomicU64::new(0));
    let clock = {
        let (offset, fixed) = (offset.clone(), fixed.clone());
        move || match fixed.load(Ordering::SeqCst) {
            0 => (real_ns() + offset.load(Ordering::SeqCst)).max(0) as u64,
            f => f,
        }
    };
    let exporter = InMemoryExporter::default();
    let window = Duration::from_secs(1);
    let profiler = Profiler::builder()
        .with_service("clock-jumps")
        .with_sample_rate_hz(200)
        .with_overhead_budget(None)
        .with_window(window)
        .with_walker(FakeWalker::threads(2, 3))
        .with_exporter(exporter.clone())
        .with_wall_clock(clock)
        .start()
        .unwrap();

    // (label, offset): back an hour, forward a day, to 1970 (an RTC reset), back to true time.
    let now = real_ns();
    let phases = [
        ("true time", 0),
        ("an hour back", -3600 * SECOND),
        ("a day ahead", 86_400 * SECOND),
        ("1970", -now + 5 * SECOND),
        ("true time again", 0),
    ];
    for (_, off) in phases {
        offset.store(off, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
    }
    // The end of time: window arithmetic near u64::MAX must not overflow the sampler.
    fixed.store(u64::MAX - 1, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    fixed.store(0, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    let stats = profiler
        .shutdown_with_timeout(Duration::from_secs(5))
        .unwrap();
    let windows = exporter.profiles();

    // Nothing lost: every tick and sample is in some window, every window was exported.
    assert_eq!(stats.windows, windows.len() as u64);
    assert_eq!(stats.exported_windows, stats.windows);
    assert_eq!(
        windows.iter().map(|w| w.stats.ticks).sum::<u64>(),
        stats.ticks
    );
    assert_eq!(
        windows.iter().map(|w| w.total_wall_samples()).sum::<u64>(),
        stats.samples
    );
    // Bounded windows, stamped with the clock of their time.
    for w in &windows {
        assert!(
            w.duration_ns <= window.as_nanos() as u64,
            "a window of {} ns",
            w.duration_ns
        );
        assert!(w.start_unix_ns.checked_add(w.duration_ns).is_some());
        // A window ends where sampling stopped before a jump, not at the jump's start (a
        // backward step used to close it with zero length).
        // (The stuck clock at the end of time does not advance: zero is right there.)
        if w.stats.ticks >= 2 && w.start_unix_ns != u64::MAX - 1 {
            assert!(
                w.duration_ns > 0,
                "{} ticks in a window of 0 ns",
                w.stats.ticks
            );
        }
    }
    assert!(
        windows.iter().any(|w| w.start_unix_ns == u64::MAX - 1),
        "a window at the end of time"
    );
    // Each phase produced a window that starts in it and holds samples: sampling went on
    // through every jump.
    for (label, off) in phases {
        let lo = now + off - 2 * SECOND;
        let hi = now + off + 10 * SECOND;
        let sampled: u64 = windows
            .iter()
            .filter(|w| (lo..hi).contains(&(w.start_unix_ns as i64)))
            .map(|w| w.total_wall_samples())
            .sum();
        assert!(
            sampled > 0,
            "no samples in a window after the jump to {label}: {:?}",
            windows
                .iter()
                .map(|w| (w.start_unix_ns, w.duration_ns, w.total_wall_samples()))
                .collect::<Vec<_>>()
        );
    }
    // At least one window per phase: each jump closed the window it happened in.
    assert!(windows.len() > phases.len(), "{} windows", windows.len());
    eprintln!(
        "windows (start offset from true start s, duration ms, samples): {:?}",
        windows
            .iter()
            .map(|w| (
                (w.start_unix_ns as i64 - now) / SECOND,
                w.duration_ns / 1_000_000,
                w.total_wall_samples()
            ))
            .collect::<Vec<_>>()
    );
}
