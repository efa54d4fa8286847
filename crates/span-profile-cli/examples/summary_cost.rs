//! What a window's summary costs the exporter thread: building it from a 10k-stack window of
//! `gen_store` (20 routes, 2,000 spans of 20 names) and encoding the sidecar.
//! `cargo run --release -p span-profile-cli --example summary_cost -- [runs]` prints the median
//! and the sidecar's size.

use std::time::Instant;

use span_profile_export::store::encode_summary;
use span_profile_export::store::summary::WindowSummary;

#[allow(dead_code)]
#[path = "gen_store.rs"]
mod gen_store;

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(31);
    let p = gen_store::window(0, 10_000, "1.4.2");
    let mut times = Vec::with_capacity(runs);
    let mut len = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let s = WindowSummary::from_profile(&p);
        len = encode_summary(&s, 0).len();
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "summary of a 10k-stack window: median {:.2} ms over {runs} runs (min {:.2}, max {:.2}); sidecar {len} bytes",
        times[runs / 2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times[runs - 1].as_secs_f64() * 1e3,
    );
}
