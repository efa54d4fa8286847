//! OTLP against pprof for one 10k-stack window (the `export_encode` bench's window): the
//! encoded sizes, and the encoding times measured in the same process, alternating, so both
//! formats see the same machine load. Each round times the four encodings once (and the building
//! of OTLP's messages without encoding them, to show where its time goes), in an order that
//! rotates from round to round; the medians over the rounds, and the median of the
//! per-round OTLP/pprof ratios, are printed with the load average before and after.
//!
//!     flock /tmp/bench.lock cargo run --release -p span-profile-benches --example export_encode_ab [ROUNDS]
//!
//! - pprof: what the file store writes (`encode_pprof_raw`, and `encode_pprof` = gzip of it):
//!   one profile, four values per sample, span ids as string labels.
//! - OTLP: what the exporter sends (`encode_otlp_raw`, and `OtlpExporter::request` = the
//!   gzipped body with its profile ids): a CPU and a wall profile over one dictionary, span
//!   ids as `link_table` rows.

use std::hint::black_box;
use std::time::{Duration, Instant};

use span_profile_core::SpanScope;
use span_profile_export::otlp::{encode_otlp_raw, otlp_request, OtlpConfig, OtlpExporter};

#[path = "../benches/export_window/mod.rs"]
mod export_window;

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(41);
    let p = export_window::window(Duration::ZERO);
    // Never sends: `request` only encodes.
    let otlp = OtlpExporter::new(OtlpConfig::new("http://127.0.0.1:9").expect("a valid url"))
        .expect("an exporter");

    let sizes = [
        ("pprof raw", span_profile_export::encode_pprof_raw(&p).len()),
        ("pprof gzip", span_profile_export::encode_pprof(&p).len()),
        (
            "OTLP cpu+wall raw",
            encode_otlp_raw(&p, SpanScope::All, true).len(),
        ),
        ("OTLP cpu+wall gzip (as sent)", otlp.request(&p).body.len()),
        (
            "OTLP cpu only raw",
            encode_otlp_raw(&p, SpanScope::All, false).len(),
        ),
    ];
    println!(
        "window: {} stacks, {} samples, {} frames",
        p.stacks.len(),
        p.samples.len(),
        p.frames.len()
    );
    for (name, len) in sizes {
        println!("size {name:<30} {len:>9} B");
    }

    type Encode<'a> = Box<dyn Fn() -> usize + 'a>;
    let encoders: [(&str, Encode); 5] = [
        (
            "pprof raw",
            Box::new(|| span_profile_export::encode_pprof_raw(black_box(&p)).len()),
        ),
        (
            "OTLP raw",
            Box::new(|| encode_otlp_raw(black_box(&p), SpanScope::All, true).len()),
        ),
        (
            "pprof gzip",
            Box::new(|| span_profile_export::encode_pprof(black_box(&p)).len()),
        ),
        (
            "OTLP gzip",
            Box::new(|| otlp.request(black_box(&p)).body.len()),
        ),
        // Where OTLP's time goes: building the prost messages, without encoding them.
        (
            "OTLP build",
            Box::new(|| {
                otlp_request(black_box(&p), SpanScope::All, true)
                    .resource_profiles
                    .len()
            }),
        ),
    ];
    let load_before = load();
    // Warm-up: one of each.
    for (_, f) in &encoders {
        black_box(f());
    }
    let mut ms: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); encoders.len()];
    for round in 0..rounds {
        for k in 0..encoders.len() {
            let i = (round + k) % encoders.len();
            let t = Instant::now();
            black_box(encoders[i].1());
            ms[i].push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let load_after = load();
    let ratio = |otlp: usize, pprof: usize| {
        let mut r: Vec<f64> = ms[otlp]
            .iter()
            .zip(&ms[pprof])
            .map(|(o, p)| o / p)
            .collect();
        median(&mut r)
    };
    let (raw_ratio, gzip_ratio) = (ratio(1, 0), ratio(3, 2));
    println!("{rounds} rounds, alternating; load average before {load_before}, after {load_after}");
    for (i, (name, _)) in encoders.iter().enumerate() {
        let mut v = ms[i].clone();
        let med = median(&mut v);
        println!(
            "time {name:<12} median {med:>8.2} ms  (min {:.2}, max {:.2})",
            v[0],
            v[v.len() - 1]
        );
    }
    println!("median per-round ratio OTLP/pprof: raw {raw_ratio:.2}, gzip {gzip_ratio:.2}");
}
