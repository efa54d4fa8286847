//! The file store: one gzip pprof file per window, in a directory tree by service and day.
//!
//! Layout: `<dir>/<service>/<YYYY-MM-DD>/<start_unix_ms>-<instance>-<seq>.pb.gz`, where the
//! day is the window start's UTC date, `service` and `instance` are sanitized (see
//! [`sanitize_component`]) and `seq` tells apart windows of one instance that start in the
//! same millisecond. Files are written as `.tmp-…` in the same directory, fsynced and renamed,
//! so a crash never leaves a torn `.pb.gz`; readers ignore names starting with `.`.
//!
//! Next to each window, `<name>.pb.gz.summary` holds its [`WindowSummary`] (ADR 0006), written
//! the same way just before the window is renamed into place. A summary without its window is
//! ignored; a window without a usable summary is decoded instead
//! ([`store::read_summary`](crate::store::read_summary)).
//!
//! Reading the store back is [`crate::store`]'s job; this module only writes it.
//!
//! The first write of a [`FileStore`] removes what killed writers left: `.tmp-*` files and
//! summaries without a window, older than [`STALE_AFTER`] ([`FileStore::stale_files_removed`]).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, SystemTime};

use span_profile_core::{ExportError, Exporter, Profile, SpanScope};

use crate::layout::{
    read_dir_names, sanitize_component, summary_path, utc_date, FILE_SUFFIX, NS_PER_MS,
    SUMMARY_SUFFIX, TEMP_PREFIX,
};
use crate::store::encode_summary;
use crate::store::summary::WindowSummary;
use crate::{encode_pprof, write_pprof};

/// How old a `.tmp-*` file or a summary without its window must be before a new writer
/// removes it as left by a killed writer (a live writer renames its files within seconds).
pub const STALE_AFTER: Duration = Duration::from_secs(600);

/// An [`Exporter`] that writes each window to a local directory tree.
///
/// ```
/// use std::sync::Arc;
/// use span_profile_core::{Exporter, Profile, Resource};
/// use span_profile_export::store::{self, StoreFilter};
/// use span_profile_export::FileStore;
///
/// let dir = std::env::temp_dir().join(format!("span-profile-doc-{}", std::process::id()));
/// let store = FileStore::new(&dir);
/// let window = Profile::empty(Resource::default(), 1_700_000_000_000_000_000, 10_000_000_000, 10_000_000);
/// store.export(Arc::new(window.clone())).unwrap();
///
/// let read = store::read(&dir, &StoreFilter::default()).unwrap();
/// assert_eq!(read.profiles, vec![window]);
/// assert!(read.skipped.is_empty());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    seq: AtomicU64,
    shut_down: AtomicBool,
    /// The sweep of stale files, run before the first write.
    sweep: Once,
    stale_temp_files: AtomicU64,
    stale_summaries: AtomicU64,
}

/// Files left by killed writers that a [`FileStore`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StaleFiles {
    /// `.tmp-*` files (a write that never reached its rename).
    pub temp_files: u64,
    /// Summaries whose window file is missing (a write killed between the two renames).
    pub orphan_summaries: u64,
}

