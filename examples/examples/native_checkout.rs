//! A Rust checkout service under tokio, profiled by the native walker: `checkout` spans call
//! `inventory.reserve` (waits) and `pricing.calculate` (CPU, slow because it re-parses dates
//! for every line item). Windows go to the file store; query them with the CLI:
//!
//! ```text
//! RUSTFLAGS="-C force-frame-pointers=yes" \
//!   cargo run --release -p span-profile-examples --example native_checkout -- /tmp/native-store 6
//! cargo run -p span-profile-cli -- top /tmp/native-store --slowest pricing.calculate
//! ```
//!
//! Arguments: store directory (default `./native-store`), seconds to run (default 6), and the
//! profiler: `native` (default: span-profile with the native walker), `native-cpu` (the same
//! with CPU-time samples only, no wall signals), `off` (none), `off-symbolized` (none, but this
//! binary's debug info loaded once at start, as both profilers do) or `pprof`
//! (pprof-rs 0.15 at 100 Hz with frame-pointer unwinding, its report built at the end). The
//! last line printed, `result: mode=... orders=... cpu_s=... wall_s=... work_cpu_s=...
//! work_wall_s=...` (the whole process, then the serving phase alone, without the profilers'
//! setup and final report), is for side-by-side runs (`benches/overhead/native_checkout.py`):
//! the same tokio service and OpenTelemetry spans in every mode; only `native` installs
//! span-profile's span processor and context observer.

use std::time::{Duration, Instant};

use anyhow::bail;

use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracerProvider;
use span_profile_core::{otel, Profiler};
use span_profile_export::FileStore;
use span_profile_native::NativeWalker;

/// Parses `YYYY-MM-DD` the slow way: the seed scenario's hot spot.
#[inline(never)]
fn parse_date(s: &str) -> Option<(u32, u32, u32)> {
    let parts: Vec<String> = s.split('-').map(str::to_owned).collect();
    let y = parts.first()?.parse().ok()?;
    let m = parts.get(1)?.parse().ok()?;
    let d = parts.get(2)?.parse().ok()?;
    Some((y, m, d))
}

#[inline(never)]
fn price_line(item: u32, promo_dates: &[String]) -> u64 {
    let mut cents = u64::from(item) * 199;
    for date in promo_dates {
        if let Some((_, m, d)) = parse_date(date) {
            if (m + d + item).is_multiple_of(7) {
                cents = cents * 9 / 10;
            }
        }
    }
    cents
}

#[inline(never)]
fn calculate(items: u32, promo_dates: &[String]) -> u64 {
    (0..items).map(|i| price_line(i, promo_dates)).sum()
}

