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
//! ignored; a window without a usable summary is decoded instead ([`FileStore::read_summary`]).
//!
//! The first write of a [`FileStore`] removes what killed writers left: `.tmp-*` files and
//! summaries without a window, older than [`STALE_AFTER`] ([`FileStore::stale_files_removed`]).

use crate::civil::{civil_from_days, days_from_civil};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, SystemTime};

use span_profile_core::query::{SummaryScope, WindowSummary};
use span_profile_core::{ExportError, Exporter, Profile, SpanScope};

use crate::summary::{self, encode_summary, SummaryError, MAX_SUMMARY_LEN};
use crate::{decode_pprof, encode_pprof, write_pprof, DecodeError, MAX_DECOMPRESSED_LEN};

/// File name suffix of stored windows.
pub const FILE_SUFFIX: &str = ".pb.gz";
/// Suffix added to a window's file name to name its summary: `<name>.pb.gz.summary`.
pub const SUMMARY_SUFFIX: &str = ".summary";
/// Prefix of files being written; readers skip them.
pub const TEMP_PREFIX: &str = ".tmp-";
/// How old a `.tmp-*` file or a summary without its window must be before a new writer
/// removes it as left by a killed writer (a live writer renames its files within seconds).
pub const STALE_AFTER: Duration = Duration::from_secs(600);
/// Longest sanitized path component, in bytes.
const MAX_COMPONENT_LEN: usize = 100;
const NS_PER_MS: u64 = 1_000_000;
const NS_PER_DAY: u64 = 86_400 * 1_000_000_000;

/// An [`Exporter`] that writes each window to a local directory tree.
///
/// ```
/// use std::sync::Arc;
/// use span_profile_core::{Exporter, Profile, Resource};
/// use span_profile_export::{FileStore, StoreFilter};
///
/// let dir = std::env::temp_dir().join(format!("span-profile-doc-{}", std::process::id()));
/// let store = FileStore::new(&dir);
/// let window = Profile::empty(Resource::default(), 1_700_000_000_000_000_000, 10_000_000_000, 10_000_000);
/// store.export(Arc::new(window.clone())).unwrap();
///
/// let read = FileStore::read(&dir, &StoreFilter::default()).unwrap();
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

/// Which stored windows to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreFilter {
    /// Only this service (compared after sanitizing); `None` for all.
    pub service: Option<String>,
    /// Only windows that start at or after this time, Unix nanoseconds.
    pub since_unix_ns: Option<u64>,
    /// Only windows that start before this time, Unix nanoseconds.
    pub until_unix_ns: Option<u64>,
}

/// A stored window found by [`FileStore::list`], known from its path alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    /// Full path of the `.pb.gz`.
    pub path: PathBuf,
    /// The service directory (sanitized service name).
    pub service: String,
    /// The sanitized instance from the file name.
    pub instance: String,
    /// Window start from the file name, Unix milliseconds.
    pub start_unix_ms: u64,
    /// Sequence number from the file name.
    pub seq: u64,
    /// File size in bytes.
    pub len: u64,
}

/// The windows [`FileStore::read`] decoded, and the files it could not read.
#[derive(Debug, Default)]
pub struct StoreRead {
    /// Decoded windows, by start time.
    pub profiles: Vec<Profile>,
    /// Files that were skipped, with the reason.
    pub skipped: Vec<SkippedFile>,
}

/// What [`FileStore::list`] found: stored windows by start time, and what it could not read.
#[derive(Debug, Default)]
pub struct StoreListing {
    /// Stored windows that pass the filter, by start time (then service, instance, seq).
    pub files: Vec<StoredFile>,
    /// Subdirectories or files whose metadata could not be read.
    pub skipped: Vec<SkippedFile>,
}

/// A file or directory that [`FileStore::read`] or [`FileStore::list`] could not read.
#[derive(Debug)]
pub struct SkippedFile {
    /// The file or directory.
    pub path: PathBuf,
    /// Why.
    pub error: StoreError,
}

