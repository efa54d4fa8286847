//! The errors of the store's read side, and the files a listing or a read skipped.

use std::io;
use std::path::PathBuf;

use crate::store::sidecar::SummaryError;
use crate::DecodeError;

/// A file or directory that [`read`](crate::store::read) or [`list`](crate::store::list) could not read.
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
    /// only ASCII names ([`sanitize_component`](crate::sanitize_component)), so something else put it there.
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
