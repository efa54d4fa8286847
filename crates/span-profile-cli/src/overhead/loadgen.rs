//! The open-loop load generator of `span-profile overhead --rate-rps`: requests arrive on a
//! schedule set by the clock, not by the service, and each one's latency runs from its
//! *scheduled* arrival to the end of its response.
//!
//! A pacer thread puts each arrival's due time on a queue when it falls due (a fixed interval, or
//! Poisson gaps from a seeded generator); a pool of worker threads, each with its own keep-alive
//! connection, takes arrivals off the queue. When every worker is busy an arrival waits on the
//! queue, and that wait counts in its latency: queueing is measured, not hidden (no coordinated
//! omission). The generator runs in the CLI's process, so its CPU is not the service's.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// How arrivals are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Arrivals {
    /// Exponential gaps of mean 1 / rate (seeded, so every arm gets the same schedule).
    Poisson,
    /// Exactly 1 / rate apart.
    Fixed,
}

/// Where requests go: `http://HOST:PORT/PATH` (plain HTTP/1.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `HOST:PORT`, as connected to and sent as `Host`.
    pub(crate) authority: String,
    /// The request target, starting with `/`.
    pub(crate) path: String,
}

impl Target {
    /// Parses `http://HOST[:PORT][/PATH]`; port 80 and path `/` by default.
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("--url {url}: give a plain http:// URL, e.g. http://127.0.0.1:8000/checkout")
        })?;
        let (auth, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if auth.is_empty() {
            return Err(format!("--url {url}: the URL has no host"));
        }
        let authority = if auth
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            auth.to_string()
        } else {
            format!("{auth}:80")
        };
        Ok(Self {
            authority,
            path: path.to_string(),
        })
    }
}

/// What one load phase did.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct LoadResult {
    /// Arrivals scheduled and handed to the workers.
    pub(crate) sent: u64,
    /// Responses with a 2xx status.
    pub(crate) completed: u64,
    /// Arrivals that got no 2xx response (refused, reset, timed out, other status).
    pub(crate) errors: u64,
    /// Arrivals sent again on a new connection because the service had closed the kept-alive
    /// one they first went out on (each counts once in `completed` or `errors`).
    pub(crate) retried: u64,
    /// Wall time from the first arrival to the last response, in seconds.
    pub(crate) seconds: f64,
    /// Latency percentiles of the completed requests, in ms, from scheduled arrival.
    pub(crate) p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub(crate) p99_ms: Option<f64>,
    /// 99.9th percentile, ms.
    pub(crate) p999_ms: Option<f64>,
    /// The slowest, ms.
    pub(crate) max_ms: Option<f64>,
}

/// The `q` quantile of sorted values (nearest rank), or None when there are none.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let k = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted.get(k.min(sorted.len() - 1)).copied()
}

/// A small seeded generator (xorshift64*) for the Poisson gaps: the same seed, the same
/// schedule in every arm.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        // In (0, 1]: never 0, so ln() is finite.
        (v as f64 + 1.0) / (1u64 << 53) as f64
    }
}

/// One keep-alive connection, reconnected when the service closes it.
struct Conn {
    authority: String,
    stream: Option<BufReader<TcpStream>>,
    /// Requests sent again on a new connection because the service had closed the kept-alive
    /// one (see [`Conn::request`]).
    retried: u64,
}

impl Conn {
    fn new(authority: String) -> Self {
        Self {
            authority,
            stream: None,
            retried: 0,
        }
    }

    /// Sends request `i` and reads its response: whether it was a 2xx. A kept-alive connection
    /// the service closed while it sat idle (uvicorn closes one after 5 s) fails before any
    /// byte of the response; the request is then sent again, once, on a new connection (RFC
    /// 9112 9.3.1 lets a client retry an idempotent request so), and its latency still runs from
    /// its scheduled arrival. A new connection that fails is an error.
    fn request(&mut self, path: &str, i: u64) -> std::io::Result<bool> {
        let reused = self.stream.is_some();
        let r = match self.connect().and_then(|()| self.exchange(path, i)) {
            Err(e) if reused && closed_before_answer(&e) => {
                self.stream = None;
                self.retried += 1;
                self.connect().and_then(|()| self.exchange(path, i))
            }
            r => r,
        };
        if !matches!(r, Ok(true)) {
            self.stream = None;
        }
        r
    }

    fn connect(&mut self) -> std::io::Result<()> {
        if self.stream.is_none() {
            let s = TcpStream::connect(&self.authority)?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            s.set_nodelay(true)?;
            self.stream = Some(BufReader::new(s));
        }
        Ok(())
    }

