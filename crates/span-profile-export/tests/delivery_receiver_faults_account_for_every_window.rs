//! Issue 27's receiver-fault table, against real local servers this test starts: one that
//! hangs (accepts, never answers), one that answers 500, one that closes the connection
//! without answering, one that answers 400, and one that answers 200 after longer than the
//! request timeout. For Pyroscope and OTLP, through the core profiler:
//!
//! - every window made is delivered, waiting or dropped for one reason (the sum holds);
//! - `shutdown_with_timeout` returns within its timeout, whatever the receiver does;
//! - with a disk spool a hanging receiver costs no window: every one waits on disk;
//! - the failures are logged (through `log`, target `span_profile::export`), the first at
//!   once, `stop` says how many windows were not delivered and where they are, and no log line, error or stats dump holds the URL's password.
//!
//! Run with `--no-capture` to see the table.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use span_profile_core::{Exporter, Profiler, ProfilerStats};
use span_profile_export::delivery::{DeliveryConfig, DeliveryStats};
use span_profile_export::otlp::{OtlpConfig, OtlpExporter};
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};
use span_profile_test::FakeWalker;

const PASSWORD: &str = "PASS-27-secret";
const STOP: Duration = Duration::from_millis(1000);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);

#[derive(Debug, Clone, Copy)]
enum Fault {
    Hang,
    Status(u16),
    Close,
    /// 200 after this long (longer than the request timeout).
    Slow(Duration),
}

/// A receiver with one fault; returns its `http://user:PASSWORD@addr`.
fn receiver(fault: Fault) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || serve(conn, fault));
        }
    });
    format!("http://user:{PASSWORD}@{addr}")
}

fn serve(mut conn: std::net::TcpStream, fault: Fault) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 {
            return;
        }
        if h == "\r\n" {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    let _ = reader.read_exact(&mut body);
    let status = match fault {
        Fault::Hang => {
            std::thread::sleep(Duration::from_secs(120));
            return;
        }
        Fault::Close => return,
        Fault::Status(s) => s,
        Fault::Slow(d) => {
            std::thread::sleep(d);
            200
        }
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\ncontent-length: 4\r\nconnection: close\r\n\r\nfail"
    );
}

/// Collects what the delivery logs.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.target().starts_with("span_profile") {
            self.0
                .lock()
                .unwrap()
                .push(format!("{} {}: {}", r.level(), r.target(), r.args()));
        }
    }
    fn flush(&self) {}
}

static LOG: Capture = Capture(Mutex::new(Vec::new()));

/// One exporter, either backend, with its delivery's stats.
enum Backend {
    Pyroscope(Arc<PyroscopeExporter>),
    Otlp(Arc<OtlpExporter>),
}

impl Backend {
    fn new(otlp: bool, url: &str, delivery: DeliveryConfig) -> Self {
        if otlp {
            let c = OtlpConfig::new(url).unwrap().with_delivery(delivery);
            Backend::Otlp(Arc::new(OtlpExporter::new(c).unwrap()))
        } else {
            let c = PyroscopeConfig::new(url).unwrap().with_delivery(delivery);
            Backend::Pyroscope(Arc::new(PyroscopeExporter::new(c).unwrap()))
        }
    }
    fn exporter(&self) -> Arc<dyn Exporter> {
        match self {
            Backend::Pyroscope(e) => e.clone(),
            Backend::Otlp(e) => e.clone(),
        }
    }
    fn stats(&self) -> DeliveryStats {
        match self {
            Backend::Pyroscope(e) => e.stats().delivery,
            Backend::Otlp(e) => e.stats().delivery,
        }
    }
}

struct Run {
    stop: Duration,
    stats: ProfilerStats,
    delivery: DeliveryStats,
    logged: Vec<String>,
}

fn run(otlp: bool, fault: Fault, spool: Option<&std::path::Path>) -> Run {
    LOG.0.lock().unwrap().clear();
    let mut delivery = DeliveryConfig::default()
        .with_timeout(REQUEST_TIMEOUT)
        .with_backoff(Duration::from_millis(100), Duration::from_millis(400));
    if let Some(dir) = spool {
        delivery = delivery.with_spool_dir(dir);
    }
    let backend = Backend::new(otlp, &receiver(fault), delivery);
    let profiler = Profiler::builder()
        .with_service("faults")
        .with_sample_rate_hz(100)
        .with_window(Duration::from_millis(200))
        .with_overhead_budget(None)
        .with_walker(FakeWalker::threads(2, 8))
        .with_shared_exporter(backend.exporter())
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let t0 = Instant::now();
    let _ = profiler.shutdown_with_timeout(STOP);
    let stop = t0.elapsed();
    let stats = profiler.stats();
    std::mem::forget(profiler);
    Run {
        stop,
        stats,
        delivery: backend.stats(),
        logged: LOG.0.lock().unwrap().clone(),
    }
}

