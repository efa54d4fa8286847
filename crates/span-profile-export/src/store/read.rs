//! Reading the store: decoding stored windows, and reading their summaries (ADR 0006).

use std::fs;
use std::io;
use std::path::Path;

use span_profile_core::Profile;

use crate::layout::summary_path;
use crate::store::error::{SkippedFile, StoreError};
use crate::store::list::{list, StoreFilter, StoreListing, StoredFile};
use crate::store::sidecar::{self, MAX_SUMMARY_LEN};
use crate::store::summary::{SummaryScope, WindowSummary};
use crate::{decode_pprof, MAX_DECOMPRESSED_LEN};

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

/// Reads and decodes one stored window listed by [`list`].
pub fn read_window(f: &StoredFile) -> Result<Profile, StoreError> {
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
    let path = summary_path(&f.path);
    let bytes = match read_capped(&path, MAX_SUMMARY_LEN) {
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
