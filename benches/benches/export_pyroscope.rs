//! Figures for the Pyroscope exporter, printed (not criterion-timed):
//! - throughput: 10k-stack windows exported and delivered to a loopback server that answers
//!   200, in windows per second, and the process's peak RSS;
//! - agent CPU while the server is down: one window a second handed to an exporter whose
//!   server refuses connections, CPU of the whole process over that time (windows are built
//!   before the clock starts).
//!
//!     cargo bench -p span-profile-benches --bench export_pyroscope
//!
//! Under `cargo test --benches` it runs a tiny version as a smoke test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};

mod export_window;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A loopback server that reads each request and answers 200.
fn sink() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(&s);
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; len];
                let _ = r.read_exact(&mut body);
                let _ = (&s).write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    format!("http://{addr}")
}

fn proc_status(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU of the process, in clock ticks (1/100 s).
fn cpu_ticks() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_string();
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (n, down_secs) = if full { (40, 20) } else { (2, 1) };

    let windows: Vec<Arc<_>> = (0..n)
        .map(|i| {
            Arc::new(export_window::window(Duration::from_secs(
                n as u64 - i as u64,
            )))
        })
        .collect();
    let rss_before = proc_status("VmHWM:");
    let url = sink();
    let e = PyroscopeExporter::new(
        PyroscopeConfig::new(&url)
            .expect("valid url")
            .with_delivery(DeliveryConfig::default().with_queue(n)),
    )
    .expect("exporter");
    let t0 = Instant::now();
    for w in &windows {
        let _ = block_on(e.export(w.clone()));
    }
    let _ = block_on(e.force_flush());
    let took = t0.elapsed();
    let s = e.stats();
    println!(
        "pyroscope throughput: {n} windows of {} stacks in {took:?} = {:.1} windows/s (sent {}, dropped {}); \
         peak RSS {} MiB (windows built: {} MiB)",
        export_window::STACKS,
        n as f64 / took.as_secs_f64(),
        s.delivery.sent,
        s.delivery.dropped(),
        proc_status("VmHWM:") / 1024,
        rss_before / 1024,
    );
    let _ = block_on(e.shutdown_with_timeout(Duration::from_secs(5)));

    // Server down: a port with nothing listening.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", l.local_addr().expect("addr"))
    };
    let e =
        PyroscopeExporter::new(PyroscopeConfig::new(&dead).expect("valid url")).expect("exporter");
    let w = windows[windows.len() - 1].clone();
    let cpu0 = cpu_ticks();
    let t0 = Instant::now();
    let mut export_time = Duration::ZERO;
    for _ in 0..down_secs {
        let t = Instant::now();
        let _ = block_on(e.export(w.clone()));
        export_time += t.elapsed();
        std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
    }
    let wall = t0.elapsed();
    let cpu = Duration::from_millis((cpu_ticks() - cpu0) * 10);
    let s = e.stats().delivery;
    println!(
        "server down for {wall:?}: agent CPU {cpu:?} ({:.2}% of one core) incl. encoding one window/s; \
         export() took {:?} per window; {} attempts failed, {} spooled ({} MiB), {} dropped",
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        export_time / down_secs,
        s.retries,
        s.spooled,
        s.spooled_bytes >> 20,
        s.dropped(),
    );
    let _ = block_on(e.shutdown_with_timeout(Duration::from_millis(100)));
}