fn accounted(s: &ProfilerStats) -> u64 {
    s.exported_windows
        + s.waiting_windows
        + s.dropped_windows
        + s.dropped_spool_full_windows
        + s.dropped_expired_windows
        + s.dropped_rejected_windows
        + s.dropped_at_shutdown_windows
}

#[test]
fn every_fault_accounts_for_every_window_and_stop_keeps_its_timeout() {
    let _ = log::set_logger(&LOG);
    log::set_max_level(log::LevelFilter::Info);
    let slow = Fault::Slow(REQUEST_TIMEOUT + Duration::from_secs(2));
    let faults = [
        ("hangs", Fault::Hang),
        ("500", Fault::Status(500)),
        ("closes", Fault::Close),
        ("400", Fault::Status(400)),
        ("200 after 3.5 s", slow),
    ];
    println!("| backend | receiver | spool | stop() took | logged | made | delivered | waiting | dropped |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for otlp in [false, true] {
        let backend = if otlp { "OTLP" } else { "Pyroscope" };
        for (name, fault) in faults {
            let spools: Vec<Option<tempfile::TempDir>> = match fault {
                Fault::Hang => vec![None, Some(tempfile::tempdir().unwrap())],
                _ => vec![None],
            };
            for spool in spools {
                let r = run(otlp, fault, spool.as_ref().map(|d| d.path()));
                let s = &r.stats;
                let case = format!("{backend} {name} spool={}", spool.is_some());
                assert!(s.windows >= 4, "{case}: {s:?}");
                assert_eq!(accounted(s), s.windows, "{case}: every window once: {s:?}");
                assert!(
                    r.stop <= STOP + Duration::from_millis(300),
                    "{case}: {:?}",
                    r.stop
                );
                // Nothing was accepted; a window is delivered only if it had nothing to send
                // (the first, partial window may hold no sample).
                assert_eq!(r.delivery.sent, 0, "{case}: {:?}", r.delivery);
                assert!(s.exported_windows <= 1, "{case}: {s:?}");
                let with_data = s.windows - s.exported_windows;
                match (fault, &spool) {
                    (Fault::Status(400), _) => {
                        assert_eq!(s.dropped_rejected_windows, with_data, "{case}: {s:?}")
                    }
                    (_, Some(dir)) => {
                        // Nothing lost: every window waits on disk.
                        assert_eq!(s.waiting_windows, with_data, "{case}: {s:?}");
                        assert_eq!(r.delivery.spooled, with_data, "{case}");
                        let on_disk: usize = std::fs::read_dir(dir.path())
                            .unwrap()
                            .flatten()
                            .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
                            .filter(|f| f.file_name().to_string_lossy().ends_with(".req"))
                            .count();
                        assert_eq!(on_disk as u64, with_data, "{case}");
                    }
                    _ => {
                        // A memory spool loses what waits when the delivery stops, and says so.
                        assert_eq!(s.dropped_at_shutdown_windows, with_data, "{case}: {s:?}")
                    }
                }
                assert!(!r.logged.is_empty(), "{case}: the failure is logged");
                // stop() says how many windows were not delivered, and where they are.
                let undelivered =
                    format!("{with_data} of {} window(s) were not delivered", s.windows);
                let said = r.logged.iter().find(|l| l.contains(&undelivered));
                let said = said.unwrap_or_else(|| panic!("{case}: {:?}", r.logged));
                let where_ = if spool.is_some() {
                    "wait in the spool"
                } else {
                    "were lost"
                };
                assert!(said.contains(where_), "{case}: {said}");
                assert!(
                    r.logged
                        .iter()
                        .all(|l| l.starts_with("WARN span_profile::export")),
                    "{case}: {:?}",
                    r.logged
                );
                let everything = format!("{:?} {s:?} {:?}", r.logged, r.delivery);
                assert!(!everything.contains(PASSWORD), "{case}: {everything}");
                let dropped = s.windows - s.exported_windows - s.waiting_windows;
                println!(
                    "| {backend} | {name} | {} | {:.2} s | {} line(s), first: {} | {} | {} | {} | {dropped} |",
                    if spool.is_some() { "disk" } else { "memory" },
                    r.stop.as_secs_f64(),
                    r.logged.len(),
                    r.logged[0].chars().take(90).collect::<String>(),
                    s.windows,
                    s.exported_windows,
                    s.waiting_windows,
                );
            }
        }
    }
}