/// Errors of the file store's read side.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file or directory could not be read.
    #[error("cannot read {}: {source}; check that it exists and is readable", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A file is larger than any window could be.
    #[error("{} is {len} bytes, more than the {limit}-byte limit; not a span-profile window?", path.display())]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// Its size.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// A service or day folder, or a window file, whose name is not UTF-8. The store writes
    /// only ASCII names ([`sanitize_component`]), so something else put it there.
    #[error("{} is skipped: its name is not UTF-8, so span-profile did not write it (rename or remove it)", path.display())]
    NotUtf8 {
        /// The path.
        path: PathBuf,
    },
    /// A file is not a decodable profile (truncated, corrupt, or not pprof).
    #[error("cannot decode {}: {source}", path.display())]
    Decode {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        source: DecodeError,
    },
    /// A window's summary does not decode; the window file itself can still be read.
    #[error("cannot decode the summary {}: {source}; queries decode its window file instead (delete the summary to silence this)", path.display())]
    Summary {
        /// The summary's path.
        path: PathBuf,
        /// What is wrong.
        source: SummaryError,
    },
    /// A window's summary was written for another version of its window file.
    #[error("the summary {} was written for a {recorded}-byte window file, but the window file is {actual} bytes; queries decode the window file instead (delete the stale summary)", path.display())]
    StaleSummary {
        /// The summary's path.
        path: PathBuf,
        /// The window file's length recorded in the summary.
        recorded: u64,
        /// The window file's length now.
        actual: u64,
    },
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

    /// Lists stored windows that pass `filter`, judged from paths alone (nothing is decoded),
    /// by start time. Unreadable subdirectories are returned as skipped.
    ///
    /// An error means the root directory itself cannot be read.
    pub fn list(dir: impl AsRef<Path>, filter: &StoreFilter) -> Result<StoreListing, StoreError> {
        let dir = dir.as_ref();
        let mut files = Vec::new();
        let mut skipped = Vec::new();
        let want_service = filter.service.as_deref().map(sanitize_component);
        let since_day = filter.since_unix_ns.map(|t| t / NS_PER_DAY);
        let until_day = filter.until_unix_ns.map(|t| t / NS_PER_DAY);
        let (services, odd) =
            read_dir_listing(dir, |p| p.is_dir()).map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        skipped.extend(odd.into_iter().map(not_utf8_skip));
        for service in services {
            if want_service.as_ref().is_some_and(|w| *w != service) {
                continue;
            }
            let service_dir = dir.join(&service);
            if !service_dir.is_dir() {
                continue;
            }
            let days = match read_dir_listing(&service_dir, |p| p.is_dir()) {
                Ok((d, odd)) => {
                    skipped.extend(odd.into_iter().map(not_utf8_skip));
                    d
                }
                Err(source) => {
                    skipped.push(io_skip(service_dir, source));
                    continue;
                }
            };
            for day in days {
                // Skip whole days outside the range; names that are not dates are still read.
                if let Some(d) = parse_date(&day) {
                    if since_day.is_some_and(|s| d < s) || until_day.is_some_and(|u| d > u) {
                        continue;
                    }
                }
                let day_dir = service_dir.join(&day);
                if !day_dir.is_dir() {
                    continue;
                }
                let names = match read_dir_listing(&day_dir, looks_stored) {
                    Ok((n, odd)) => {
                        skipped.extend(odd.into_iter().map(not_utf8_skip));
                        n
                    }
                    Err(source) => {
                        skipped.push(io_skip(day_dir, source));
                        continue;
                    }
                };
                for name in names {
                    let Some((start_unix_ms, instance, seq)) = parse_file_name(&name) else {
                        continue;
                    };
                    if !in_range(filter, start_unix_ms) {
                        continue;
                    }
                    let path = day_dir.join(&name);
                    let len = match fs::metadata(&path) {
                        Ok(m) if m.is_file() => m.len(),
                        Ok(_) => continue,
                        Err(source) => {
                            skipped.push(io_skip(path, source));
                            continue;
                        }
                    };
                    files.push(StoredFile {
                        path,
                        service: service.clone(),
                        instance: instance.to_owned(),
                        start_unix_ms,
                        seq,
                        len,
                    });
                }
            }
        }
        files.sort_by(|a, b| {
            (a.start_unix_ms, &a.service, &a.instance, a.seq).cmp(&(
                b.start_unix_ms,
                &b.service,
                &b.instance,
                b.seq,
            ))
        });
        Ok(StoreListing { files, skipped })
    }

    /// Reads and decodes the stored windows that pass `filter`, by start time. Files are
    /// chosen by their names first; corrupt or truncated files are skipped and listed, never
    /// fatal. An error means the root directory itself cannot be read.
    pub fn read(dir: impl AsRef<Path>, filter: &StoreFilter) -> Result<StoreRead, StoreError> {
        let StoreListing { files, skipped } = Self::list(dir, filter)?;
        let mut out = StoreRead {
            profiles: Vec::with_capacity(files.len()),
            skipped,
        };
        for f in files {
            match read_one(&f) {
                Ok(p) => {
                    // The name has millisecond precision; apply the filter exactly.
                    let start = p.start_unix_ns;
                    if filter.since_unix_ns.is_none_or(|s| start >= s)
                        && filter.until_unix_ns.is_none_or(|u| start < u)
                    {
                        out.profiles.push(p);
                    }
                }
                Err(error) => out.skipped.push(SkippedFile {
                    path: f.path,
                    error,
                }),
            }
        }
        out.profiles.sort_by_key(|p| p.start_unix_ns);
        Ok(out)
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

impl FileStore {
    /// Reads and decodes one stored window listed by [`FileStore::list`].
    pub fn read_file(f: &StoredFile) -> Result<Profile, StoreError> {
        read_one(f)
    }

    /// Reads the summary of one stored window: `Ok(None)` when it has none, an error when the
    /// summary is unreadable, corrupt, or was written for another version of the window file
    /// (its recorded length differs). On an error, decode the window with
    /// [`FileStore::read_file`] instead.
    ///
    /// Only what `scope` needs is decoded (see
    /// [`decode_summary_scoped`](crate::decode_summary_scoped)).
    pub fn read_summary(
        f: &StoredFile,
        scope: &SummaryScope,
    ) -> Result<Option<WindowSummary>, StoreError> {
        let path = summary_path(&f.path);
        let bytes = match read_capped(&path, MAX_SUMMARY_LEN) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        let stored = match summary::decode(bytes.into(), scope) {
            Ok(s) => s,
            Err(source) => return Err(StoreError::Summary { path, source }),
        };
        if stored.pprof_len != f.len {
            return Err(StoreError::StaleSummary {
                path,
                recorded: stored.pprof_len,
                actual: f.len,
            });
        }
        Ok(Some(stored.summary))
    }
}

/// The summary file of the window file at `window`: the same name with [`SUMMARY_SUFFIX`].
///
/// ```
/// use std::path::Path;
/// let p = span_profile_export::summary_path(Path::new("svc/2024-05-01/1714521600000-a-0.pb.gz"));
/// assert_eq!(p, Path::new("svc/2024-05-01/1714521600000-a-0.pb.gz.summary"));
/// ```
pub fn summary_path(window: &Path) -> PathBuf {
    let mut s = window.as_os_str().to_owned();
    s.push(SUMMARY_SUFFIX);
    PathBuf::from(s)
}

/// Reads a file of at most `limit` bytes; a longer one is an error.
fn read_capped(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    let f = fs::File::open(path)?;
    let mut bytes = Vec::new();
    f.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than {limit} bytes; not a span-profile summary"),
        ));
    }
    Ok(bytes)
}