    fn exchange(&mut self, path: &str, i: u64) -> std::io::Result<bool> {
        let Some(s) = self.stream.as_mut() else {
            return Ok(false);
        };
        let sep = if path.contains('?') { '&' } else { '?' };
        let req = format!(
            "GET {path}{sep}i={i} HTTP/1.1\r\nHost: {}\r\nUser-Agent: span-profile-overhead\r\n\r\n",
            self.authority
        );
        s.get_mut().write_all(req.as_bytes())?;
        let mut line = String::new();
        if s.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                CLOSED_BEFORE_ANSWER,
            ));
        }
        let ok = line
            .split_whitespace()
            .nth(1)
            .is_some_and(|c| c.starts_with('2'));
        // Once the response has begun, a broken connection is not the idle close that
        // `request` retries: its error is passed on as one of another kind.
        let close = read_rest(s, line)
            .map_err(|e| std::io::Error::other(format!("the response broke off: {e}")))?;
        if close {
            self.stream = None;
        }
        Ok(ok)
    }
}

/// Reads a response's headers and body after its status line (`line`, reused as a buffer);
/// returns whether the connection closes after it.
fn read_rest(s: &mut BufReader<TcpStream>, mut line: String) -> std::io::Result<bool> {
    let mut length = None;
    let mut chunked = false;
    let mut close = false;
    loop {
        line.clear();
        if s.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
            match k.as_str() {
                "content-length" => length = v.parse::<u64>().ok(),
                "transfer-encoding" => chunked = v.contains("chunked"),
                "connection" => close = v == "close",
                _ => {}
            }
        }
    }
    if chunked {
        loop {
            line.clear();
            s.read_line(&mut line)?;
            let n = u64::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
            skip(s, n + 2)?;
            if n == 0 {
                break;
            }
        }
    } else if let Some(n) = length {
        skip(s, n)?;
    } else {
        std::io::copy(s, &mut std::io::sink())?;
        close = true;
    }
    Ok(close)
}

