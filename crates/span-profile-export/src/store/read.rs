//! Reading the store: decoding stored windows, and reading their summaries (ADR 0006).

use std::fs;
use std::io;
use std::path::Path;

use span_profile_core::Profile;

use crate::decode::{decode_leased, Access, DecodeBudget, Refusal};
use crate::layout::summary_path;
use crate::store::error::{SkippedFile, StoreError};
use crate::store::list::{list, StoreFilter, StoreListing, StoredFile};
use crate::store::sidecar::{self, MAX_SUMMARY_LEN};
use crate::store::summary::{SummaryScope, WindowSummary};
use crate::{DecodeError, MAX_DECOMPRESSED_LEN};

/// The windows [`read`] decoded, and the files it could not read.
#[derive(Debug, Default)]
pub struct StoreRead {
    /// Decoded windows, by start time.
    pub profiles: Vec<Profile>,
    /// Files that were skipped, with the reason.
    pub skipped: Vec<SkippedFile>,
}

/// Reads and decodes the stored windows that pass `filter`, by start time. Files are
/// chosen by their names first; corrupt or truncated files are skipped and listed, never
/// fatal. An error means the root directory itself cannot be read.
pub fn read(dir: impl AsRef<Path>, filter: &StoreFilter) -> Result<StoreRead, StoreError> {
    let StoreListing { files, skipped } = list(dir, filter)?;
    let mut out = StoreRead {
        profiles: Vec::with_capacity(files.len()),
        skipped,
    };
    for f in files {
        match read_window(&f) {
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

/// Reads and decodes one stored window listed by [`list`], in at most
/// [`MAX_DECOMPRESSED_LEN`] bytes of memory for the file and its decompressed form. To share
/// that memory among threads, read through a [`Store`](crate::store::Store)
/// ([`Store::read_window`](crate::store::Store::read_window)).
pub fn read_window(f: &StoredFile) -> Result<Profile, StoreError> {
    read_window_within(f, &DecodeBudget::new(MAX_DECOMPRESSED_LEN))
}

/// [`read_window`], with the file's bytes and its decompressed form reserved from `budget`:
/// beside the other threads' decodes first, and alone if it does not fit beside them.
pub(crate) fn read_window_within(
    f: &StoredFile,
    budget: &DecodeBudget,
) -> Result<Profile, StoreError> {
    let limit = budget.limit();
    if f.len > limit {
        return Err(StoreError::TooLarge {
            path: f.path.clone(),
            len: f.len,
            limit,
        });
    }
    for access in [Access::Shared, Access::Alone] {
        let mut lease = budget.lease(access);
        // The file's length now: it may have grown since it was listed.
        let len = fs::metadata(&f.path).map_or(f.len, |m| m.len());
        if !lease.reserve(len) {
            if lease.refused() == Some(Refusal::Busy) {
                continue;
            }
            return Err(StoreError::TooLarge {
                path: f.path.clone(),
                len,
                limit,
            });
        }
        let bytes = read_capped(&f.path, len, len).map_err(|source| StoreError::Io {
            path: f.path.clone(),
            source,
        })?;
        match decode_leased(&bytes, &mut lease) {
            Err(DecodeError::TooLarge { .. }) if lease.refused() == Some(Refusal::Busy) => continue,
            r => {
                return r.map_err(|source| StoreError::Decode {
                    path: f.path.clone(),
                    source,
                })
            }
        }
    }
    // Alone, a refusal is never `Busy`: the loop has returned.
    Err(StoreError::Decode {
        path: f.path.clone(),
        source: DecodeError::TooLarge { limit },
    })
}

/// Reads the summary of one stored window: `Ok(None)` when it has none, an error when the
/// summary is unreadable, corrupt, or was written for another version of the window file
/// (its recorded length differs). On an error, decode the window with
/// [`read_window`] instead.
///
/// Only what `scope` needs is decoded (see
/// [`decode_summary_scoped`](crate::store::decode_summary_scoped)).
pub fn read_summary(
    f: &StoredFile,
    scope: &SummaryScope,
) -> Result<Option<WindowSummary>, StoreError> {
    read_summary_within(f, scope, &DecodeBudget::new(MAX_DECOMPRESSED_LEN))
}

/// [`read_summary`], with the summary's bytes reserved from `budget` while it is decoded.
pub(crate) fn read_summary_within(
    f: &StoredFile,
    scope: &SummaryScope,
    budget: &DecodeBudget,
) -> Result<Option<WindowSummary>, StoreError> {
    let path = summary_path(&f.path);
    let len = match fs::metadata(&path) {
        Ok(m) => m.len().min(MAX_SUMMARY_LEN + 1),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StoreError::Io { path, source }),
    };
    let mut lease = budget.lease(Access::Shared);
    if !lease.reserve(len) {
        drop(lease);
        lease = budget.lease(Access::Alone);
        // MAX_SUMMARY_LEN is far below any budget the store uses; if not, read it uncounted.
        let _ = lease.reserve(len);
    }
    let bytes = match read_capped(&path, MAX_SUMMARY_LEN, len) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StoreError::Io { path, source }),
    };
    let stored = match sidecar::decode(bytes.into(), scope) {
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

/// Reads a file of at most `limit` bytes into a buffer of `capacity` bytes first (its
/// expected length); a longer file is an error.
fn read_capped(path: &Path, limit: u64, capacity: u64) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    let f = fs::File::open(path)?;
    let mut bytes = Vec::with_capacity(capacity.min(limit).saturating_add(1) as usize);
    f.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the file is longer than {limit} bytes (a span-profile summary or window is not, or it grew while read)"),
        ));
    }
    Ok(bytes)
}