fn read_one(f: &StoredFile) -> Result<Profile, StoreError> {
    if f.len > MAX_DECOMPRESSED_LEN {
        return Err(StoreError::TooLarge {
            path: f.path.clone(),
            len: f.len,
            limit: MAX_DECOMPRESSED_LEN,
        });
    }
    let bytes = fs::read(&f.path).map_err(|source| StoreError::Io {
        path: f.path.clone(),
        source,
    })?;
    decode_pprof(&bytes).map_err(|source| StoreError::Decode {
        path: f.path.clone(),
        source,
    })
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
/// length. If the streamed meta comment fails ([`write_pprof`]'s `Other` error, never an I/O
/// error), the file is written again from [`encode_pprof`], which holds it.
fn write_window(path: &Path, profile: &Profile) -> io::Result<u64> {
    write_window_with(path, profile, write_pprof)
}

/// [`write_window`], streaming with `stream` (a test stands in for [`write_pprof`] to make
/// the streamed meta comment fail).
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

fn io_skip(path: PathBuf, source: io::Error) -> SkippedFile {
    SkippedFile {
        error: StoreError::Io {
            path: path.clone(),
            source,
        },
        path,
    }
}

/// Names in a directory that are valid UTF-8 and do not start with `.`.
fn read_dir_names(dir: &Path) -> io::Result<Vec<String>> {
    read_dir_listing(dir, |_| false).map(|(names, _)| names)
}

/// [`read_dir_names`], and the paths of the entries whose names are not UTF-8 and that
/// `report` picks out (those that look like what the store holds at this level).
fn read_dir_listing(
    dir: &Path,
    report: impl Fn(&Path) -> bool,
) -> io::Result<(Vec<String>, Vec<PathBuf>)> {
    let (mut names, mut not_utf8) = (Vec::new(), Vec::new());
    for entry in fs::read_dir(dir)? {
        let raw = entry?.file_name();
        // A lossy copy is enough to tell a hidden name or a window's suffix.
        let lossy = raw.to_string_lossy();
        if lossy.starts_with('.') {
            continue;
        }
        match raw.to_str() {
            Some(name) => names.push(name.to_owned()),
            None => {
                let path = dir.join(&raw);
                if report(&path) {
                    not_utf8.push(path);
                }
            }
        }
    }
    Ok((names, not_utf8))
}

/// A non-UTF-8 entry worth a note: a folder, or a file named like a window.
fn looks_stored(path: &Path) -> bool {
    path.is_dir()
        || path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with(FILE_SUFFIX))
}