impl FileStore {
    /// A store rooted at `dir`; directories are created as windows are written.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            seq: AtomicU64::new(0),
            shut_down: AtomicBool::new(false),
            sweep: Once::new(),
            stale_temp_files: AtomicU64::new(0),
            stale_summaries: AtomicU64::new(0),
        }
    }

    /// What this store removed as left by killed writers: by its first write (files older than
    /// [`STALE_AFTER`]) and by [`FileStore::remove_stale_files`].
    pub fn stale_files_removed(&self) -> StaleFiles {
        // Relaxed: independent counters, read for reporting.
        StaleFiles {
            temp_files: self.stale_temp_files.load(Ordering::Relaxed),
            orphan_summaries: self.stale_summaries.load(Ordering::Relaxed),
        }
    }

    /// Removes `.tmp-*` files and summaries without a window file that are older than
    /// `older_than`, in every service and day directory of the store, and returns what it
    /// removed (also added to [`FileStore::stale_files_removed`]). Best effort: what cannot be
    /// read or removed is left. The first [`FileStore::write`] runs this with [`STALE_AFTER`].
    pub fn remove_stale_files(&self, older_than: Duration) -> StaleFiles {
        let now = SystemTime::now();
        let stale = |path: &Path| {
            fs::symlink_metadata(path)
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > older_than))
        };
        let mut removed = StaleFiles::default();
        let subdirs = |d: &Path| {
            read_dir_names(d)
                .unwrap_or_default()
                .into_iter()
                .map(|n| d.join(n))
                .filter(|p| p.is_dir())
                .collect::<Vec<_>>()
        };
        for day_dir in subdirs(&self.dir).iter().flat_map(|s| subdirs(s)) {
            let Ok(entries) = fs::read_dir(&day_dir) else {
                continue;
            };
            let names: Vec<String> = entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            for name in &names {
                let counter = if name.starts_with(TEMP_PREFIX) {
                    &mut removed.temp_files
                } else if name.strip_suffix(SUMMARY_SUFFIX).is_some_and(|window| {
                    window.ends_with(FILE_SUFFIX) && !names.iter().any(|n| n == window)
                }) {
                    &mut removed.orphan_summaries
                } else {
                    continue;
                };
                let path = day_dir.join(name);
                if stale(&path) && fs::remove_file(&path).is_ok() {
                    *counter += 1;
                }
            }
        }
        // Relaxed: independent counters, read for reporting.
        self.stale_temp_files
            .fetch_add(removed.temp_files, Ordering::Relaxed);
        self.stale_summaries
            .fetch_add(removed.orphan_summaries, Ordering::Relaxed);
        removed
    }

    /// The root directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes one window (gzip pprof) and its summary atomically and returns the window's path.
    ///
    /// This is what [`Exporter::export`] does; it blocks on file I/O and fsync. The summary is
    /// renamed into place first, then the window; if the window cannot be written, neither is
    /// left. If only the summary cannot be written, the window is still written (queries then
    /// decode it).
    pub fn write(&self, profile: &Profile) -> Result<PathBuf, ExportError> {
        self.sweep.call_once(|| {
            self.remove_stale_files(STALE_AFTER);
        });
        let day_dir = self
            .dir
            .join(sanitize_component(&profile.resource.service))
            .join(utc_date(profile.start_unix_ns));
        fs::create_dir_all(&day_dir).map_err(|e| failure("create directory", &day_dir, &e))?;
        let instance =
            sanitize_component(profile.resource.instance.as_deref().unwrap_or("unknown"));
        let start_ms = profile.start_unix_ns / NS_PER_MS;

        // Relaxed: the counter only has to hand out distinct numbers.
        let mut seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut path;
        loop {
            path = day_dir.join(format!("{start_ms}-{instance}-{seq}{FILE_SUFFIX}"));
            if !path.exists() {
                break;
            }
            seq = self.seq.fetch_add(1, Ordering::Relaxed);
        }
        let tmp_name = format!(
            "{TEMP_PREFIX}{start_ms}-{instance}-{seq}-{}",
            std::process::id()
        );
        // The window goes to its temporary file first, streamed (a busy window's file is
        // megabytes, and the export runs while the next window fills): the summary records
        // its length. Then the summary is renamed into place, then the window.
        let tmp = day_dir.join(&tmp_name);
        let len = match write_window(&tmp, profile) {
            Ok(len) => len,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(failure("write", &tmp, &e));
            }
        };
        let summary = encode_summary(&WindowSummary::from_profile(profile), len);
        let summary_path = summary_path(&path);
        let has_summary = write_renamed(
            &day_dir.join(format!("{tmp_name}{SUMMARY_SUFFIX}")),
            &summary,
            &summary_path,
        )
        .is_ok();
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            if has_summary {
                let _ = fs::remove_file(&summary_path);
            }
            return Err(failure("write", &tmp, &e));
        }
        // Make the renames durable. Not every platform can open or sync a directory; the
        // files themselves are already complete, so a failure here is not reported.
        if let Ok(d) = fs::File::open(&day_dir) {
            let _ = d.sync_all();
        }
        Ok(path)
    }
}

