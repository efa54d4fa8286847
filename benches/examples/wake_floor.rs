//! The floor under every sampler's CPU: a thread that does nothing but wake at the sampling
//! rate. It sleeps `1 / rate` seconds in a loop (`std::thread::sleep`, a `nanosleep`) and reads
//! its own CPU time from `/proc/thread-self/schedstat`, the clock the overhead figures use.
//! Nothing is sampled, aggregated or exported, so no sampler running at that rate on this
//! machine can cost less.
//!
//!     flock /tmp/bench.lock cargo run --release -p span-profile-benches --example wake_floor [SECONDS] [RATE_HZ] [ROUNDS] [SLACK_NS] [HOW]
//!
//! Prints, per round, the thread's CPU as a share of one core and the CPU per wake-up, then
//! the median over the rounds, with the load average before and after. With `SLACK_NS` the
//! thread's timer slack is set to it first (`/proc/self/timerslack_ns`, as
//! `prctl(PR_SET_TIMERSLACK)` would: the loop runs on the main thread; Linux's default is
//! 50,000 ns), to see whether letting the kernel coalesce the wake-up with other timers
//! changes what it costs (0 leaves it alone).
//!
//! `HOW` is how the thread sleeps: `sleep` (the default), `park` (`thread::park_timeout` to a
//! deadline, a futex wait with a timeout, as the sampler does), `timerfd` (a blocking read of a
//! periodic `timerfd`: the kernel re-arms the timer) or `absolute` (`clock_nanosleep` to an
//! absolute time); `all` runs the four in turn within each round, to compare them.

use std::time::{Duration, Instant};

const HOWS: [&str; 4] = ["sleep", "park", "timerfd", "absolute"];

/// Sleeps `wakes` times, `period` apart, the way `how` names.
fn sleep_loop(how: &str, period: Duration, wakes: u64) {
    match how {
        "sleep" => {
            for _ in 0..wakes {
                std::thread::sleep(period);
            }
        }
        "park" => {
            let mut next = Instant::now() + period;
            for _ in 0..wakes {
                loop {
                    let now = Instant::now();
                    if now >= next {
                        break;
                    }
                    std::thread::park_timeout(next - now);
                }
                next += period;
            }
        }
        "timerfd" => timerfd_loop(period, wakes),
        "absolute" => absolute_loop(period, wakes),
        other => panic!("HOW is one of sleep, park, timerfd, absolute, all; not {other:?}"),
    }
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

fn timerfd_loop(period: Duration, wakes: u64) {
    // SAFETY: plain system calls on a descriptor this function owns; `its` and `buf` are live
    // locals of the sizes the calls take, and the descriptor is closed once, at the end.
    unsafe {
        let fd = libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC);
        assert!(fd >= 0, "timerfd_create failed");
        let its = libc::itimerspec {
            it_interval: timespec(period),
            it_value: timespec(period),
        };
        assert_eq!(libc::timerfd_settime(fd, 0, &its, std::ptr::null_mut()), 0);
        let mut buf = 0u64;
        for _ in 0..wakes {
            // A read that failed (a signal) would return at once and count as a wake-up.
            let n = libc::read(fd, (&mut buf as *mut u64).cast(), 8);
            assert_eq!(n, 8, "reading the timerfd failed");
        }
        libc::close(fd);
    }
}

fn absolute_loop(period: Duration, wakes: u64) {
    // SAFETY: `ts` is a live local timespec; the calls only read or write it.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        assert_eq!(libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts), 0);
        let step = period.as_nanos() as i64;
        for _ in 0..wakes {
            let ns = ts.tv_nsec as i64 + step;
            ts.tv_sec += (ns / 1_000_000_000) as libc::time_t;
            ts.tv_nsec = (ns % 1_000_000_000) as libc::c_long;
            // To an absolute time, so a sleep a signal cut short is simply slept again.
            loop {
                match libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                ) {
                    0 => break,
                    libc::EINTR => continue,
                    e => panic!("clock_nanosleep failed: error {e}"),
                }
            }
        }
    }
}

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
    let how: String = arg(5, "sleep".to_string());
    let hows: Vec<&str> = match how.as_str() {
        "all" => HOWS.to_vec(),
        one => vec![one],
    };
    if slack_ns > 0 {
        std::fs::write("/proc/self/timerslack_ns", slack_ns.to_string())
            .expect("setting /proc/self/timerslack_ns (Linux 4.6 and later)");
        let set = std::fs::read_to_string("/proc/self/timerslack_ns").unwrap_or_default();
        println!("timer slack: {} ns", set.trim());
    }
    let period = Duration::from_secs_f64(1.0 / rate);
    let wakes = (seconds * rate) as u64;
    println!("load before: {}", load());
    let mut rows: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); hows.len()];
    for round in 1..=rounds {
        for (i, how) in hows.iter().enumerate() {
            let (c0, t0) = (thread_cpu_ns(), Instant::now());
            sleep_loop(how, period, wakes);
            let (cpu, wall) = (thread_cpu_ns() - c0, t0.elapsed());
            let share = cpu as f64 / wall.as_nanos() as f64;
            let per_wake_us = cpu as f64 / wakes.max(1) as f64 / 1000.0;
            println!(
                "round {round} ({how}): {:.3}% of a core, {:.1} µs of CPU per wake-up ({wakes} wake-ups at {rate} Hz in {:.2} s)",
                100.0 * share,
                per_wake_us,
                wall.as_secs_f64()
            );
            rows[i].0.push(share);
            rows[i].1.push(per_wake_us);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (how, (shares, per_wake)) in hows.iter().zip(rows) {
        println!(
            "median ({how}): {:.3}% of a core, {:.1} µs of CPU per wake-up",
            100.0 * median(shares),
            median(per_wake)
        );
    }
    println!("load after: {}", load());
}
