//! Native walker overhead, measured (not timed tests). Prints figures; run with frame
//! pointers so both profilers unwind fully:
//!
//! ```text
//! RUSTFLAGS="-C force-frame-pointers=yes" CARGO_TARGET_DIR=target/fp \
//!   cargo bench -p span-profile-benches --bench native_overhead -- [secs] [rounds]
//! ```
//!
//! 1. Agent CPU at 100 Hz: the profiler's own threads (sampler + export, from
//!    `ProfilerStats`) and the handler time in the sampled threads (samples × the per-sample
//!    cost of the `native_sample` bench), with 8 busy threads and with 64 threads that each
//!    work 1 ms in 10.
//! 2. Side by side with pprof-rs 0.15 (frame-pointer unwinding, 100 Hz, SIGPROF) on the same
//!    workload: 4 threads doing fixed units of work (date parsing, as in the checkout demo);
//!    work done per CPU-second of the process, runs alternating off / native / pprof, medians.
//!    `cargo bench` passes `--bench`; without `secs` each run is 1 s (a smoke test).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
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

/// Runs `threads` workers for `secs`; each works `busy` of every 10 ms (10 = always).
/// Returns units done.
fn workload(threads: usize, secs: f64, busy_ms: u64, register: bool) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let dates: Arc<Vec<String>> = Arc::new(
        (0..200)
            .map(|i| format!("2026-{:02}-{:02}", i % 12 + 1, i % 28 + 1))
            .collect(),
    );
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (stop, done, dates) = (stop.clone(), done.clone(), dates.clone());
            std::thread::spawn(move || {
                let _g = register.then(span_profile_native::register_current_thread);
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    while t0.elapsed() < Duration::from_millis(busy_ms.min(10)) {
                        std::hint::black_box(unit(&dates));
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    if busy_ms < 10 {
                        std::thread::sleep(Duration::from_millis(10 - busy_ms));
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
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

fn agent_cpu(label: &str, threads: usize, busy_ms: u64, secs: f64) {
    let before = span_profile_native::stats().samples;
    let p = native_profiler();
    let t0 = Instant::now();
    workload(threads, secs, busy_ms, true);
    let stats = p
        .shutdown_with_timeout(Duration::from_secs(10))
        .expect("shutdown");
    let wall = t0.elapsed().as_secs_f64();
    let samples = span_profile_native::stats().samples - before;
    if std::env::var_os("NATIVE_DEBUG").is_some() {
        eprintln!("{label}: {stats:?}\n{:?}", span_profile_native::stats());
    }
    if stats.ticks > 0 {
        println!(
            "  ({} sampler ticks = {:.0}/s of the 100/s asked)",
            stats.ticks,
            stats.ticks as f64 / wall
        );
    }
    let agent = (stats.sampler_cpu_ns + stats.exporter_cpu_ns) as f64 / 1e9;
    println!(
        "agent CPU {label}: sampler+export {:.2}% of a core; {} samples ({:.0}/s) taken by the \
         handler in the sampled threads",
        100.0 * agent / wall,
        samples,
        samples as f64 / wall
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
    let units = workload(4, secs, 10, mode == Mode::Native);
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
    // Symbolization of first-seen frames is a one-off cost: pay it before measuring.
    agent_cpu(
        "warm-up (symbolizes first-seen frames; not a figure)",
        8,
        10,
        secs.min(2.0),
    );
    agent_cpu("8 busy threads", 8, 10, secs);
    agent_cpu("64 threads (1 ms work in 10)", 64, 1, secs);
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