async fn checkout(order: u64, promo_dates: std::sync::Arc<Vec<String>>) -> u64 {
    let tracer = opentelemetry::global::tracer("checkout");
    let inventory = tracer.start("inventory.reserve");
    async { tokio::time::sleep(Duration::from_millis(3)).await }
        .with_context(Context::current_with_span(inventory))
        .await;
    let pricing = tracer.start("pricing.calculate");
    let cx = Context::current_with_span(pricing);
    let total = async { calculate(40 + (order % 20) as u32, &promo_dates) }
        .with_context(cx.clone())
        .await;
    cx.span().end();
    tokio::task::yield_now().await;
    total
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "native-store".into());
    let secs: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(6);

    let mode = args.next().unwrap_or_else(|| "native".into());
    if !matches!(
        mode.as_str(),
        "native" | "native-cpu" | "off" | "off-symbolized" | "pprof"
    ) {
        bail!("profiler must be native, native-cpu, off, off-symbolized or pprof, not {mode:?}");
    }
    if mode == "off-symbolized" {
        // The control for the profilers' one-off symbolizer warm-up: load this binary's debug
        // info (std's own symbolizer) and nothing else.
        let symbolized = std::backtrace::Backtrace::force_capture().to_string();
        std::hint::black_box(symbolized);
    }
    let native = mode.starts_with("native");
    let cpu0 = process_cpu_s();
    let wall0 = Instant::now();

    let profiler = if native {
        Some(
            NativeWalker::builder()
                .with_wall(mode != "native-cpu")
                .install_in(
                    Profiler::builder()
                        .with_service("native-checkout")
                        .with_window(Duration::from_secs(2)),
                )?
                .with_exporter(FileStore::new(&dir))
                .start()?,
        )
    } else {
        None
    };
    let pprof = if mode == "pprof" {
        Some(
            pprof::ProfilerGuardBuilder::default()
                .frequency(100)
                .blocklist(&["libc", "libgcc", "pthread", "vdso"])
                .build()?,
        )
    } else {
        None
    };
    let provider = match &profiler {
        Some(p) => SdkTracerProvider::builder()
            .with_span_processor(otel::install(p))
            .build(),
        None => SdkTracerProvider::builder().build(),
    };
    opentelemetry::global::set_tracer_provider(provider.clone());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || {
            if native {
                span_profile_native::on_thread_start();
            }
        })
        .on_thread_stop(span_profile_native::on_thread_stop)
        .build()?;
    let promo_dates: std::sync::Arc<Vec<String>> = std::sync::Arc::new(
        (1..=1500)
            .map(|i| format!("2026-{:02}-{:02}", i % 12 + 1, i % 28 + 1))
            .collect(),
    );
    // The serving phase alone, without the profilers' setup and final report.
    let (work_cpu0, work_wall0) = (process_cpu_s(), Instant::now());
    let orders = rt.block_on(async {
        let tracer = opentelemetry::global::tracer("checkout");
        let end = Instant::now() + Duration::from_secs(secs);
        let mut order = 0u64;
        while Instant::now() < end {
            let mut batch = Vec::new();
            for _ in 0..4 {
                order += 1;
                let span = tracer
                    .span_builder("checkout")
                    .with_attributes([KeyValue::new("http.route", "/checkout/{cart}")])
                    .start(&tracer);
                let cx = Context::current_with_span(span);
                let dates = promo_dates.clone();
                let cx2 = cx.clone();
                batch.push(tokio::spawn(
                    async move {
                        let total = checkout(order, dates).await;
                        cx2.span().end();
                        total
                    }
                    .with_context(cx),
                ));
            }
            for h in batch {
                h.await?;
            }
        }
        anyhow::Ok(order)
    })?;
    let (work_cpu, work_wall) = (
        process_cpu_s() - work_cpu0,
        work_wall0.elapsed().as_secs_f64(),
    );
    let by_thread = thread_cpu_s();
    drop(rt);
    let _ = provider.shutdown();
    if let Some(p) = profiler {
        let stats = p.shutdown_with_timeout(Duration::from_secs(10))?;
        eprintln!(
            "{orders} orders; {} samples in {} windows; native: {:?}\nquery: cargo run -p span-profile-cli -- top {dir} --slowest pricing.calculate",
            stats.samples,
            stats.windows,
            span_profile_native::stats()
        );
    }
    if let Some(g) = pprof {
        // Symbolizing is part of pprof-rs's cost, as the window close is part of ours.
        let report = g.report().build()?;
        eprintln!(
            "{orders} orders; pprof-rs: {} samples in {} distinct stacks",
            report.data.values().sum::<isize>(),
            report.data.len()
        );
    }
    // Where the CPU went, by thread name (the profiler's own threads are span-profile-*).
    eprintln!("threads (CPU s since start): {by_thread}");
    println!(
        "result: mode={mode} orders={orders} cpu_s={:.3} wall_s={:.3} work_cpu_s={work_cpu:.3} \
         work_wall_s={work_wall:.3}",
        process_cpu_s() - cpu0,
        wall0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// CPU time of the whole process so far (all its threads, user + system), in seconds, from
/// `/proc/self/stat` (in USER_HZ = 100 ticks: 10 ms resolution).
fn process_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the `(comm)`, which may contain spaces: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / 100.0
}

/// CPU seconds of the live threads so far, summed by thread name (`/proc/self/task/*/stat`).
fn thread_cpu_s() -> String {
    let mut by: std::collections::BTreeMap<String, f64> = Default::default();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ticks: u64 = stat[close + 1..]
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|v| v.parse::<u64>().ok())
            .sum();
        *by.entry(stat[open + 1..close].to_string()).or_default() += ticks as f64 / 100.0;
    }
    by.iter()
        .map(|(name, s)| format!("{name}={s:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}
