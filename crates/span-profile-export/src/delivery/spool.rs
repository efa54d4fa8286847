//! The spool: the requests that wait to be sent, in submission order, in memory or as one
//! file each (`<seq>.req`: a magic line, a JSON header, the body; written under a temporary
//! name and renamed). It keeps its bounds by dropping the oldest entries and says how many it
//! dropped; the worker counts them. Headers (credentials) are not part of a [`Request`], so
//! they never reach the disk.

use std::collections::VecDeque;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::config::{DeliveryConfig, DeliveryError};

/// One HTTP POST, as spooled. Headers common to every request (credentials) are not part
/// of it: the [`Delivery`](super::Delivery) adds them when sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Path and query, appended to the delivery's base URL (e.g. `/push.v1.PusherService/Push`).
    pub path: String,
    /// `Content-Type`.
    pub content_type: String,
    /// `Content-Encoding` (`gzip`), if the body is compressed.
    pub content_encoding: Option<String>,
    /// End of the window the request carries, Unix nanoseconds (for the age check).
    pub window_end_unix_ns: u64,
    /// The body.
    pub body: Vec<u8>,
}

/// The spool: entries in submission order, in memory or one file each.
#[derive(Debug)]
pub(super) enum Spool {
    Memory {
        entries: VecDeque<Request>,
        bytes: u64,
    },
    Disk {
        dir: PathBuf,
        /// (sequence number, file size) in order.
        entries: VecDeque<(u64, u64)>,
        bytes: u64,
        next_seq: u64,
    },
}

const SPOOL_MAGIC: &[u8] = b"SPDL1\n";
const SPOOL_SUFFIX: &str = ".req";

#[derive(serde::Serialize, serde::Deserialize)]
struct SpoolHeader {
    path: String,
    content_type: String,
    content_encoding: Option<String>,
    window_end_unix_ns: u64,
}

impl Spool {
    pub(super) fn open(config: &DeliveryConfig) -> Result<Self, DeliveryError> {
        let Some(dir) = &config.spool_dir else {
            return Ok(Spool::Memory {
                entries: VecDeque::new(),
                bytes: 0,
            });
        };
        let err = |source| DeliveryError::Spool {
            dir: dir.clone(),
            source,
        };
        fs::create_dir_all(dir).map_err(err)?;
        let mut found = Vec::new();
        for entry in fs::read_dir(dir).map_err(err)? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') {
                // A temporary file from a crash mid-write.
                let _ = fs::remove_file(entry.path());
                continue;
            }
            let Some(seq) = name
                .strip_suffix(SPOOL_SUFFIX)
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            found.push((seq, size));
        }
        found.sort_unstable();
        let next_seq = found.last().map(|&(s, _)| s + 1).unwrap_or(0);
        let bytes = found.iter().map(|&(_, b)| b).sum();
        Ok(Spool::Disk {
            dir: dir.clone(),
            entries: found.into(),
            bytes,
            next_seq,
        })
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Spool::Memory { entries, .. } => entries.len(),
            Spool::Disk { entries, .. } => entries.len(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn in_memory(&self) -> bool {
        matches!(self, Spool::Memory { .. })
    }

    pub(super) fn bytes(&self) -> u64 {
        match self {
            Spool::Memory { bytes, .. } | Spool::Disk { bytes, .. } => *bytes,
        }
    }

    /// Appends `r`, then drops the oldest entries while over a bound (never the new one).
    /// Returns how many were dropped.
    pub(super) fn push(&mut self, r: Request, config: &DeliveryConfig) -> std::io::Result<u64> {
        match self {
            Spool::Memory { entries, bytes } => {
                *bytes += r.body.len() as u64;
                entries.push_back(r);
            }
            Spool::Disk {
                dir,
                entries,
                bytes,
                next_seq,
            } => {
                let seq = *next_seq;
                *next_seq += 1;
                let size = write_entry(dir, seq, &r)?;
                *bytes += size;
                entries.push_back((seq, size));
            }
        }
        let mut dropped = 0;
        while self.len() > 1
            && (self.len() > config.spool_max_entries || self.bytes() > config.spool_max_bytes)
        {
            self.pop();
            dropped += 1;
        }
        Ok(dropped)
    }

    /// The oldest entry, and how many unreadable entries were dropped on the way.
    pub(super) fn front(&mut self) -> (Option<Request>, u64) {
        let mut bad = 0;
        loop {
            match self {
                Spool::Memory { entries, .. } => return (entries.front().cloned(), bad),
                Spool::Disk { dir, entries, .. } => {
                    let Some(&(seq, _)) = entries.front() else {
                        return (None, bad);
                    };
                    match read_entry(dir, seq) {
                        Some(r) => return (Some(r), bad),
                        None => {
                            bad += 1;
                            self.pop();
                        }
                    }
                }
            }
        }
    }

    pub(super) fn pop(&mut self) {
        match self {
            Spool::Memory { entries, bytes } => {
                if let Some(r) = entries.pop_front() {
                    *bytes = bytes.saturating_sub(r.body.len() as u64);
                }
            }
            Spool::Disk {
                dir,
                entries,
                bytes,
                ..
            } => {
                if let Some((seq, size)) = entries.pop_front() {
                    *bytes = bytes.saturating_sub(size);
                    let _ = fs::remove_file(entry_path(dir, seq));
                }
            }
        }
    }
}

