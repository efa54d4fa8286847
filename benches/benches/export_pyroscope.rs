//! Figures for the Pyroscope exporter, each with a baseline, one arm per process (so peak RSS
//! and CPU belong to one arm). `scripts/bench-pyroscope.sh` alternates the arms A B A B under
//! `flock /tmp/bench.lock` and prints medians.
//!
//! - `--figure throughput --arm pyroscope|file`: `--windows` (default 30) exports of one
//!   10k-stack window, to a capture server in a child process that answers 200, or to the file
//!   store (the baseline); windows per second from the first `export` until everything is
//!   delivered (`force_flush`), and the process's peak RSS over that time (the high-water
//!   mark is reset once the window is built).
//! - `--figure idle --arm down|up|file`: one window a second for `--seconds` (default 20)
//!   to a server that refuses connections, to the capture server, or to the file store; the
//!   process's CPU (user + system, `getrusage`) over that time, encoding included.
//!
//!     cargo bench -p span-profile-benches --bench export_pyroscope -- --figure idle --arm down
//!
//! Each run prints one `RESULT key=value ...` line. With no `--figure` (and under
//! `cargo test --benches`) every arm runs once, tiny, as a smoke test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};
use span_profile_export::FileStore;

mod export_window;

/// The capture server (`--serve`): reads each request whole and answers 200. Prints its port.
fn serve() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    println!("{}", l.local_addr().expect("addr").port());
    std::io::stdout().flush().expect("stdout");
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
            let _ = (&s)
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        });
    }
}

/// The capture server in a child process (its CPU and memory are not the agent's).
struct Sink {
    child: Child,
    url: String,
}

impl Sink {
    fn start() -> Self {
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .arg("--serve")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the capture server");
        let mut port = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut port)
            .expect("port");
        let url = format!("http://127.0.0.1:{}", port.trim());
        Self { child, url }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn proc_status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets the peak RSS (VmHWM) to the current RSS (Linux 4.0+).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// User + system CPU of the process so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct we own; RUSAGE_SELF is valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn store_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("span-profile-bench-{}", std::process::id()))
}

/// A Pyroscope exporter for `url` whose (memory) spool holds `queue` requests.
fn pyroscope(url: &str, queue: usize) -> PyroscopeExporter {
    PyroscopeExporter::new(
        PyroscopeConfig::new(url)
            .expect("valid url")
            .with_delivery(DeliveryConfig::default().with_spool_max_entries(queue)),
    )
    .expect("exporter")
}

fn throughput(arm: &str, n: usize) {
    if arm != "pyroscope" && arm != "file" {
        panic!("--figure throughput takes --arm pyroscope or file");
    }
    let w = Arc::new(export_window::window(Duration::from_secs(1)));
    let sink = (arm == "pyroscope").then(Sink::start);
    let dir = store_dir();
    let pyro = sink.as_ref().map(|s| pyroscope(&s.url, n * 2));
    let file = (arm == "file").then(|| FileStore::new(&dir));
    let export = |w: &Arc<span_profile_core::Profile>| match (&pyro, &file) {
        (Some(p), _) => p.export(w.clone()),
        (_, Some(f)) => f.export(w.clone()),
        _ => unreachable!(),
    };
    let base = proc_status_kib("VmRSS:");
    reset_peak_rss();
    let t0 = Instant::now();
    for _ in 0..n {
        export(&w).expect("export");
    }
    if let Some(p) = &pyro {
        p.force_flush().expect("flush");
    }
    let took = t0.elapsed();
    let peak = proc_status_kib("VmHWM:");
    let (delivered, dropped) = match &pyro {
        Some(p) => {
            let s = p.stats().delivery;
            (s.sent, s.dropped())
        }
        None => (n as u64, 0),
    };
    println!(
        "RESULT figure=throughput arm={arm} windows={n} stacks={} secs={:.3} windows_per_s={:.2} \
         peak_rss_mib={:.1} base_rss_mib={:.1} delivered={delivered} dropped={dropped}",
        export_window::STACKS,
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        peak as f64 / 1024.0,
        base as f64 / 1024.0,
    );
    if let Some(p) = &pyro {
        let _ = p.shutdown_with_timeout(Duration::from_secs(5));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn idle(arm: &str, seconds: u32) {
    let w = Arc::new(export_window::window(Duration::from_secs(1)));
    let sink = (arm == "up").then(Sink::start);
    let dir = store_dir();
    let dead = || {
        // A port with nothing listening: every connect is refused.
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", l.local_addr().expect("addr"))
    };
    let (file, pyro) = match arm {
        "down" => (None, Some(pyroscope(&dead(), 16))),
        "up" => (None, Some(pyroscope(&sink.as_ref().expect("sink").url, 16))),
        "file" => (Some(FileStore::new(&dir)), None),
        _ => panic!("--figure idle takes --arm down, up or file"),
    };
    reset_peak_rss();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let mut export_time = Duration::ZERO;
    for i in 0..seconds {
        let t = Instant::now();
        let _ = match (&file, &pyro) {
            (Some(f), _) => f.export(w.clone()),
            (_, Some(p)) => p.export(w.clone()),
            _ => unreachable!(),
        };
        export_time += t.elapsed();
        let next = t0 + Duration::from_secs(u64::from(i) + 1);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let wall = t0.elapsed();
    let cpu = cpu_time() - cpu0;
    let peak = proc_status_kib("VmHWM:");
    let s = pyro
        .as_ref()
        .map(|p| p.stats().delivery)
        .unwrap_or_default();
    println!(
        "RESULT figure=idle arm={arm} secs={:.2} cpu_ms={:.1} cpu_pct={:.3} export_ms={:.2} \
         retries={} sent={} spooled={} spooled_mib={:.1} dropped={} peak_rss_mib={:.1}",
        wall.as_secs_f64(),
        cpu.as_secs_f64() * 1000.0,
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        export_time.as_secs_f64() * 1000.0 / f64::from(seconds.max(1)),
        s.retries,
        s.sent,
        s.spooled,
        s.spooled_bytes as f64 / (1 << 20) as f64,
        s.dropped(),
        peak as f64 / 1024.0,
    );
    if let Some(p) = &pyro {
        let _ = p.shutdown_with_timeout(Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--serve") {
        serve();
        return;
    }
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let number = |name: &str, default: u32| {
        value(name)
            .map(|v| v.parse().expect("a number"))
            .unwrap_or(default)
    };
    match (value("--figure").as_deref(), value("--arm")) {
        (Some("throughput"), Some(arm)) => throughput(&arm, number("--windows", 30) as usize),
        (Some("idle"), Some(arm)) => idle(&arm, number("--seconds", 20)),
        (None, None) => {
            // Smoke: every arm, tiny.
            for arm in ["pyroscope", "file"] {
                throughput(arm, 2);
            }
            for arm in ["down", "up", "file"] {
                idle(arm, 1);
            }
        }
        _ => panic!("expected --figure throughput|idle --arm ARM (see the file's docs)"),
    }
}