/// Reads and drops `n` bytes of the response; a body cut short is an error, not a response.
fn skip(s: &mut BufReader<TcpStream>, n: u64) -> std::io::Result<()> {
    if std::io::copy(&mut s.by_ref().take(n), &mut std::io::sink())? < n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// The service closed the connection before the first byte of its response.
const CLOSED_BEFORE_ANSWER: &str = "the service closed the connection before answering";

/// Whether `e` says the request never got an answer because the connection was closed under
/// it: the write failed, or the response's first read found the end or a reset.
fn closed_before_answer(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    matches!(e.kind(), BrokenPipe | ConnectionReset | ConnectionAborted)
}

/// Runs `duration` of open-loop load at `rate` arrivals a second on `connections` workers, the
/// requests numbered from `first` (sent as `i=N`). Waits at most `drain` after the last arrival
/// for the responses still out; those count as errors.
pub(crate) fn run(
    target: &Target,
    rate: f64,
    duration: Duration,
    arrivals: Arrivals,
    connections: usize,
    first: u64,
    seed: u64,
) -> LoadResult {
    let (tx, rx) = mpsc::channel::<(u64, Instant)>();
    let rx = Arc::new(Mutex::new(rx));
    let (done_tx, done_rx) = mpsc::channel::<Option<f64>>();
    let retried = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..connections.max(1) {
        let rx = Arc::clone(&rx);
        let done = done_tx.clone();
        let mut conn = Conn::new(target.authority.clone());
        let retried = Arc::clone(&retried);
        let path = target.path.clone();
        let spawned = std::thread::Builder::new()
            .name("overhead-load".into())
            .spawn(move || loop {
                // A poisoned lock only means another worker panicked; the queue is still good.
                let next = match rx.lock() {
                    Ok(guard) => guard.recv(),
                    Err(p) => p.into_inner().recv(),
                };
                let Ok((i, due)) = next else {
                    retried.fetch_add(conn.retried, Ordering::Relaxed);
                    break;
                };
                let ok = matches!(conn.request(&path, i), Ok(true));
                let _ = done.send(ok.then(|| due.elapsed().as_secs_f64() * 1000.0));
            });
        if let Ok(h) = spawned {
            workers.push(h);
        }
    }
    drop(done_tx);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let t0 = Instant::now();
    let mut due = t0;
    let mut sent = 0u64;
    while due.duration_since(t0) < duration {
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        if workers.is_empty() || tx.send((first + sent, due)).is_err() {
            break;
        }
        sent += 1;
        let gap = match arrivals {
            Arrivals::Fixed => 1.0 / rate,
            Arrivals::Poisson => -rng.unit().ln() / rate,
        };
        due += Duration::from_secs_f64(gap);
    }
    drop(tx);
    let mut lat = Vec::with_capacity(sent as usize);
    let mut errors = 0u64;
    // Every arrival sent is answered on `done_rx` (a worker reports each one it took), and
    // the channel closes when the workers have drained the queue and exited.
    for r in done_rx.iter() {
        match r {
            Some(ms) => lat.push(ms),
            None => errors += 1,
        }
    }
    for w in workers {
        let _ = w.join();
    }
    let seconds = t0.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let answered = lat.len() as u64 + errors;
    LoadResult {
        sent,
        completed: lat.len() as u64,
        // Arrivals no worker took (every worker failed to start) count as errors too.
        errors: errors + sent.saturating_sub(answered),
        // The workers have been joined: each added its count as it exited.
        retried: retried.load(Ordering::Relaxed),
        seconds,
        p50_ms: quantile(&lat, 0.5),
        p99_ms: quantile(&lat, 0.99),
        p999_ms: quantile(&lat, 0.999),
        max_ms: lat.last().copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = Target::parse("http://127.0.0.1:8000/checkout/a").unwrap();
        assert_eq!(t.authority, "127.0.0.1:8000");
        assert_eq!(t.path, "/checkout/a");
        let t = Target::parse("http://localhost").unwrap();
        assert_eq!(
            (t.authority.as_str(), t.path.as_str()),
            ("localhost:80", "/")
        );
        assert!(Target::parse("https://x").is_err());
        assert!(Target::parse("http:///x").is_err());
    }

    /// Reads one request's head, to its blank line, and answers it with `body` under a
    /// `Content-Length` of 2, kept alive (no `Connection: close`).
    fn answer(r: &mut BufReader<std::net::TcpStream>, body: &[u8]) {
        let mut line = String::new();
        while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
            line.clear();
        }
        let _ = r
            .get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n");
        let _ = r.get_mut().write_all(body);
    }

    /// A service that answers `answers` requests on each connection, each with a keep-alive
    /// response (no `Connection: close`), then closes the connection as an idle timeout would.
    /// Returns its address and how many connections it accepted.
    fn closing_service(answers: usize) -> (String, Arc<AtomicU64>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                count.fetch_add(1, Ordering::Relaxed);
                let mut r = BufReader::new(stream);
                for _ in 0..answers {
                    answer(&mut r, b"ok");
                }
                // Dropped: closed, with nothing said.
            }
        });
        (addr, accepted)
    }

    #[test]
    fn a_kept_alive_connection_the_service_closed_is_retried_once_on_a_new_one() {
        let (addr, accepted) = closing_service(1);
        let mut conn = Conn::new(addr);
        assert!(conn.request("/", 0).unwrap());
        // Let the service's close arrive, as after an idle timeout.
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            conn.request("/", 1).unwrap(),
            "the second request is answered"
        );
        assert_eq!(conn.retried, 1);
        assert_eq!(accepted.load(Ordering::Relaxed), 2);
        assert!(conn.request("/", 2).unwrap());
        assert_eq!((conn.retried, accepted.load(Ordering::Relaxed)), (2, 3));
    }

    #[test]
    fn a_new_connection_closed_before_answering_is_an_error_not_retried() {
        let (addr, accepted) = closing_service(0);
        let mut conn = Conn::new(addr);
        let e = conn.request("/", 0).unwrap_err();
        assert!(closed_before_answer(&e), "{e}");
        assert_eq!((conn.retried, accepted.load(Ordering::Relaxed)), (0, 1));
    }

    #[test]
    fn a_response_cut_short_is_an_error_and_not_sent_again() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut r = BufReader::new(stream);
            // Two bytes announced; the second response sends one and closes.
            answer(&mut r, b"ok");
            answer(&mut r, b"o");
        });
        let mut conn = Conn::new(addr);
        assert!(conn.request("/", 0).unwrap());
        let e = conn.request("/", 1).unwrap_err();
        assert!(!closed_before_answer(&e), "{e}");
        assert_eq!(conn.retried, 0);
    }

    #[test]
    fn the_load_counts_retried_requests_once_each() {
        let (addr, _) = closing_service(2);
        let target = Target::parse(&format!("http://{addr}/")).unwrap();
        let r = run(
            &target,
            200.0,
            Duration::from_millis(300),
            Arrivals::Fixed,
            1,
            0,
            1,
        );
        assert!(r.sent >= 3, "{r:?}");
        assert_eq!(r.errors, 0, "{r:?}");
        assert_eq!(r.completed, r.sent);
        // The service answers two requests a connection: the first request of every
        // connection after the first went out on the closed one before, and was sent again.
        assert_eq!(r.retried, r.sent.div_ceil(2) - 1, "{r:?}");
    }

    #[test]
    fn quantiles_and_poisson_gaps() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(501.0));
        assert_eq!(quantile(&v, 0.999), Some(999.0));
        assert_eq!(quantile(&[], 0.5), None);
        let mut rng = Rng(42);
        let n = 20_000;
        let mean: f64 = (0..n).map(|_| -rng.unit().ln()).sum::<f64>() / f64::from(n);
        assert!((mean - 1.0).abs() < 0.03, "mean gap {mean}");
    }
}
