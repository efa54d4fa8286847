//! The floor under every sampler's CPU: a thread that does nothing but wake at the sampling
//! rate. It sleeps `1 / rate` seconds in a loop (`std::thread::sleep`, a `nanosleep`) and reads
//! its own CPU time from `/proc/thread-self/schedstat`, the clock the overhead figures use.
//! Nothing is sampled, aggregated or exported, so no sampler running at that rate on this
//! machine can cost less.
//!
//!     flock /tmp/bench.lock cargo run --release -p span-profile-benches --example wake_floor [SECONDS] [RATE_HZ] [ROUNDS] [SLACK_NS]
//!
//! Prints, per round, the thread's CPU as a share of one core and the CPU per wake-up, then
//! the median over the rounds, with the load average before and after. With `SLACK_NS` the
//! thread's timer slack is set to it first (`/proc/self/timerslack_ns`, as
//! `prctl(PR_SET_TIMERSLACK)` would: the loop runs on the main thread; Linux's default is
//! 50,000 ns), to see whether letting the kernel coalesce the wake-up with other timers
//! changes what it costs.

use std::time::{Duration, Instant};

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The calling thread's cumulative CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn arg<T: std::str::FromStr>(i: usize, default: T) -> T {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let seconds: f64 = arg(1, 5.0);
    let rate: f64 = arg(2, 100.0);
    let rounds: usize = arg(3, 3);
    let slack_ns: u64 = arg(4, 0);
    if slack_ns > 0 {
        std::fs::write("/proc/self/timerslack_ns", slack_ns.to_string())
            .expect("setting /proc/self/timerslack_ns (Linux 4.6 and later)");
        let set = std::fs::read_to_string("/proc/self/timerslack_ns").unwrap_or_default();
        println!("timer slack: {} ns", set.trim());
    }
    let period = Duration::from_secs_f64(1.0 / rate);
    let wakes = (seconds * rate) as u64;
    println!("load before: {}", load());
    let mut shares = Vec::new();
    for round in 1..=rounds {
        let (c0, t0) = (thread_cpu_ns(), Instant::now());
        for _ in 0..wakes {
            std::thread::sleep(period);
        }
        let (cpu, wall) = (thread_cpu_ns() - c0, t0.elapsed());
        let share = cpu as f64 / wall.as_nanos() as f64;
        println!(
            "round {round}: {:.3}% of a core, {:.1} µs of CPU per wake-up ({wakes} wake-ups at {rate} Hz in {:.2} s)",
            100.0 * share,
            cpu as f64 / wakes.max(1) as f64 / 1000.0,
            wall.as_secs_f64()
        );
        shares.push(share);
    }
    shares.sort_by(f64::total_cmp);
    println!(
        "median: {:.3}% of a core; load after: {}",
        100.0 * shares[shares.len() / 2],
        load()
    );
}
