//! Listing the store: which stored windows can hold what a question selects, judged from
//! their paths alone (service, day and start time); nothing is decoded.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::layout::{
    parse_date, parse_file_name, read_dir_listing, sanitize_component, FILE_SUFFIX, NS_PER_DAY,
    NS_PER_MS,
};
use crate::store::error::{SkippedFile, StoreError};

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

/// A stored window found by [`list`], known from its path alone.
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

/// What [`list`] found: stored windows by start time, and what it could not read.
#[derive(Debug, Default)]
pub struct StoreListing {
    /// Stored windows that pass the filter, by start time (then service, instance, seq).
    pub files: Vec<StoredFile>,
    /// Subdirectories or files whose metadata could not be read.
    pub skipped: Vec<SkippedFile>,
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

fn io_skip(path: PathBuf, source: io::Error) -> SkippedFile {
    SkippedFile {
        error: StoreError::Io {
            path: path.clone(),
            source,
        },
        path,
    }
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
