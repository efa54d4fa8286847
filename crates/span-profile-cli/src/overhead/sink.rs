//! The local endpoint the peer profilers upload to: an HTTP server on 127.0.0.1 that reads
//! each request and answers 200, so that a peer's uploads cost what they would against a real
//! server without one.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result};

/// Answers 200 to every HTTP request: the endpoint peers upload to.
pub(super) fn start() -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding the local sink")?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name("overhead-sink".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = std::thread::Builder::new()
                    .name("overhead-sink-conn".into())
                    .spawn(move || serve(stream));
            }
        })?;
    Ok(format!("http://{addr}"))
}

fn serve(stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut writer = write_half;
    loop {
        let mut len = 0usize;
        let mut line = String::new();
        let mut saw_request = false;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let l = line.trim_end();
            if l.is_empty() {
                if saw_request {
                    break;
                }
                continue;
            }
            saw_request = true;
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        if std::io::copy(&mut (&mut reader).take(len as u64), &mut std::io::sink()).is_err() {
            return;
        }
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}
