//! The spool: the requests that wait to be sent, in submission order, in memory or as one
//! file each (`<seq>.req`: a magic line, a JSON header, the body; written under a temporary
//! name and renamed). It keeps its bounds by dropping the oldest entries and says which it
//! dropped; the worker counts them. Headers (credentials) are not part of a [`Request`], so
//! they never reach the disk.
//!
//! # Sharing a spool directory (ADR 0027)
//!
//! Every process spools into a folder of its own, `<spool_dir>/run-<start ns>-<pid>/`, and
//! holds an exclusive `flock` on its `lock` file for as long as it runs (the folder is made
//! under a dot-name, locked, then renamed, so nobody sees it unlocked). At open, a new spool
//! claims every other `run-*` folder whose lock it can take (its process is gone) and sends
//! those entries first, oldest folder first, each in its own order; a folder whose owner still
//! runs is left alone. So two processes sharing one directory never send the same entry, and a
//! restart resumes where the last process stopped.

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

/// Which window of this process an entry belongs to; `None` on an [`Entry`] found on disk
/// from an earlier process (its windows are that process's to account for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Part {
    /// The window's number in this delivery.
    pub(super) window: u64,
    /// The window's last request.
    pub(super) last: bool,
}

/// What the spool knows of an entry without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    /// The entry's number in this spool (a handle for [`Spool::pop_if`]).
    pub(super) id: u64,
    pub(super) part: Option<Part>,
}

#[derive(Debug)]
pub(super) struct DiskEntry {
    entry: Entry,
    path: PathBuf,
    size: u64,
}

/// A folder of the spool directory held under an exclusive `flock`.
#[derive(Debug)]
pub(super) struct Held {
    dir: PathBuf,
    /// Holds the lock while open.
    _lock: fs::File,
}

/// The spool: entries in submission order, in memory or one file each.
#[derive(Debug)]
pub(super) enum Spool {
    Memory {
        entries: VecDeque<(Entry, Request)>,
        bytes: u64,
        next_id: u64,
    },
    Disk {
        /// This process's folder.
        own: Held,
        /// Folders of gone processes whose entries are sent first.
        claimed: Vec<Held>,
        entries: VecDeque<DiskEntry>,
        bytes: u64,
        next_id: u64,
    },
}

const SPOOL_MAGIC: &[u8] = b"SPDL1\n";
const SPOOL_SUFFIX: &str = ".req";
const RUN_PREFIX: &str = "run-";
const LOCK_FILE: &str = "lock";

#[derive(serde::Serialize, serde::Deserialize)]
struct SpoolHeader {
    path: String,
    content_type: String,
    content_encoding: Option<String>,
    window_end_unix_ns: u64,
}

