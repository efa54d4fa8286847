//! `span-profile push DIR URL` sends what an agent that is gone left in its spool directory,
//! every window once and in order, to a receiver that came back; a second push finds nothing.
//! A push to a receiver that still fails leaves the entries and exits 4.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use span_profile_core::{Exporter, Frame, Profile, ProfileSample, Resource, Stack};
use span_profile_export::delivery::DeliveryConfig;
use span_profile_export::pyroscope::{Protocol, PyroscopeConfig, PyroscopeExporter};

/// A window of `checkout` that starts at second `start_s` (one stack, one sample).
fn window(start_s: u64) -> Arc<Profile> {
    let (resource, _) = Resource::from_vars(Some("checkout"), None);
    let mut p = Profile::empty(resource, start_s * 1_000_000_000, 1_000_000_000, 10_000_000);
    p.frames = vec![Frame::new("handle", "/app/server.py", 7)];
    p.stacks = vec![Stack {
        frames: vec![0],
        truncated: false,
    }];
    p.samples = vec![
        ProfileSample::new(0, Arc::from("/r"), Arc::from("MainThread"))
            .with_cpu(3, 30_000_000)
            .with_wall(3, 30_000_000),
    ];
    Arc::new(p)
}

/// A receiver that answers every request `status` and notes each request's `from=` (the
/// window's start second, which Pyroscope's ingest API carries in the query).
fn receiver(status: u16) -> (String, Arc<Mutex<Vec<u64>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "pyroscope+http://user:hunter2@{}",
        listener.local_addr().unwrap()
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let noted = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let from = line
                .split(['?', '&', ' '])
                .find_map(|kv| kv.strip_prefix("from="))
                .and_then(|v| v.parse::<u64>().ok());
            let mut len = 0;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            if status == 200 {
                noted.lock().unwrap().extend(from);
            }
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (url, seen)
}

#[test]
fn push_sends_a_gone_agents_windows_once_in_order() {
    let spool = tempfile_dir();
    let now_s = common::unix_ns() / 1_000_000_000;
    let starts: Vec<u64> = (0..5).map(|i| now_s - 60 + i).collect();
    {
        // An agent whose receiver is down (nothing listens on the port) spools five windows.
        let dead = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", dead.local_addr().unwrap());
        drop(dead);
        let config = PyroscopeConfig::new(&url)
            .unwrap()
            .with_protocol(Protocol::Ingest)
            .with_delivery(
                DeliveryConfig::default()
                    .with_spool_dir(spool.join("pyroscope"))
                    .with_backoff(Duration::from_secs(30), Duration::from_secs(30)),
            );
        let agent = PyroscopeExporter::new(config).unwrap();
        for &s in &starts {
            let _ = agent.export(window(s));
        }
        agent.shutdown_with_timeout(Duration::from_millis(200)).ok();
        let s = agent.stats().delivery;
        assert_eq!(
            (s.windows, s.windows_waiting(), s.spooled),
            (5, 5, 5),
            "{s:?}"
        );
    }

    // A receiver that still fails: the entries stay, exit 4, and nothing is lost.
    let (failing, _) = receiver(503);
    let o = common::run(&["push", spool.to_str().unwrap(), &failing, "--timeout", "1"]);
    assert_eq!(o.status.code(), Some(4), "{}", common::stderr(&o));
    assert!(
        common::stdout(&o).contains("5 left"),
        "{}",
        common::stdout(&o)
    );

    let (url, seen) = receiver(200);
    let o = common::run(&["--json", "push", spool.to_str().unwrap(), &url]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let j = common::json(&common::stdout(&o));
    assert_eq!(
        (j["sent"].as_u64(), j["left"].as_u64()),
        (Some(5), Some(0)),
        "{j}"
    );
    assert_eq!(*seen.lock().unwrap(), starts, "every window once, in order");
    for out in [common::stdout(&o), common::stderr(&o)] {
        assert!(!out.contains("hunter2"), "{out}");
    }
    assert!(j["url"].as_str().unwrap().contains("user:***@"), "{j}");

    // Nothing is left for a second push.
    let o = common::run(&["push", spool.to_str().unwrap(), &url]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        common::stdout(&o).starts_with("sent 0 request(s)"),
        "{}",
        common::stdout(&o)
    );
    assert_eq!(seen.lock().unwrap().len(), 5);
}

/// A fresh directory under the system temp dir, removed by the OS.
fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "span-profile-push-{}-{}",
        std::process::id(),
        common::unix_ns()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
