//! Reading the file store: listing by file name, then decoding on several threads, each
//! thread folding the windows it decodes into its own accumulator, so that a query over a
//! day of windows never holds the day in memory.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::Context as _;
use span_profile_core::query::Filter;
use span_profile_core::Profile;
use span_profile_export::{
    FileStore, SkippedFile, StoreError, StoreFilter, StoreListing, StoredFile,
};

const MS_PER_HOUR: u64 = 3_600_000;
const MS_PER_DAY: u64 = 24 * MS_PER_HOUR;
const NS_PER_MS: u64 = 1_000_000;

/// A store directory and how many threads decode it.
#[derive(Debug)]
pub(crate) struct Store<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) threads: usize,
    skipped: Mutex<Vec<SkippedFile>>,
}

impl<'a> Store<'a> {
    pub(crate) fn new(dir: &'a Path, threads: usize) -> Self {
        Self {
            dir,
            threads: threads.max(1),
            skipped: Mutex::new(Vec::new()),
        }
    }

    /// The files that can hold windows passing `filter`'s service and time range, judged
    /// from their names. A raw window is at most an hour long and a roll-up at most a day, so
    /// before `since` only files up to an hour earlier, or starting on a UTC day boundary
    /// (a daily roll-up) up to a day earlier, can overlap.
    pub(crate) fn list(&self, filter: &Filter) -> anyhow::Result<Vec<StoredFile>> {
        let store_filter = StoreFilter {
            service: filter.service.clone(),
            since_unix_ns: filter
                .since_unix_ns
                .map(|t| t.saturating_sub(MS_PER_DAY * NS_PER_MS)),
            until_unix_ns: filter.until_unix_ns,
        };
        let StoreListing { mut files, skipped } = FileStore::list(self.dir, &store_filter)
            .with_context(|| format!("cannot list the store {}", self.dir.display()))?;
        self.note_skipped(skipped);
        if let Some(since) = filter.since_unix_ns {
            let since_ms = since / NS_PER_MS;
            files.retain(|f| {
                f.start_unix_ms + MS_PER_HOUR > since_ms || f.start_unix_ms % MS_PER_DAY == 0
            });
        }
        Ok(files)
    }

    /// Decodes `files` on the store's threads. Each thread starts from `init()` and calls
    /// `step(acc, index, window)` for every window it decodes (`index` into `files`); the
    /// accumulators come back in no particular order. Unreadable files are skipped and noted.
    pub(crate) fn fold<A: Send>(
        &self,
        files: &[StoredFile],
        init: impl Fn() -> A + Sync,
        step: impl Fn(&mut A, usize, Profile) + Sync,
    ) -> Vec<A> {
        let next = AtomicUsize::new(0);
        let threads = self.threads.min(files.len()).max(1);
        let work = || {
            let mut acc = init();
            let mut skipped = Vec::new();
            loop {
                // Relaxed: the counter only hands out distinct indices; the files are shared
                // read-only and results are joined through the scope.
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(f) = files.get(i) else { break };
                match read_one(f) {
                    Ok(p) => step(&mut acc, i, p),
                    Err(error) => skipped.push(SkippedFile {
                        path: f.path.clone(),
                        error,
                    }),
                }
            }
            (acc, skipped)
        };
        let results: Vec<(A, Vec<SkippedFile>)> = if threads == 1 {
            vec![work()]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                    .collect()
            })
        };
        results
            .into_iter()
            .map(|(acc, skipped)| {
                self.note_skipped(skipped);
                acc
            })
            .collect()
    }

    fn note_skipped(&self, mut skipped: Vec<SkippedFile>) {
        if skipped.is_empty() {
            return;
        }
        // A poisoned lock still holds a valid list.
        let mut all = self
            .skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.append(&mut skipped);
    }

    /// Prints one warning for the skipped files on stderr (the first few with their reason).
    pub(crate) fn warn_skipped(&self) {
        let all = self
            .skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if all.is_empty() {
            return;
        }
        eprintln!(
            "warning: skipped {} unreadable file(s) in {} (corrupt, truncated or unreadable); the answer leaves them out",
            all.len(),
            self.dir.display()
        );
        for s in all.iter().take(5) {
            eprintln!("  {}", s.error);
        }
        if all.len() > 5 {
            eprintln!("  … and {} more", all.len() - 5);
        }
    }
}

/// Reads and decodes one stored window, as [`FileStore::read`] does for each file.
pub(crate) fn read_one(f: &StoredFile) -> Result<Profile, StoreError> {
    FileStore::read_file(f)
}