/// Takes the exclusive lock of `dir/lock` without waiting; `None` if another process holds it.
fn try_lock(dir: &Path) -> std::io::Result<Option<fs::File>> {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The `.req` entries of `dir`, oldest first, as (sequence, path, size).
fn entries_of(dir: &Path) -> Vec<(u64, PathBuf, u64)> {
    let Ok(list) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in list.flatten() {
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
        found.push((seq, entry.path(), size));
    }
    found.sort_unstable();
    found
}

/// Removes a claimed folder that holds no entry any more (lock file last, still locked).
fn remove_folder(dir: &Path) {
    if entries_of(dir).is_empty() {
        let _ = fs::remove_file(dir.join(LOCK_FILE));
        let _ = fs::remove_dir(dir);
    }
}

impl Spool {
    pub(super) fn open(config: &DeliveryConfig) -> Result<Self, DeliveryError> {
        let Some(root) = &config.spool_dir else {
            return Ok(Spool::Memory {
                entries: VecDeque::new(),
                bytes: 0,
                next_id: 0,
            });
        };
        let err = |source| DeliveryError::Spool {
            dir: root.clone(),
            source,
        };
        fs::create_dir_all(root).map_err(err)?;
        // Our own folder: made under a dot-name, locked, then renamed, so no other process
        // ever sees it unlocked and claims it.
        let name = format!(
            "{RUN_PREFIX}{:020}-{}",
            span_profile_core::internal::now_unix_ns(),
            std::process::id()
        );
        let tmp = root.join(format!(".{name}"));
        fs::create_dir_all(&tmp).map_err(err)?;
        let lock = try_lock(&tmp).map_err(err)?.ok_or_else(|| {
            err(std::io::Error::other(
                "a new spool folder is locked by another process",
            ))
        })?;
        let own_dir = root.join(&name);
        fs::rename(&tmp, &own_dir).map_err(err)?;
        let own = Held {
            dir: own_dir,
            _lock: lock,
        };
        // Folders of processes that are gone, oldest first (the names sort by start time).
        let mut others: Vec<PathBuf> = fs::read_dir(root)
            .map_err(err)?
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(RUN_PREFIX))
                    && e.path() != own.dir
            })
            .map(|e| e.path())
            .collect();
        others.sort();
        let mut claimed = Vec::new();
        let mut entries = VecDeque::new();
        let (mut bytes, mut next_id) = (0, 0);
        for dir in others {
            let Ok(Some(lock)) = try_lock(&dir) else {
                continue;
            };
            let found = entries_of(&dir);
            if found.is_empty() {
                remove_folder(&dir);
                continue;
            }
            for (_, path, size) in found {
                bytes += size;
                entries.push_back(DiskEntry {
                    entry: Entry {
                        id: next_id,
                        part: None,
                    },
                    path,
                    size,
                });
                next_id += 1;
            }
            claimed.push(Held { dir, _lock: lock });
        }
        Ok(Spool::Disk {
            own,
            claimed,
            entries,
            bytes,
            next_id,
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

    pub(super) fn bytes(&self) -> u64 {
        match self {
            Spool::Memory { bytes, .. } | Spool::Disk { bytes, .. } => *bytes,
        }
    }

    /// This process's folder (`None` for a memory spool).
    #[cfg(test)]
    pub(super) fn own_dir(&self) -> Option<&Path> {
        match self {
            Spool::Memory { .. } => None,
            Spool::Disk { own, .. } => Some(&own.dir),
        }
    }

    /// Appends `r`, then drops the oldest entries while over a bound (never the new one).
    /// Returns the entries dropped.
    pub(super) fn push(
        &mut self,
        r: Request,
        part: Part,
        config: &DeliveryConfig,
    ) -> std::io::Result<Vec<Entry>> {
        match self {
            Spool::Memory {
                entries,
                bytes,
                next_id,
            } => {
                *bytes += r.body.len() as u64;
                entries.push_back((
                    Entry {
                        id: *next_id,
                        part: Some(part),
                    },
                    r,
                ));
                *next_id += 1;
            }
            Spool::Disk {
                own,
                entries,
                bytes,
                next_id,
                ..
            } => {
                let id = *next_id;
                let (path, size) = write_entry(&own.dir, id, &r)?;
                *next_id += 1;
                *bytes += size;
                entries.push_back(DiskEntry {
                    entry: Entry {
                        id,
                        part: Some(part),
                    },
                    path,
                    size,
                });
            }
        }
        let mut dropped = Vec::new();
        while self.len() > 1
            && (self.len() > config.spool_max_entries || self.bytes() > config.spool_max_bytes)
        {
            dropped.extend(self.pop());
        }
        Ok(dropped)
    }

    /// The oldest entry, and the unreadable entries dropped on the way.
    pub(super) fn front(&mut self) -> (Option<(Entry, Request)>, Vec<Entry>) {
        let mut bad = Vec::new();
        loop {
            match self {
                Spool::Memory { entries, .. } => {
                    return (entries.front().map(|(e, r)| (*e, r.clone())), bad)
                }
                Spool::Disk { entries, .. } => {
                    let Some(head) = entries.front() else {
                        return (None, bad);
                    };
                    match read_entry(&head.path) {
                        Some(r) => return (Some((head.entry, r)), bad),
                        None => bad.extend(self.pop()),
                    }
                }
            }
        }
    }

    /// Removes the oldest entry if it is `id` (a concurrent bound may have dropped it).
    pub(super) fn pop_if(&mut self, id: u64) -> Option<Entry> {
        let head = match self {
            Spool::Memory { entries, .. } => entries.front().map(|(e, _)| e.id),
            Spool::Disk { entries, .. } => entries.front().map(|e| e.entry.id),
        };
        if head == Some(id) {
            self.pop()
        } else {
            None
        }
    }

    /// Removes every entry of a memory spool (at shutdown); a disk spool keeps its entries.
    pub(super) fn drain_memory(&mut self) -> Vec<Entry> {
        match self {
            Spool::Memory { entries, bytes, .. } => {
                *bytes = 0;
                entries.drain(..).map(|(e, _)| e).collect()
            }
            Spool::Disk { .. } => Vec::new(),
        }
    }

    /// Lets go of a disk spool's folders (their locks), leaving the entries on disk for the
    /// next process or delivery over the directory; this spool is empty afterwards.
    pub(super) fn release(&mut self) {
        if let Spool::Disk { own, .. } = self {
            // An empty folder of ours is not left behind for the next process to clean up.
            remove_folder(&own.dir);
            *self = Spool::Memory {
                entries: VecDeque::new(),
                bytes: 0,
                next_id: u64::MAX / 2,
            };
        }
    }

    /// Removes the oldest entry.
    pub(super) fn pop(&mut self) -> Option<Entry> {
        match self {
            Spool::Memory { entries, bytes, .. } => {
                let (e, r) = entries.pop_front()?;
                *bytes = bytes.saturating_sub(r.body.len() as u64);
                Some(e)
            }
            Spool::Disk {
                claimed,
                entries,
                bytes,
                ..
            } => {
                let head = entries.pop_front()?;
                *bytes = bytes.saturating_sub(head.size);
                let _ = fs::remove_file(&head.path);
                // A claimed folder whose last entry this was is removed, lock and all.
                let folder = head.path.parent().map(Path::to_path_buf);
                let next = entries.front().and_then(|e| e.path.parent());
                if let Some(folder) = folder {
                    if next != Some(folder.as_path()) {
                        if let Some(i) = claimed.iter().position(|h| h.dir == folder) {
                            remove_folder(&folder);
                            claimed.remove(i);
                        }
                    }
                }
                Some(head.entry)
            }
        }
    }
}

fn write_entry(dir: &Path, seq: u64, r: &Request) -> std::io::Result<(PathBuf, u64)> {
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
    let path = dir.join(format!("{seq:020}{SPOOL_SUFFIX}"));
    fs::write(&tmp, &buf)?;
    fs::rename(&tmp, &path)?;
    Ok((path, buf.len() as u64))
}

fn read_entry(path: &Path) -> Option<Request> {
    let mut f = fs::File::open(path).ok()?;
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

    /// The one-request window `n`.
    pub(in crate::delivery) fn part(n: usize) -> Part {
        Part {
            window: n as u64,
            last: true,
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
            dropped += s.push(req(n), part(n), &config).unwrap().len();
        }
        assert_eq!(dropped, 2);
        drop(s);
        let mut s = Spool::open(&config).unwrap();
        assert_eq!(s.len(), 3);
        for n in 2..5 {
            let (r, bad) = s.front();
            let ((e, r), want) = (r.unwrap(), req(n));
            assert_eq!(e.part, None, "an earlier process's entry");
            assert_eq!((bad.len(), &r.path, &r.body), (0, &want.path, &want.body));
            s.pop();
        }
        assert!(s.is_empty());
        // The claimed folder is gone; only our own is left.
        let folders: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(folders.len(), 1, "{folders:?}");
        assert_eq!(folders[0].path(), s.own_dir().unwrap());
    }

    #[test]
    fn a_folder_whose_process_still_runs_is_not_claimed() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeliveryConfig::default().with_spool_dir(dir.path());
        let mut first = Spool::open(&config).unwrap();
        first.push(req(1), part(1), &config).unwrap();
        // `first` holds its lock (flock locks belong to the open file, so a second open in the
        // same process is refused just as another process would be).
        let second = Spool::open(&config).unwrap();
        assert!(second.is_empty(), "{second:?}");
        drop(first);
        let mut third = Spool::open(&config).unwrap();
        assert_eq!(third.len(), 1);
        assert_eq!(third.front().0.unwrap().1.path, "/p/1");
    }

    #[test]
    fn unreadable_spool_entries_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeliveryConfig::default().with_spool_dir(dir.path());
        let mut s = Spool::open(&config).unwrap();
        s.push(req(1), part(1), &config).unwrap();
        s.push(req(2), part(2), &config).unwrap();
        let own = s.own_dir().unwrap().to_path_buf();
        fs::write(own.join(format!("{:020}{SPOOL_SUFFIX}", 0)), b"garbage").unwrap();
        let (r, bad) = s.front();
        assert_eq!(bad.len(), 1);
        assert_eq!(r.unwrap().1.path, "/p/2");
    }
}