impl Exporter for FileStore {
    /// Writes the window and its summary; returns when both are on disk.
    fn export(&self, profile: Arc<Profile>) -> Result<(), ExportError> {
        // Acquire pairs with the Release in shutdown: no write starts after shutdown returns.
        if self.shut_down.load(Ordering::Acquire) {
            return Err(ExportError::AlreadyShutdown);
        }
        self.write(&profile).map(|_| ())
    }

    fn force_flush(&self) -> Result<(), ExportError> {
        // Every write is fsynced before export returns; nothing is buffered.
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> Result<(), ExportError> {
        self.shut_down.store(true, Ordering::Release);
        Ok(())
    }

    /// Every sample is stored under the span that was innermost.
    fn span_scope(&self) -> SpanScope {
        SpanScope::All
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Writes `profile` to a new file at `path` as gzip pprof, streamed, syncs it and returns its
/// length. If the streamed meta document fails ([`write_pprof`]'s `Other` error, never an I/O
/// error), the file is written again from [`encode_pprof`], which holds it.
fn write_window(path: &Path, profile: &Profile) -> io::Result<u64> {
    write_window_with(path, profile, write_pprof)
}

/// [`write_window`], streaming with `stream` (a test stands in for [`write_pprof`] to make
/// the streamed meta document fail).
fn write_window_with<S>(path: &Path, profile: &Profile, stream: S) -> io::Result<u64>
where
    S: FnOnce(&Profile, io::BufWriter<fs::File>) -> io::Result<io::BufWriter<fs::File>>,
{
    let streamed = || -> io::Result<fs::File> {
        let f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)?;
        let w = stream(profile, io::BufWriter::with_capacity(64 * 1024, f))?;
        w.into_inner().map_err(io::IntoInnerError::into_error)
    };
    let f = match streamed() {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::Other => {
            fs::remove_file(path)?;
            let bytes = encode_pprof(profile);
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)?;
            f.write_all(&bytes)?;
            f
        }
        Err(e) => return Err(e),
    };
    f.sync_all()?;
    Ok(f.metadata()?.len())
}

/// Writes `bytes` to `tmp`, syncs it and renames it to `to`; removes `tmp` on failure.
fn write_renamed(tmp: &Path, bytes: &[u8], to: &Path) -> io::Result<()> {
    let r = write_synced(tmp, bytes).and_then(|()| fs::rename(tmp, to));
    if r.is_err() {
        let _ = fs::remove_file(tmp);
    }
    r
}

fn failure(what: &str, path: &Path, e: &io::Error) -> ExportError {
    ExportError::InternalFailure(format!(
        "file store: cannot {what} {}: {e}; check that the directory is writable and the disk is not full",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streamed write that puts out part of a file, then fails as [`write_pprof`] does when
    /// the two passes over the meta document disagree (`kind`: `Other`), or as the disk does.
    fn fails_midway(
        kind: io::ErrorKind,
    ) -> impl FnOnce(&Profile, io::BufWriter<fs::File>) -> io::Result<io::BufWriter<fs::File>> {
        move |_, mut w| {
            w.write_all(b"\x1f\x8b part of a window")?;
            w.flush()?;
            Err(io::Error::new(kind, "streamed write failed"))
        }
    }

    #[test]
    fn a_failed_streamed_meta_comment_writes_the_window_whole_from_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("window.pb.gz");
        let p = Profile::empty(span_profile_core::Resource::default(), 1_000, 10_000, 10);
        let len = write_window_with(&path, &p, fails_midway(io::ErrorKind::Other)).unwrap();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(
            bytes,
            crate::encode_pprof(&p),
            "the held encoding, not the partial one"
        );
        assert_eq!(len, bytes.len() as u64);
        assert_eq!(crate::decode_pprof(&bytes).unwrap(), p);
    }

    #[test]
    fn an_io_error_while_streaming_is_returned_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("window.pb.gz");
        let p = Profile::empty(span_profile_core::Resource::default(), 1_000, 10_000, 10);
        let e = write_window_with(&path, &p, fails_midway(io::ErrorKind::StorageFull));
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::StorageFull);
    }
}
