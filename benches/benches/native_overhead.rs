//! Native walker overhead, measured (not timed tests). Prints figures; run with frame
//! pointers so both profilers unwind fully:
//!
//! ```text
//! RUSTFLAGS="-C force-frame-pointers=yes" CARGO_TARGET_DIR=target/fp \
//!   cargo bench -p span-profile-benches --bench native_overhead -- [secs] [rounds] [parts]
//! ```
//!
//! 1. Agent CPU at 100 Hz, in two workloads, each run `rounds` times alternating no profiler
//!    (A) and span-profile with the native walker (B): 8 threads always busy; 64 threads
//!    parked 12 frames deep (as the Python `idle64` variant); 64 threads that each do 3 units
//!    of work then sleep 10 ms (under one core in all, waking every tick). The
//!    agent's CPU in a B run is the process CPU beyond what its work costs at the neighbouring
//!    A run's units per CPU-second: sampler and export threads, the handler and the kernel's
//!    signal delivery in the sampled threads, the span hooks. The sampler and export threads'
//!    own share is printed too (from `ProfilerStats`).
//! 2. Side by side with pprof-rs 0.15 (frame-pointer unwinding, 100 Hz, SIGPROF) on the same
//!    workload: 4 threads doing fixed units of work (date parsing, as in the checkout demo);
//!    work done per CPU-second of the process, runs alternating off / native / pprof, medians.
//!    For the same comparison on the demo itself: `benches/overhead/native_checkout.py`.
//!    `cargo bench` passes `--bench`; without `secs` each run is 1 s (a smoke test). `parts`
//!    picks some of `busy8,idle64,wake64,pprof` (default all).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use span_profile_core::Profiler;
use span_profile_native::NativeWalker;
use span_profile_test::InMemoryExporter;

#[inline(never)]
fn parse_date(s: &str) -> Option<(u32, u32, u32)> {
    let parts: Vec<String> = s.split('-').map(str::to_owned).collect();
    Some((
        parts.first()?.parse().ok()?,
        parts.get(1)?.parse().ok()?,
        parts.get(2)?.parse().ok()?,
    ))
}

/// One unit of work: 200 date parses.
#[inline(never)]
fn unit(dates: &[String]) -> u64 {
    dates
        .iter()
        .filter_map(|d| parse_date(d))
        .map(|(y, m, d)| u64::from(y + m + d))
        .sum()
}

fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How each worker thread works.
#[derive(Clone, Copy)]
enum Pace {
    /// Always busy.
    Busy,
    /// This many units, then 10 ms asleep, over and over.
    Units(u64),
    /// Parked on a condition variable 12 frames deep until the run ends (no work).
    Parked,
}

/// Parks 12 frames deep until `stop` is set.
#[inline(never)]
fn park_deep(depth: u32, stop: &(Mutex<bool>, Condvar)) {
    if depth > 0 {
        park_deep(depth - 1, stop);
        std::hint::black_box(depth);
        return;
    }
    let mut done = stop.0.lock().unwrap_or_else(PoisonError::into_inner);
    while !*done {
        done = stop.1.wait(done).unwrap_or_else(PoisonError::into_inner);
    }
}

