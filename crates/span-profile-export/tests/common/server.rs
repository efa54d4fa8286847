//! A real HTTP/1.1 server on loopback for the exporter tests: it records every request and
//! answers as the test's handler says (a status, a hang, or a dropped connection).
// Shared by several test binaries, each using some of it: `pub`, and no dead-code warnings.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One request as received.
#[derive(Debug, Clone)]
pub struct Captured {
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Header names lowercased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Captured {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body, gunzipped when `Content-Encoding: gzip` says so.
    pub fn plain_body(&self) -> Vec<u8> {
        if self.header("content-encoding") == Some("gzip") {
            gunzip(&self.body)
        } else {
            self.body.clone()
        }
    }
}

pub fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b)
        .read_to_end(&mut out)
        .expect("valid gzip");
    out
}

/// What to answer.
#[derive(Debug, Clone)]
pub enum Reply {
    Status(u16, Vec<(String, String)>, Vec<u8>),
    /// Keep the connection open and never answer (until the server stops).
    Hang,
}

impl Reply {
    pub fn ok() -> Self {
        Reply::Status(200, Vec::new(), Vec::new())
    }
    pub fn status(code: u16, body: &str) -> Self {
        Reply::Status(code, Vec::new(), body.as_bytes().to_vec())
    }
}

type Handler = dyn Fn(&Captured, usize) -> Reply + Send + Sync;

pub struct CaptureServer {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Captured>>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl CaptureServer {
    /// Binds 127.0.0.1 on a free port; `handler(request, index)` picks the reply.
    pub fn start(handler: impl Fn(&Captured, usize) -> Reply + Send + Sync + 'static) -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), handler)
    }

    /// Binds `addr` (to bring a server back on the same port).
    pub fn start_on(
        addr: SocketAddr,
        handler: impl Fn(&Captured, usize) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind(addr).expect("bind loopback");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let accept = {
            let (requests, stop) = (requests.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let (requests, stop, handler) =
                                (requests.clone(), stop.clone(), handler.clone());
                            std::thread::spawn(move || serve(stream, requests, stop, handler));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            })
        };
        Self {
            addr,
            requests,
            stop,
            accept: Some(accept),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Captured> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived (or `timeout`), and returns them all.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Captured> {
        let end = Instant::now() + timeout;
        loop {
            let r = self.requests();
            if r.len() >= n || Instant::now() >= end {
                return r;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops accepting and closes the listening socket (the port is free again).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

impl Drop for CaptureServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve(
    stream: TcpStream,
    requests: Arc<Mutex<Vec<Captured>>>,
    stop: Arc<AtomicBool>,
    handler: Arc<Handler>,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut out = stream;
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 {
            return;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if let Some(len) = get("content-length").and_then(|l| l.parse::<usize>().ok()) {
        body.resize(len, 0);
        if reader.read_exact(&mut body).is_err() {
            return;
        }
    } else if get("transfer-encoding").as_deref() == Some("chunked") {
        loop {
            let mut size = String::new();
            if reader.read_line(&mut size).unwrap_or(0) == 0 {
                return;
            }
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            if reader.read_exact(&mut chunk).is_err() {
                return;
            }
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    let captured = Captured {
        method,
        path,
        headers,
        body,
        at: Instant::now(),
    };
    let index = {
        let mut r = requests.lock().unwrap();
        r.push(captured.clone());
        r.len() - 1
    };
    match handler(&captured, index) {
        Reply::Hang => {
            let end = Instant::now() + Duration::from_secs(30);
            while !stop.load(Ordering::Acquire) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Reply::Status(code, extra, body) => {
            let mut head = format!(
                "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (k, v) in extra {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = out.write_all(head.as_bytes());
            let _ = out.write_all(&body);
            let _ = out.flush();
        }
    }
}
