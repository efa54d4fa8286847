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
//! Arguments: store directory (default `./native-store`), seconds to run (default 6).

use std::time::{Duration, Instant};

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
            if (m + d + item) % 7 == 0 {
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

    let profiler = NativeWalker::builder()
        .install_in(
            Profiler::builder()
                .with_service("native-checkout")
                .with_window(Duration::from_secs(2)),
        )?
        .with_exporter(FileStore::new(&dir))
        .start()?;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(otel::install(&profiler))
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(span_profile_native::on_thread_start)
        .on_thread_stop(span_profile_native::on_thread_stop)
        .build()?;
    let promo_dates: std::sync::Arc<Vec<String>> = std::sync::Arc::new(
        (1..=1500)
            .map(|i| format!("2026-{:02}-{:02}", i % 12 + 1, i % 28 + 1))
            .collect(),
    );
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
    drop(rt);
    let _ = provider.shutdown();
    let stats = profiler.shutdown_with_timeout(Duration::from_secs(10))?;
    eprintln!(
        "{orders} orders; {} samples in {} windows; native: {:?}\nquery: cargo run -p span-profile-cli -- top {dir} --slowest pricing.calculate",
        stats.samples,
        stats.windows,
        span_profile_native::stats()
    );
    Ok(())
}