fn entry_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}{SPOOL_SUFFIX}"))
}

fn write_entry(dir: &Path, seq: u64, r: &Request) -> std::io::Result<u64> {
    let header = SpoolHeader {
        path: r.path.clone(),
        content_type: r.content_type.clone(),
        content_encoding: r.content_encoding.clone(),
        window_end_unix_ns: r.window_end_unix_ns,
    };
    let json = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
    let mut buf = Vec::with_capacity(SPOOL_MAGIC.len() + json.len() + 1 + r.body.len());
    buf.extend_from_slice(SPOOL_MAGIC);
    buf.extend_from_slice(&json);
    buf.push(b'\n');
    buf.extend_from_slice(&r.body);
    let tmp = dir.join(format!(".tmp-{seq:020}"));
    fs::write(&tmp, &buf)?;
    fs::rename(&tmp, entry_path(dir, seq))?;
    Ok(buf.len() as u64)
}

fn read_entry(dir: &Path, seq: u64) -> Option<Request> {
    let mut f = fs::File::open(entry_path(dir, seq)).ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    let rest = buf.strip_prefix(SPOOL_MAGIC)?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let header: SpoolHeader = serde_json::from_slice(&rest[..nl]).ok()?;
    Some(Request {
        path: header.path,
        content_type: header.content_type,
        content_encoding: header.content_encoding,
        window_end_unix_ns: header.window_end_unix_ns,
        body: rest[nl + 1..].to_vec(),
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use span_profile_core::internal::now_unix_ns;

    /// Request `n`: path `/p/<n>`, a body of 100 bytes `n`, a window that ends now.
    pub(in crate::delivery) fn req(n: usize) -> Request {
        Request {
            path: format!("/p/{n}"),
            content_type: "application/proto".into(),
            content_encoding: Some("gzip".into()),
            window_end_unix_ns: now_unix_ns(),
            body: vec![n as u8; 100],
        }
    }

    #[test]
    fn disk_spool_keeps_order_across_reopen_and_drops_oldest() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeliveryConfig::default()
            .with_spool_dir(dir.path())
            .with_spool_max_entries(3);
        let mut s = Spool::open(&config).unwrap();
        let mut dropped = 0;
        for n in 0..5 {
            dropped += s.push(req(n), &config).unwrap();
        }
        assert_eq!(dropped, 2);
        let mut s = Spool::open(&config).unwrap();
        assert_eq!(s.len(), 3);
        for n in 2..5 {
            let (r, bad) = s.front();
            let (r, want) = (r.unwrap(), req(n));
            assert_eq!((bad, &r.path, &r.body), (0, &want.path, &want.body));
            s.pop();
        }
        assert!(s.is_empty());
    }

    #[test]
    fn unreadable_spool_entries_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeliveryConfig::default().with_spool_dir(dir.path());
        let mut s = Spool::open(&config).unwrap();
        s.push(req(1), &config).unwrap();
        s.push(req(2), &config).unwrap();
        fs::write(entry_path(dir.path(), 0), b"garbage").unwrap();
        let (r, bad) = s.front();
        assert_eq!(bad, 1);
        assert_eq!(r.unwrap().path, "/p/2");
    }
}