/// Runs `threads` workers for `secs`; returns units done.
fn workload(threads: usize, secs: f64, pace: Pace, register: bool) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let parked = Arc::new((Mutex::new(false), Condvar::new()));
    let done = Arc::new(AtomicU64::new(0));
    let dates: Arc<Vec<String>> = Arc::new(
        (0..200)
            .map(|i| format!("2026-{:02}-{:02}", i % 12 + 1, i % 28 + 1))
            .collect(),
    );
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (stop, done, dates) = (stop.clone(), done.clone(), dates.clone());
            let parked = parked.clone();
            std::thread::spawn(move || {
                let _g = register.then(span_profile_native::register_current_thread);
                while !stop.load(Ordering::Relaxed) {
                    match pace {
                        Pace::Parked => park_deep(12, &parked),
                        Pace::Busy => {
                            std::hint::black_box(unit(&dates));
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Pace::Units(n) => {
                            for _ in 0..n {
                                std::hint::black_box(unit(&dates));
                            }
                            done.fetch_add(n, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    *parked.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
    parked.1.notify_all();
    for h in hs {
        let _ = h.join();
    }
    done.load(Ordering::Relaxed)
}

fn native_profiler() -> Profiler {
    NativeWalker::builder()
        .install_in(
            Profiler::builder()
                .with_sample_rate_hz(100)
                .with_overhead_budget(None),
        )
        .expect("walker")
        .with_exporter(InMemoryExporter::default())
        .start()
        .expect("profiler")
}

/// One run of a workload, with or without the native profiler.
struct Run {
    units: f64,
    cpu_s: f64,
    wall_s: f64,
    /// Sampler + export threads' CPU (native runs only).
    agent_threads_s: f64,
    samples: u64,
    ticks: u64,
}

fn run(threads: usize, pace: Pace, secs: f64, native: bool) -> Run {
    let samples0 = span_profile_native::stats().samples;
    let cpu0 = process_cpu_ns();
    let t0 = Instant::now();
    let p = native.then(native_profiler);
    let units = workload(threads, secs, pace, native);
    let stats = p.map(|p| {
        p.shutdown_with_timeout(Duration::from_secs(10))
            .expect("shutdown")
    });
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = (process_cpu_ns() - cpu0) as f64 / 1e9;
    if std::env::var_os("NATIVE_DEBUG").is_some() {
        eprintln!("{stats:?}\n{:?}", span_profile_native::stats());
    }
    Run {
        units: units as f64,
        cpu_s,
        wall_s,
        agent_threads_s: stats
            .as_ref()
            .map_or(0.0, |s| (s.sampler_cpu_ns + s.exporter_cpu_ns) as f64 / 1e9),
        samples: span_profile_native::stats().samples - samples0,
        ticks: stats.map_or(0, |s| s.ticks),
    }
}

/// Alternates no profiler (A) and the native profiler (B) `rounds` times and prints medians.
fn agent_cpu(label: &str, threads: usize, pace: Pace, secs: f64, rounds: usize) {
    let (mut agent, mut threads_share, mut eff_a, mut eff_b, mut cpu_a, mut cpu_b) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut rate, mut tick_rate) = (vec![], vec![]);
    for _ in 0..rounds {
        let a = run(threads, pace, secs, false);
        let b = run(threads, pace, secs, true);
        let ea = a.units / a.cpu_s;
        // CPU beyond what B's work costs at A's efficiency (without work: beyond A's CPU per
        // second), per wall-second, in % of a core.
        let expected = if a.units > 0.0 {
            b.units / ea
        } else {
            a.cpu_s * b.wall_s / a.wall_s
        };
        agent.push(100.0 * (b.cpu_s - expected) / b.wall_s);
        threads_share.push(100.0 * b.agent_threads_s / b.wall_s);
        eff_a.push(ea);
        eff_b.push(b.units / b.cpu_s);
        cpu_a.push(100.0 * a.cpu_s / a.wall_s);
        cpu_b.push(100.0 * b.cpu_s / b.wall_s);
        rate.push(b.samples as f64 / b.wall_s);
        tick_rate.push(b.ticks as f64 / b.wall_s);
    }
    println!(
        "agent CPU, {label} ({rounds} x A B of {secs} s): runs {agent:.2?} % of a core\n  \
         median {:.2}% of a core (sampler+export threads {:.2}%); units per CPU-s A {:.0} \
         B {:.0} (B/A {:.4}); process CPU A {:.1}% B {:.1}% of a core; {:.0} samples/s, \
         {:.0} ticks/s",
        median(agent.clone()),
        median(threads_share),
        median(eff_a.clone()),
        median(eff_b.clone()),
        median(eff_b) / median(eff_a),
        median(cpu_a),
        median(cpu_b),
        median(rate),
        median(tick_rate),
    );
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Off,
    Native,
    Pprof,
}

/// Units per CPU-second of the whole process.
fn efficiency(mode: Mode, secs: f64) -> f64 {
    let native = (mode == Mode::Native).then(native_profiler);
    let pprof = (mode == Mode::Pprof).then(|| {
        pprof::ProfilerGuardBuilder::default()
            .frequency(100)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .expect("pprof")
    });
    let cpu0 = process_cpu_ns();
    let units = workload(4, secs, Pace::Busy, mode == Mode::Native);
    // Each profiler's report/symbolization work is part of its cost.
    if let Some(g) = pprof {
        let _ = std::hint::black_box(g.report().build());
    }
    if let Some(p) = native {
        let _ = p.shutdown_with_timeout(Duration::from_secs(10));
    }
    let cpu = (process_cpu_ns() - cpu0) as f64 / 1e9;
    units as f64 / cpu
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    // Which parts to run (default all): busy8, idle64, wake64, pprof.
    let parts = args
        .get(2)
        .map_or("busy8,idle64,wake64,pprof", String::as_str);
    let part = |p: &str| parts.split(',').any(|x| x == p);
    // Symbolization of first-seen frames is a one-off cost: pay it before measuring.
    let _warm = run(8, Pace::Busy, secs.min(1.0), true);
    if part("busy8") {
        agent_cpu("8 busy threads", 8, Pace::Busy, secs, rounds);
    }
    if part("idle64") {
        let label = "64 threads parked 12 frames deep";
        agent_cpu(label, 64, Pace::Parked, secs, rounds);
    }
    if part("wake64") {
        let label = "64 threads (3 units, then 10 ms asleep)";
        agent_cpu(label, 64, Pace::Units(3), secs, rounds);
    }
    if !part("pprof") {
        return;
    }
    let (mut off, mut nat, mut pp) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        off.push(efficiency(Mode::Off, secs));
        nat.push(efficiency(Mode::Native, secs));
        pp.push(efficiency(Mode::Pprof, secs));
    }
    println!("runs: off {off:.0?}\n      native {nat:.0?}\n      pprof-rs {pp:.0?}");
    let (o, n, p) = (median(off), median(nat), median(pp));
    println!(
        "side by side ({rounds} rounds of {secs} s, medians, units per CPU-second): off {o:.0}, \
         span-profile-native {n:.0} ({:+.2}%), pprof-rs {p:.0} ({:+.2}%)",
        100.0 * (n / o - 1.0),
        100.0 * (p / o - 1.0)
    );
}