fn not_utf8_skip(path: PathBuf) -> SkippedFile {
    SkippedFile {
        error: StoreError::NotUtf8 { path: path.clone() },
        path,
    }
}

fn in_range(filter: &StoreFilter, start_ms: u64) -> bool {
    // The file's window starts in [start_ms, start_ms + 1) milliseconds.
    let lo = start_ms.saturating_mul(NS_PER_MS);
    let hi = lo.saturating_add(NS_PER_MS - 1);
    filter.since_unix_ns.is_none_or(|s| hi >= s) && filter.until_unix_ns.is_none_or(|u| lo < u)
}

/// Makes `s` safe as one path component: keeps ASCII letters, digits, `-`, `_` and `.`,
/// replaces everything else (including `/`, `\`, control characters and non-ASCII) with
/// `_`, never starts with `.` (no `..`, no hidden or temp names), is never empty, and is at
/// most 100 bytes.
///
/// ```
/// use span_profile_export::sanitize_component;
/// assert_eq!(sanitize_component("checkout"), "checkout");
/// assert_eq!(sanitize_component("../etc/passwd"), "_._etc_passwd");
/// assert_eq!(sanitize_component(""), "_");
/// assert_eq!(sanitize_component("a\nb/c"), "a_b_c");
/// ```
pub fn sanitize_component(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(MAX_COMPONENT_LEN)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with('.') {
        out.replace_range(..1, "_");
    }
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// `<start_ms>-<instance>-<seq>.pb.gz` → its parts.
fn parse_file_name(name: &str) -> Option<(u64, &str, u64)> {
    let stem = name.strip_suffix(FILE_SUFFIX)?;
    let (start, rest) = stem.split_once('-')?;
    let (instance, seq) = rest.rsplit_once('-')?;
    if start.is_empty() || !start.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((start.parse().ok()?, instance, seq.parse().ok()?))
}

/// The UTC date of a Unix time, `YYYY-MM-DD`.
fn utc_date(unix_ns: u64) -> String {
    let (y, m, d) = civil_from_days((unix_ns / NS_PER_DAY) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM-DD` → days since 1970-01-01, if it is a date on or after 1970-01-01.
fn parse_date(s: &str) -> Option<u64> {
    let mut it = s.splitn(3, '-');
    let y: i64 = it.next()?.parse().ok()?;
    let m: u32 = it.next()?.parse().ok()?;
    let d: u32 = it.next()?.parse().ok()?;
    if s.len() != 10 || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    u64::try_from(days_from_civil(y, m, d)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(utc_date(0), "1970-01-01");
        // 2024-02-29T23:59:59Z
        assert_eq!(utc_date(1_709_251_199 * 1_000_000_000), "2024-02-29");
        assert_eq!(utc_date(1_709_251_200 * 1_000_000_000), "2024-03-01");
        for days in [0u64, 59, 365, 11_016, 19_782, 30_000] {
            let s = utc_date(days * NS_PER_DAY);
            assert_eq!(parse_date(&s), Some(days), "{s}");
        }
        assert_eq!(parse_date("2024-13-01"), None);
        assert_eq!(parse_date("x"), None);
    }

    #[test]
    fn file_names_parse_back() {
        assert_eq!(
            parse_file_name("1700000000000-host-1-42.pb.gz"),
            Some((1_700_000_000_000, "host-1", 42))
        );
        assert_eq!(parse_file_name(".tmp-1-a-2"), None);
        assert_eq!(parse_file_name("x-a-1.pb.gz"), None);
        assert_eq!(parse_file_name("1-a-1.pb"), None);
    }

    /// A streamed write that puts out part of a file, then fails as [`write_pprof`] does when
    /// the two passes over the meta comment disagree (`kind`: `Other`), or as the disk does.
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

    #[test]
    fn components_cannot_escape() {
        for bad in ["..", ".", "/", "a/../b", "\u{0}", "é", ".tmp-x"] {
            let s = sanitize_component(bad);
            assert!(
                !s.contains('/') && !s.starts_with('.') && s.is_ascii(),
                "{s}"
            );
            assert!(!s.chars().any(char::is_control));
        }
        assert_eq!(sanitize_component(&"x".repeat(500)).len(), 100);
    }
}
